"""Builds of the spectral C kernel against each other and ``torch.linalg.svdvals``, in one process.

A before/after check for changes to ``attnlens/measures/spectrum/_spectral_kernel.c``: each
``--build`` is a compiled kernel (``NAME=PATH/_spectral_kernel.so``; ``installed`` is the
package's own), e.g. the old source built with the flags of setup.py:

    gcc $(python3-config --cflags) -O3 -std=c99 -fPIC -shared OLD.c -o /tmp/old/_spectral_kernel.so

Per sentence length of ``benchmarks/spectrum.py``'s blocks (MiniLM over UD EWT dev, pooled
as the analyzer pools them; ``--cache`` keeps them between runs) the ratio ``svdvals time /
spectral time`` of every build, all timed in the same interleaved rounds (best of
``--rounds``) at ``--threads``, each build through ``singular_values`` with its split
across threads; then per matrix on one thread (random softmax matrices), where each build's
eigenvalues are also compared bit for bit with the first build's.

    python benchmarks/spectrum_builds.py --build old=/tmp/old/_spectral_kernel.so \
        [--build installed] [--threads 2] [--rounds 5] [--cache /tmp/blocks.pt]
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
from pathlib import Path

import numpy as np
import torch
from spectrum import best_interleaved, blocks_by_length, bucket

from attnlens.measures.spectrum import singular_values as spectral


def load_build(name: str, path: str | None):
    """The kernel module at ``path`` (the installed one when ``path`` is None)."""
    if path is None:
        return spectral._spectral_kernel
    spec = importlib.util.spec_from_file_location(f"build_{name}._spectral_kernel", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def with_build(module, P: torch.Tensor) -> torch.Tensor:
    spectral._spectral_kernel = module
    return spectral.singular_values(P)


def per_length(blocks: dict[int, torch.Tensor], builds: dict, rounds: int) -> None:
    rows: dict[str, list[list[float]]] = {}
    for n, P in blocks.items():
        fns = [lambda P=P: torch.linalg.svdvals(P)]
        fns += [lambda P=P, m=m: with_build(m, P) for m in builds.values()]
        base, *times = best_interleaved(fns, rounds)
        rows.setdefault(bucket(n), []).append([base / t for t in times])
    print(f"{'lengths':>8} " + " ".join(f"{name + ' min/median':>22}" for name in builds))
    for name, values in rows.items():
        cells = [f"{min(v[i] for v in values):>11.2f} /"
                 f"{statistics.median(v[i] for v in values):>8.2f}" for i in range(len(builds))]
        print(f"{name:>8} " + " ".join(f"{c:>22}" for c in cells))
    worst = [min(v[i] for values in rows.values() for v in values) for i in range(len(builds))]
    pairs = zip(builds, worst, strict=True)
    print("every length, min: " + ", ".join(f"{name} {w:.2f}" for name, w in pairs))


def per_matrix(builds: dict, rounds: int) -> None:
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    print("\nper matrix, one thread (random softmax matrices; us, ratio to svdvals):")
    gen = torch.Generator().manual_seed(0)
    for n in (16, 32, 64, 96, 128):
        count = 256 if n <= 64 else 64
        P = torch.softmax(3 * torch.randn(count, n, n, generator=gen), dim=-1)  # [count, n, n]
        X = P.numpy()

        def run(module, X=X, n=n, count=count) -> np.ndarray:
            out = np.empty((count, n))
            module.gram_eigenvalues(X, out, count, n, n, False)
            return out

        first, *others = [run(m) for m in builds.values()]
        same = all(np.array_equal(first, o) for o in others)
        fns = [lambda P=P: torch.linalg.svdvals(P)]
        fns += [lambda m=m, run=run: run(m) for m in builds.values()]
        base, *times = best_interleaved(fns, rounds)
        cells = ", ".join(f"{name} {t / count * 1e6:.1f} ({base / t:.2f}x)"
                          for name, t in zip(builds, times, strict=True))
        print(f"  n = {n:3d}: svdvals {base / count * 1e6:.1f}, {cells}; "
              f"{'same bits' if same else 'BITS DIFFER'}")
    torch.set_num_threads(previous)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", action="append", required=True,
                        help="NAME=PATH of a compiled kernel, or 'installed'")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--sentences", type=int, default=2001)
    parser.add_argument("--cache", type=Path, help="keep the blocks in this file")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    builds = {}
    for item in args.build:
        name, _, path = item.partition("=")
        builds[name] = load_build(name, path or None)
    if args.cache is not None and args.cache.is_file():
        blocks = torch.load(args.cache)
    else:
        blocks = blocks_by_length(args.sentences)
        if args.cache is not None:
            torch.save(blocks, args.cache)
    print(f"threads={args.threads}, best of {args.rounds} interleaved rounds")
    per_length(blocks, builds, args.rounds)
    per_matrix(builds, 2 * args.rounds - 1)


if __name__ == "__main__":
    main()
