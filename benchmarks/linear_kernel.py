"""The linear-attention view's C kernel against its torch path (issue 29, lin38).

Two forms of ``LinearAttentionView`` over the same cached MiniLM activations of the first
``--sentences`` UD EWT dev sentences (batches as ``analyze`` makes them: at most 64
sentences and ``--batch-tokens`` padded tokens), fed as the runner feeds them, alternating
batch by batch (the order too) so that both see the same load of a shared machine:
``torch`` (the extension hidden: the code before lin38) and ``kernel``.

Prints each form's CPU seconds (``--wall``: wall time), the ratio, and the largest relative
difference of the kernel's sums from the torch path's (float32 rounding there).

    python benchmarks/linear_kernel.py [--sentences 2001] [--threads 1] [--batch-tokens 1024]
        [--wall] [--profile] [--levels]

``--profile``: the torch path once more over every batch under cProfile (the 12 functions
of most own time).
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from kernel_ab import alternate, cached_ewt, level_forms, options, print_times, profile

from attnlens.measures.linear import linear_attention as module
from attnlens.measures.linear.linear_attention import LinearAttentionView


def main() -> None:
    args = options(__doc__).parse_args()
    kernel = module._linear_kernel
    if kernel is None:
        raise SystemExit("the linear kernel is not built")
    model, _, batches, caches = cached_ewt(args)
    forms = {"torch": None, "kernel": kernel}
    if args.levels:
        forms |= level_forms("attnlens/measures/linear/_linear_kernel.c", kernel)
    analyzers, spent = alternate(module, "_linear_kernel", forms,
                                 lambda _: [LinearAttentionView.for_model(model)], model,
                                 batches, caches, args.wall)
    print_times(args, batches, spent)
    (after,), (before,) = analyzers["kernel"], analyzers["torch"]
    for field in ("sums", "by_length"):
        a, b = getattr(after, field), getattr(before, field)
        worst = float(((a - b).abs() / b.abs().clamp_min(1e-300)).max())
        print(f"  {field}: largest relative difference kernel - torch {worst:.2e}")
    for name in list(forms)[2:]:  # the level builds: the installed kernel's bits
        (built,) = analyzers[name]
        same = all(torch.equal(getattr(built, f), getattr(after, f))
                   for f in ("sums", "by_length"))
        print(f"  {name}: the installed kernel's bits: {same}")
    if args.profile:
        profile(module, "_linear_kernel", None, [LinearAttentionView.for_model(model)], model,
                batches, caches)


if __name__ == "__main__":
    main()
