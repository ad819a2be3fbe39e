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
        [--wall] [--profile {torch,kernel}] [--levels]

``--profile FORM``: then that form once more over every batch under cProfile (the 12
functions of most own time).
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from kernel_ab import alternate, cached_ewt, level_forms, options, print_times, profile

from attnlens.measures.heads import head_stats as module
from attnlens.measures.heads.examples import HeadExamples
from attnlens.measures.heads.head_stats import HeadStats

FORMS = {"torch": None, "kernel": module._stats_kernel}


def pair(model, tokenizer) -> list:
    return [HeadStats.for_model(model, tokenizer), HeadExamples.for_model(model, tokenizer)]


def picks(examples: HeadExamples) -> list[list]:
    """Every kept example's (sentence, query, key, window start) as lists."""
    return [t.tolist() for t in (examples.top_sentence, examples.top_query, examples.top_key,
                                 examples.top_start)]


def main() -> None:
    args = options(__doc__, FORMS).parse_args()
    if FORMS["kernel"] is None:
        raise SystemExit("the head statistics kernel is not built")
    model, tokenizer, batches, caches = cached_ewt(args)
    forms = dict(FORMS)
    if args.levels:
        forms |= level_forms("attnlens/measures/heads/_stats_kernel.c", FORMS["kernel"])
    analyzers, spent = alternate(module, "_stats_kernel", forms,
                                 lambda _: pair(model, tokenizer), model, batches, caches,
                                 args.wall)
    print_times(args, batches, spent)
    (stats, examples), (ref_stats, ref_examples) = analyzers["kernel"], analyzers["torch"]
    moved = ((stats.sums - ref_stats.sums).abs() / ref_stats.sums.abs().clamp_min(1e-30)).max()
    print(f"  head statistics' sums: largest relative difference {float(moved):.2e}")
    print(f"  head examples' picks the same: {picks(examples) == picks(ref_examples)}")
    for name in list(forms)[2:]:  # the level builds: the installed kernel's bits
        built_stats, built_examples = analyzers[name]
        same = (torch.equal(built_stats.sums, stats.sums)
                and picks(built_examples) == picks(examples))
        print(f"  {name}: the installed kernel's bits: {same}")
    if args.profile:
        profile(module, "_stats_kernel", FORMS[args.profile], pair(model, tokenizer), model,
                batches, caches)


if __name__ == "__main__":
    main()
