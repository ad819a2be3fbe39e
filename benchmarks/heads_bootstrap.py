"""Cost of the head-role statistics: the bootstrap over sentences and the per-sentence state.

One pass of MiniLM over UD English EWT dev (../shared/data; else the embedded sample)
feeding the `attnlens heads` analyzers, then their tables computed with ``--bootstrap 0``
and with N replicates from the same state. Prints:

- the corpus pass (forward + analyzers) time;
- tables time with the bootstrap off and with N replicates, and the bootstrap's extra time
  as a ratio to the corpus pass (the bootstrap must not multiply the run time by N);
- the per-sentence state each analyzer holds (bytes of its ``state_dict`` tensors and
  lists), and its share of the per-sentence rows.

    python benchmarks/heads_bootstrap.py [--sentences 2001] [--bootstrap 1000] [--clusters]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

SHARED_UD = Path(__file__).resolve().parents[2] / "shared/data/ud-ewt/en_ewt-ud-dev.conllu"


def state_bytes(analyzer) -> int:
    """Bytes of an analyzer's state: tensors, plus 8 per number and 16 per string in lists."""
    total = 0
    for value in analyzer.state_dict()["state"].values():
        if isinstance(value, torch.Tensor):
            total += value.numel() * value.element_size()
        elif isinstance(value, list):
            total += sum(16 if isinstance(v, str) else 8 for v in value)
        elif isinstance(value, dict):
            total += 64 * len(value)
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=2001)
    parser.add_argument("--bootstrap", type=int, default=1000)
    parser.add_argument("--clusters", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(2)

    import attnlens
    from attnlens.data.conllu import read_conllu, sample_treebank
    from attnlens.data.words import treebank_batches
    from attnlens.measures.heads.section import HeadRolesSection
    from attnlens.stats.bootstrap import Inference
    from attnlens.stream.runner import run_analyzers

    model, tokenizer = attnlens.load()
    sentences = read_conllu(SHARED_UD) if SHARED_UD.is_file() else sample_treebank()
    sentences = sentences[: args.sentences]
    batches = treebank_batches(tokenizer, sentences, batch_size=16, max_length=512)
    section = HeadRolesSection(clusters=args.clusters, inference=Inference(bootstrap=0))
    analyzers = section.analyzers(model, tokenizer)
    start = time.perf_counter()
    run_analyzers(model, batches, analyzers, show_progress=False)
    corpus_pass = time.perf_counter() - start

    timings = {}
    for n in (0, args.bootstrap):
        inference = Inference(bootstrap=n)
        section.inference = inference
        for analyzer in analyzers:
            if hasattr(analyzer, "inference"):
                analyzer.inference = inference
        start = time.perf_counter()
        section.tables(model, analyzers)
        timings[n] = time.perf_counter() - start
    extra = timings[args.bootstrap] - timings[0]
    print(f"{len(sentences)} sentences, {len(batches)} batches, MiniLM, 2 threads")
    print(f"corpus pass (forward + analyzers)      {corpus_pass:8.2f} s")
    print(f"tables, --bootstrap 0                  {timings[0]:8.2f} s")
    print(f"tables, --bootstrap {args.bootstrap:<5d}              {timings[args.bootstrap]:8.2f} s")
    print(f"bootstrap's extra time / corpus pass   {extra / corpus_pass:8.3f}")
    print("per-sentence state (state_dict):")
    for analyzer in analyzers:
        print(f"  {type(analyzer).__name__:<16s} {state_bytes(analyzer) / 2**20:8.2f} MiB")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
