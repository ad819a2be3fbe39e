"""Cost of the rollout, sparse-coverage and linear-attention analyzers against a forward pass.

Prints, on MiniLM over UD English EWT dev (../shared/data; else the embedded sample treebank
repeated), batch 16, max length 128:

- a bare HF forward (SDPA) over the batches (the baseline of DESIGN.md's analyze target);
- the attnlens forward feeding a do-nothing analyzer that reads every attention pattern
  (what any pattern analyzer pays: the manual attention path);
- the same forward feeding each of RolloutAnalyzer (report settings), SparseCoverage and
  LinearAttentionView on every sentence, and the three with the report's settings (sparse and
  linear on 4 sentences per batch, 512 in all), with results;
- ratios of each to the bare HF forward, and attention flow's time per sentence of 20-40
  tokens.

    python benchmarks/newviews.py [--sentences 2001] [--threads 2]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from anywhere

from attnlens.stream.base import Analyzer, pattern_hook_names
from benchmarks.analyze_corpus import SHARED_UD, corpus_batches, hf_forward_seconds

REPORT = {"per_batch": 4, "max_sentences": 512}  # what `attnlens analyze` runs


def corpus(tokenizer, sentences: int):
    """Batches of 16 (max length 128) of UD EWT dev (else the sample treebank, repeated) up to
    ``sentences`` sentences: (batches, corpus name, sentence count)."""
    treebank = SHARED_UD if SHARED_UD.is_file() else None
    batches = corpus_batches(tokenizer, treebank)
    kept, count = [], 0
    while count < sentences:  # repeat the (small) embedded sample if needed
        for batch in batches:
            if count >= sentences:
                break
            kept.append(batch)
            count += batch.size
    return kept, str(treebank or "embedded sample treebank"), count


class ReadPatterns(Analyzer):
    """Reads every pattern and does nothing: the cost of caching them."""

    layerwise = True

    def hook_names(self, model):
        return pattern_hook_names(model)

    def update_layer(self, batch, layer, cache):
        pass

    def result(self):
        return {}


def timed(model, batches, analyzers) -> float:
    from attnlens.stream.runner import run_analyzers

    start = time.perf_counter()
    run_analyzers(model, batches, analyzers, show_progress=False)
    for analyzer in analyzers:
        analyzer.result()
    return time.perf_counter() - start


def flow_seconds_per_sentence(model, tokenizer, batches) -> tuple[float, int]:
    """Attention flow over the first batch whose sentences all have 20 to 40 tokens."""
    from attnlens.measures.rollout.flow import FlowAnalyzer

    for batch in batches:
        lengths = batch.lengths
        if bool(((lengths >= 20) & (lengths <= 40)).all()):
            flow = FlowAnalyzer.for_model(model, tokenizer, keep=None, max_tokens=40)
            seconds = timed(model, [batch], [flow])
            return seconds / max(len(flow.kept), 1), len(flow.kept)
    return float("nan"), 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=2001)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    import attnlens
    from attnlens.measures.linear.linear_attention import LinearAttentionView
    from attnlens.measures.rollout.rollout import RolloutAnalyzer
    from attnlens.measures.sparse.sparse import SparseCoverage

    model, tokenizer = attnlens.load()
    batches, name, count = corpus(tokenizer, args.sentences)
    print(f"corpus: {name}, {count} sentences")
    hf = hf_forward_seconds(model.cfg.source["path"], batches)
    print(f"bare HF forward (SDPA): {hf:7.2f} s")
    runs = {
        "read every pattern": lambda: [ReadPatterns()],
        "rollout (report)": lambda: [RolloutAnalyzer.for_model(model, tokenizer, keep=2)],
        "sparse (all)": lambda: [SparseCoverage.for_model(model)],
        "linear (all)": lambda: [LinearAttentionView.for_model(model)],
        "all three (report)": lambda: [
            RolloutAnalyzer.for_model(model, tokenizer, keep=2),
            SparseCoverage.for_model(model, **REPORT),
            LinearAttentionView.for_model(model, **REPORT),
        ],
    }
    for label, make in runs.items():
        seconds = timed(model, batches, make())
        print(f"{label:20s} {seconds:7.2f} s   ratio to bare HF forward {seconds / hf:.2f}")
    per, solved = flow_seconds_per_sentence(model, tokenizer, batches)
    print(f"attention flow: {per:.2f} s per sentence of 20-40 tokens ({solved} sentences)")


if __name__ == "__main__":
    main()
