"""Before/after of issue 29's changes to analyzers' hot paths, interleaved in one process.

Each pair runs the analyzer as it was on main before the change (its module loaded from
``--before``, a checkout of main) and as it is now, over the same cached activations of the
first ``--sentences`` UD EWT dev sentences (batches of 16, MiniLM), alternating batch by batch
so that both see the same load of a shared machine:

- pattern asymmetry: one masked call per layer for the padded batch (was: one per length
  group of the batch);
- rank-collapse variants (unchanged: the current code against main's, a control of the
  method, and the cost of the fixed 32-sentence float64 sample). Casting the float64 weights
  once per sample instead of once per batch was tried and measured 1.00x here: reverted.

    python benchmarks/hot_paths.py --before /work/main [--sentences 200] [--threads 2]
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from corpus_pass import SHARED_UD, load_batches


def old_module(root: Path, relative: str, name: str):
    spec = importlib.util.spec_from_file_location(name, root / relative)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, required=True)
    parser.add_argument("--sentences", type=int, default=200)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    import attnlens
    from attnlens.measures.asymmetry.pattern_asymmetry import PatternAsymmetry
    from attnlens.measures.collapse.variant_collapse import VariantCollapse

    old_asym = old_module(args.before, "attnlens/measures/asymmetry/pattern_asymmetry.py",
                          "old_pattern_asymmetry").PatternAsymmetry
    old_vc = old_module(args.before, "attnlens/measures/collapse/variant_collapse.py",
                        "old_variant_collapse").VariantCollapse
    model, tokenizer = attnlens.load()
    batches, _ = load_batches(tokenizer, model, SHARED_UD, args.sentences, 16)
    names = lambda n: n.endswith("hook_pattern") or n.endswith("hook_resid_pre")  # noqa: E731
    caches = []
    with torch.no_grad():
        for batch in batches:
            _, cache = model.run_with_cache(**batch.model_inputs(), names_filter=names)
            caches.append(cache)
    clock = time.process_time
    pairs = {"pattern asymmetry": (old_asym.for_model(model), PatternAsymmetry.for_model(model))}
    spent = {key: [0.0, 0.0] for key in pairs}
    for i, (batch, cache) in enumerate(zip(batches, caches, strict=True)):
        for key, analyzers in pairs.items():
            for j in ((0, 1) if i % 2 == 0 else (1, 0)):
                start = clock()
                analyzers[j].update(batch, cache)
                spent[key][j] += clock() - start
    for key, (old, new) in spent.items():
        a, b = pairs[key]
        same = all(torch.allclose(getattr(a, f), getattr(b, f), rtol=1e-6, atol=1e-9)
                   for f in ("ratio_sum", "counts", "base_ratio_sum", "base_counts",
                             "base_violations"))
        print(f"{key}: {old:.2f} s -> {new:.2f} s CPU ({old / new:.2f}x), {len(batches)} "
              f"batches; states agree: {same}")
    variants = [old_vc.for_model(model, per_batch=4, max_sentences=32),
                VariantCollapse.for_model(model, per_batch=4, max_sentences=32)]
    times = [0.0, 0.0]
    for i, batch in enumerate(batches):
        for j in ((0, 1) if i % 2 == 0 else (1, 0)):
            start = clock()
            variants[j].model_pass(model, batch)
            times[j] += clock() - start
    same = all(torch.equal(x, y) for v in variants[0].variants
               for x, y in zip(variants[0].values[v], variants[1].values[v], strict=True))
    print(f"collapse variants (32 sentences, 4 per batch): {times[0]:.2f} s -> {times[1]:.2f} s "
          f"CPU ({times[0] / times[1]:.2f}x); residuals identical: {same}")


if __name__ == "__main__":
    main()
