"""Pattern asymmetry's C kernel against its torch path, and per-layer calls against held layers.

Three forms of ``PatternAsymmetry`` over the same cached MiniLM activations of the first
``--sentences`` UD EWT dev sentences (batches as ``analyze`` makes them: at most 64 sentences
and ``--batch-tokens`` padded tokens), fed as the runner feeds them, rotating batch by batch
so that all see the same load of a shared machine:

- ``torch, held``: the torch path (the extension hidden), several layers concatenated into
  one call (the code before asym37);
- ``kernel, held``: the C kernel on the same concatenated layers;
- ``kernel, per layer``: the C kernel once per layer, nothing concatenated;
- ``kernel, inputs held``: the patterns by the C kernel once per layer, the baseline's inputs
  held and concatenated, its attention computed for several layers at once (the code now).

Prints each form's CPU seconds (``--wall``: wall time) and whether its counts equal the
torch path's (they must) and its ratio sums lie within 1e-5 relative (float32 norms there).

    python benchmarks/asymmetry_kernel.py [--sentences 2001] [--threads 1] [--batch-tokens 1024]
        [--wall] [--profile] [--levels]

``--profile``: then the kept form once more over every batch under cProfile (the 12 functions
of most own time).
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from kernel_ab import alternate, cached_ewt, level_forms, options, print_times, profile

from attnlens.measures.asymmetry import pattern_asymmetry as module
from attnlens.measures.asymmetry.pattern_asymmetry import PatternAsymmetry


class HeldAsymmetry(PatternAsymmetry):
    """The kernel (where built) on held, concatenated layers, as the torch path calls it."""

    def update_layer(self, batch, layer, cache) -> None:
        if self._held.add(layer, *self._inputs(layer, cache)):
            self._fold_held()


class PerLayerAsymmetry(PatternAsymmetry):
    """The kernel once per layer for the patterns and the baseline alike, nothing held."""

    def update_layer(self, batch, layer, cache) -> None:
        patterns, X_all = self._inputs(layer, cache)
        self._fold_patterns([layer], patterns)
        self._fold_baseline([layer], X_all)


def main() -> None:
    args = options(__doc__).parse_args()
    kernel = module._asymmetry_kernel
    if kernel is None:
        raise SystemExit("the asymmetry kernel is not built")
    model, _, batches, caches = cached_ewt(args)
    forms = {"torch, held": (PatternAsymmetry, None), "kernel, held": (HeldAsymmetry, kernel),
             "kernel, per layer": (PerLayerAsymmetry, kernel),
             "kernel, inputs held": (PatternAsymmetry, kernel)}
    if args.levels:
        forms |= {name: (PatternAsymmetry, build) for name, build in level_forms(
            "attnlens/measures/asymmetry/_asymmetry_kernel.c", kernel).items()}
    analyzers, spent = alternate(module, "_asymmetry_kernel",
                                 {name: k for name, (_, k) in forms.items()},
                                 lambda name: [forms[name][0].for_model(model)], model,
                                 batches, caches, args.wall)
    print_times(args, batches, spent)
    (reference,) = analyzers["torch, held"]
    for name, (analyzer,) in analyzers.items():
        same = all(torch.equal(getattr(analyzer, f), getattr(reference, f))
                   for f in ("counts", "base_counts", "base_violations"))
        close = torch.allclose(analyzer.ratio_sum, reference.ratio_sum, rtol=1e-5, atol=0)
        print(f"  {name:20s} counts equal: {same}, ratio sums within 1e-5: {close}")
    if args.profile:
        profile(module, "_asymmetry_kernel", kernel, [PatternAsymmetry.for_model(model)],
                model, batches, caches)


if __name__ == "__main__":
    main()
