"""The linear-attention view's C kernel against its torch path (issue 29, lin38).

Two forms of ``LinearAttentionView`` over the same cached MiniLM activations of the first
``--sentences`` UD EWT dev sentences (batches as ``analyze`` makes them: at most 64
sentences and ``--batch-tokens`` padded tokens), fed as the runner feeds them, alternating
batch by batch (the order too) so that both see the same load of a shared machine:
``torch`` (the extension hidden: the code before lin38) and ``kernel``.

Prints each form's CPU seconds (``--wall``: wall time), the ratio, and the largest relative
difference of the kernel's sums from the torch path's (float32 rounding there).

    python benchmarks/linear_kernel.py [--sentences 2001] [--threads 1] [--batch-tokens 1024]
        [--wall] [--profile]

``--profile``: the torch path once more over every batch under cProfile (the 12 functions
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

from attnlens.measures.linear import linear_attention as module
from attnlens.measures.linear.linear_attention import LinearAttentionView


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=2001)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--batch-tokens", type=int, default=1024)
    parser.add_argument("--wall", action="store_true")
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    kernel = module._linear_kernel
    if kernel is None:
        raise SystemExit("the linear kernel is not built")
    torch.set_num_threads(args.threads)
    import attnlens

    model, tokenizer = attnlens.load()
    batches, _ = load_batches(tokenizer, model, SHARED_UD, args.sentences, 64,
                              args.batch_tokens)
    with torch.no_grad():
        caches = [model.run_with_cache(**batch.model_inputs())[1] for batch in batches]
    forms = {"torch": None, "kernel": kernel}
    analyzers = {name: LinearAttentionView.for_model(model) for name in forms}
    spent = dict.fromkeys(forms, 0.0)
    clock = time.perf_counter if args.wall else time.process_time
    names = list(forms)
    with torch.no_grad():
        for i, (batch, cache) in enumerate(zip(batches, caches, strict=True)):
            for name in names[i % 2:] + names[: i % 2]:
                module._linear_kernel = forms[name]
                start = clock()
                feed(model, analyzers[name], batch, cache)
                spent[name] += clock() - start
    module._linear_kernel = kernel
    before, after = analyzers["torch"], analyzers["kernel"]
    kind = "wall" if args.wall else "CPU"
    print(f"{len(batches)} batches, {args.sentences} sentences, {args.threads} thread(s)")
    for name in names:
        print(f"  {name:8s} {spent[name]:6.2f} s {kind}  ({spent['torch'] / spent[name]:.2f}x)")
    for field in ("sums", "by_length"):
        a, b = getattr(after, field), getattr(before, field)
        worst = float(((a - b).abs() / b.abs().clamp_min(1e-300)).max())
        print(f"  {field}: largest relative difference kernel - torch {worst:.2e}")
    if args.profile:
        module._linear_kernel = None
        analyzer = LinearAttentionView.for_model(model)
        with torch.no_grad(), cProfile.Profile() as profile:
            for batch, cache in zip(batches, caches, strict=True):
                feed(model, analyzer, batch, cache)
        module._linear_kernel = kernel
        pstats.Stats(profile).sort_stats("tottime").print_stats(12)


if __name__ == "__main__":
    main()
