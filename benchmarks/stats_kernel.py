"""Head statistics' and head examples' C kernel against their torch path.

Both analyzers as the heads section makes them (sharing each block's per-row values), over
the same cached MiniLM activations of the first ``--sentences`` UD EWT dev sentences
(batches as ``analyze`` makes them: at most 64 sentences and ``--batch-tokens`` padded
tokens), fed through one feeder as the runner feeds them, in two forms that alternate batch
by batch (same load on a shared machine):

- ``torch``: the torch path (the extension hidden): a dozen torch operations per layer
  (the code before stats38);
- ``kernel``: the C kernel, one pass over each row per layer (the code now).

Prints each form's CPU seconds (``--wall``: wall time), the largest relative difference of
the head statistics' sums (kernel against torch) and whether the head examples' picks
(sentence, query, key of every kept example) are the same.

    python benchmarks/stats_kernel.py [--sentences 2001] [--threads 1] [--batch-tokens 1024]
        [--wall] [--profile {torch,kernel}]

``--profile FORM``: then that form once more over every batch under cProfile (the 12
functions of most own time).
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from corpus_pass import SHARED_UD, load_batches

from attnlens.measures.heads import head_stats as module
from attnlens.measures.heads.examples import HeadExamples
from attnlens.measures.heads.head_stats import HeadStats


def feed(model, analyzers, batch, cache) -> None:
    """One batch's cached activations to ``analyzers`` through one feeder, as the runner."""
    from attnlens.stream.feeder import LayerFeeder

    feeder = LayerFeeder(model, analyzers)
    feeder.begin(batch)
    wanted = set(feeder.names)
    for name, x in cache.items():  # the forward's order
        if name in wanted:
            feeder.save_as(name, x)
    feeder.end()


def pair(model, tokenizer) -> list:
    return [HeadStats.for_model(model, tokenizer), HeadExamples.for_model(model, tokenizer)]


def picks(examples: HeadExamples) -> list[list]:
    """Every kept example's (sentence, query, key, window start) as lists."""
    return [t.tolist() for t in (examples.top_sentence, examples.top_query, examples.top_key,
                                 examples.top_start)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=2001)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--batch-tokens", type=int, default=1024)
    parser.add_argument("--wall", action="store_true")
    parser.add_argument("--profile", choices=["torch", "kernel"])
    args = parser.parse_args()
    kernel = module._stats_kernel
    if kernel is None:
        raise SystemExit("the head statistics kernel is not built")
    torch.set_num_threads(args.threads)
    import attnlens

    model, tokenizer = attnlens.load()
    batches, _ = load_batches(tokenizer, model, SHARED_UD, args.sentences, 64,
                              args.batch_tokens)
    with torch.no_grad():
        caches = [model.run_with_cache(**batch.model_inputs())[1] for batch in batches]
    forms = {"torch": None, "kernel": kernel}
    analyzers = {name: pair(model, tokenizer) for name in forms}
    spent = dict.fromkeys(forms, 0.0)
    clock = time.perf_counter if args.wall else time.process_time
    names = list(forms)
    with torch.no_grad():
        for i, (batch, cache) in enumerate(zip(batches, caches, strict=True)):
            for name in names[i % 2:] + names[: i % 2]:
                module._stats_kernel = forms[name]
                start = clock()
                feed(model, analyzers[name], batch, cache)
                spent[name] += clock() - start
    module._stats_kernel = kernel
    (stats, examples), (ref_stats, ref_examples) = analyzers["kernel"], analyzers["torch"]
    moved = ((stats.sums - ref_stats.sums).abs() / ref_stats.sums.abs().clamp_min(1e-30)).max()
    kind = "wall" if args.wall else "CPU"
    print(f"{len(batches)} batches, {args.sentences} sentences, {args.threads} thread(s)")
    for name in names:
        print(f"  {name:8s} {spent[name]:6.2f} s {kind}  ({spent['torch'] / spent[name]:.2f}x)")
    print(f"  head statistics' sums: largest relative difference {float(moved):.2e}")
    print(f"  head examples' picks the same: {picks(examples) == picks(ref_examples)}")
    if args.profile:
        found = pair(model, tokenizer)
        module._stats_kernel = forms[args.profile]
        try:
            with torch.no_grad(), cProfile.Profile() as profile:
                for batch, cache in zip(batches, caches, strict=True):
                    feed(model, found, batch, cache)
        finally:
            module._stats_kernel = kernel
        pstats.Stats(profile).sort_stats("tottime").print_stats(12)


if __name__ == "__main__":
    main()
