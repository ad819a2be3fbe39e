"""Padding waste with and without length bucketing; throughput at batch 1, 16 and 64.

- Padding waste: the share of token slots in the padded batches that are padding, for the
  corpus cut into batches in its own order against attnlens' length-sorted batches
  (``data.text.length_sorted_chunks``), at batch 16 and 64.
- Throughput: sentences per second of the analyzer pass (every analyzer of `attnlens analyze`
  fed by one forward per batch, tables included) and of a bare HF SDPA forward, over the same
  first ``--sentences`` sentences of the corpus (UD EWT dev, else the sample treebank) in
  length-sorted batches of 1, 16 and 64, and in batches of a token budget (``--batch-size 64
  --batch-tokens 1024``); the ratio analyzers / bare forward per batching.

    python benchmarks/batching.py [--threads 2] [--sentences 256]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

import attnlens.data.corpus as corpus_module
import attnlens.data.words as words

BUDGET = (64, 1024)  # --batch-size, --batch-tokens of the token-budget row
SHARED_UD = Path(__file__).resolve().parents[2] / "shared/data/ud-ewt/en_ewt-ud-dev.conllu"


def in_order(lengths, batch_size, batch_tokens=None):
    """Corpus-order batches: no length bucketing (and no token budget: the rows that use it
    ask for none)."""
    return [list(range(i, min(i + batch_size, len(lengths))))
            for i in range(0, len(lengths), batch_size)]


def padding_waste(batches) -> float:
    real = sum(int(b.attention_mask.sum()) for b in batches)
    slots = sum(b.attention_mask.numel() for b in batches)
    return 1 - real / slots


def corpus():
    treebank = str(SHARED_UD) if SHARED_UD.is_file() else None
    return corpus_module.load_corpus(text=None, treebank=treebank)


def first(batches, sentences: int):
    kept, seen = [], 0
    for batch in batches:
        if seen >= sentences:
            break
        kept.append(batch)
        seen += batch.size
    return kept, seen


@torch.no_grad()
def hf_seconds(hf, batches) -> float:
    start = time.perf_counter()
    for batch in batches:
        hf(**batch.model_inputs())
    return time.perf_counter() - start


def analyzer_seconds(model, tokenizer, batches) -> float:
    from attnlens.report.analyze import default_sections
    from attnlens.stream.runner import run_analyzers

    start = time.perf_counter()
    analyzers = [a for s in default_sections() for a in s.analyzers(model, tokenizer)]
    run_analyzers(model, batches, analyzers, show_progress=False)
    for analyzer in analyzers:
        analyzer.result()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--sentences", type=int, default=256)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    from transformers import AutoModel

    import attnlens

    model, tokenizer = attnlens.load()
    data = corpus()
    print(f"corpus {data.name}, {args.threads} threads")
    print(f"{'batch':>6} {'waste, corpus order':>20} {'waste, length-sorted':>21}")
    budget = f"{BUDGET[0]}/{BUDGET[1]}t"
    budget_batches = data.batches(tokenizer, BUDGET[0], 128, BUDGET[1])
    for size in (16, 64):
        sorted_batches = data.batches(tokenizer, batch_size=size, max_length=128)
        original = words.length_sorted_chunks
        words.length_sorted_chunks = in_order
        try:
            plain = data.batches(tokenizer, batch_size=size, max_length=128)
        finally:
            words.length_sorted_chunks = original
        print(f"{size:>6} {padding_waste(plain):>20.1%} {padding_waste(sorted_batches):>21.1%}")
    print(f"{budget:>6} {'':>20} {padding_waste(budget_batches):>21.1%}  (token budget)")
    hf = AutoModel.from_pretrained(model.cfg.source["path"], attn_implementation="sdpa",
                                   dtype=torch.float32).eval()
    print(f"\nthroughput over the first {args.sentences} sentences (sentences per second)")
    print(f"{'batch':>6} {'analyzers':>10} {'bare HF forward':>16} {'ratio':>6}")
    for size in (1, 16, 64, budget):
        made = (budget_batches if size == budget
                else data.batches(tokenizer, batch_size=size, max_length=128))
        batches, seen = first(made, args.sentences)
        hf_seconds(hf, batches[:2])  # warm-up
        ours = seen / analyzer_seconds(model, tokenizer, batches)
        bare = seen / hf_seconds(hf, batches)
        print(f"{size:>6} {ours:>10.1f} {bare:>16.1f} {bare / ours:>6.2f}")


if __name__ == "__main__":
    main()
