"""Cost of every `attnlens analyze` analyzer over a corpus, against a bare HF forward.

Prints (DESIGN.md targets):
- time of one pass feeding all analyzers (including their result tables) / time of a bare
  Hugging Face forward (SDPA) over the same batches: target <= 2.0;
- peak memory (max RSS, each in a fresh process) on 2,001 sentences / on 200: target <= 1.1.

The corpus is the text of UD English EWT dev (../shared/data) when present, else the
embedded sample treebank repeated. MiniLM, batch 16, max length 128, 2 threads.

    python benchmarks/analyze_corpus.py [--sentences 2001] [--skip-memory]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import torch

SHARED_UD = Path(__file__).resolve().parents[2] / "shared/data/ud-ewt/en_ewt-ud-dev.conllu"


def corpus(tokenizer, sentences: int, batch_size: int, max_length: int):
    from attnlens.data.corpus import corpus_batches

    treebank = str(SHARED_UD) if SHARED_UD.is_file() else None
    batches, name = corpus_batches(
        tokenizer, text=None, treebank=treebank, batch_size=batch_size, max_length=max_length
    )
    kept, count = [], 0
    while count < sentences:  # repeat the (small) embedded sample if needed
        for batch in batches:
            if count >= sentences:
                break
            kept.append(batch)
            count += int(batch.input_ids.shape[0])
    return kept, name, count


def run_all_analyzers(model, tokenizer, batches) -> float:
    from attnlens.analysis.runner import run_analyzers
    from attnlens.report.analyze import default_sections

    start = time.perf_counter()
    analyzers = [a for s in default_sections() for a in s.analyzers(model, tokenizer)]
    run_analyzers(model, batches, analyzers, show_progress=False)
    for analyzer in analyzers:
        analyzer.result()
    return time.perf_counter() - start


@torch.no_grad()
def bare_hf_forward(path: str, batches) -> float:
    from transformers import AutoModel

    hf = AutoModel.from_pretrained(path).eval()
    start = time.perf_counter()
    for batch in batches:
        hf(**batch.model_inputs())
    return time.perf_counter() - start


def peak_rss_mib(sentences: int) -> float:
    """Peak RSS of a fresh process that loads MiniLM and runs every analyzer."""
    out = subprocess.run(
        [sys.executable, __file__, "--memory-child", str(sentences)],
        capture_output=True, text=True, check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])["peak_rss_mib"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=2001)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--skip-memory", action="store_true")
    parser.add_argument("--memory-child", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    import attnlens

    model, tokenizer = attnlens.load()
    if args.memory_child:
        batches, _, _ = corpus(tokenizer, args.memory_child, 16, 128)
        run_all_analyzers(model, tokenizer, batches)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(json.dumps({"peak_rss_mib": peak}))
        return

    batches, name, count = corpus(tokenizer, args.sentences, 16, 128)
    tokens = sum(int(b.attention_mask.sum()) for b in batches)
    print(f"corpus: {name}, {count} sentences, {tokens} tokens")
    hf_seconds = bare_hf_forward(model.cfg.source["path"], batches)
    ours = run_all_analyzers(model, tokenizer, batches)
    print(f"bare HF forward:        {hf_seconds:7.1f} s")
    print(f"all analyzers, 1 pass:  {ours:7.1f} s")
    print(f"ratio analyzers / bare HF forward: {ours / hf_seconds:.2f}  (target <= 2.0)")
    if not args.skip_memory:
        small, large = peak_rss_mib(200), peak_rss_mib(2001)
        print(f"peak RSS 200 sentences: {small:.0f} MiB; 2,001 sentences: {large:.0f} MiB")
        print(f"ratio peak memory 2,001 / 200: {large / small:.3f}  (target <= 1.1)")


if __name__ == "__main__":
    main()
