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
        [--wall] [--profile]

``--profile``: then the kept form once more over every batch under cProfile (the 12 functions
of most own time).
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
from hot_paths import feed

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
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=2001)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--batch-tokens", type=int, default=1024)
    parser.add_argument("--wall", action="store_true")
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    if module._asymmetry_kernel is None:
        raise SystemExit("the asymmetry kernel is not built")
    torch.set_num_threads(args.threads)
    import attnlens

    model, tokenizer = attnlens.load()
    batches, _ = load_batches(tokenizer, model, SHARED_UD, args.sentences, 64,
                              args.batch_tokens)
    with torch.no_grad():
        caches = [model.run_with_cache(**batch.model_inputs())[1] for batch in batches]
    kernel = module._asymmetry_kernel
    forms = {"torch, held": (PatternAsymmetry, None), "kernel, held": (HeldAsymmetry, kernel),
             "kernel, per layer": (PerLayerAsymmetry, kernel),
             "kernel, inputs held": (PatternAsymmetry, kernel)}
    analyzers = {name: cls.for_model(model) for name, (cls, _) in forms.items()}
    spent = dict.fromkeys(forms, 0.0)
    clock = time.perf_counter if args.wall else time.process_time
    names = list(forms)
    with torch.no_grad():
        for i, (batch, cache) in enumerate(zip(batches, caches, strict=True)):
            for name in names[i % len(names):] + names[: i % len(names)]:
                module._asymmetry_kernel = forms[name][1]
                start = clock()
                feed(model, analyzers[name], batch, cache)
                spent[name] += clock() - start
    module._asymmetry_kernel = kernel
    reference = analyzers["torch, held"]
    kind = "wall" if args.wall else "CPU"
    print(f"{len(batches)} batches, {args.sentences} sentences, {args.threads} thread(s)")
    for name, analyzer in analyzers.items():
        same = all(torch.equal(getattr(analyzer, f), getattr(reference, f))
                   for f in ("counts", "base_counts", "base_violations"))
        close = torch.allclose(analyzer.ratio_sum, reference.ratio_sum, rtol=1e-5, atol=0)
        print(f"  {name:20s} {spent[name]:6.2f} s {kind}  "
              f"({spent['torch, held'] / spent[name]:.2f}x)  counts equal: {same}, "
              f"ratio sums within 1e-5: {close}")
    if args.profile:
        analyzer = PatternAsymmetry.for_model(model)
        with torch.no_grad(), cProfile.Profile() as profile:
            for batch, cache in zip(batches, caches, strict=True):
                feed(model, analyzer, batch, cache)
        pstats.Stats(profile).sort_stats("tottime").print_stats(12)


if __name__ == "__main__":
    main()
