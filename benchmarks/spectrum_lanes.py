"""The spectral C kernel's lane counts: an old source against the current one, per build, in one
process.

Builds ``--old`` (a copy of an earlier ``_spectral_kernel.c``, e.g. ``git show
BASE:attnlens/measures/spectrum/_spectral_kernel.c > /tmp/old/_spectral_kernel.c``) and the
current source once per x86-64 level this CPU runs (one version each, tests/kernel_builds.py)
and once as setup.py builds them (``clones``: one version per level, the CPU's chosen at run
time). The current source holds both lane counts (``gram_eigenvalues(..., lanes)``), so each
of its builds is timed at 8 and at 4 lanes; ``LANES`` is the count this CPU gets by default.
Every contender runs once per round, in turn (best of ``--rounds``), on random softmax
matrices; each case also checks that every contender gives the first one's bits.

    python benchmarks/spectrum_lanes.py --old /tmp/old/_spectral_kernel.c [--rounds 7]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.kernel_builds import CPU_FLAGS, LEVEL_BUILDS, build_kernel

SOURCE = Path(__file__).resolve().parents[1] / "attnlens/measures/spectrum/_spectral_kernel.c"
# (matrices, m, n, float64 input)
CASES = [(2048, 12, 12, False), (1024, 40, 40, False), (256, 64, 64, False),
         (64, 128, 128, False), (301, 23, 37, True)]


def builds(old: Path, folder: Path) -> dict[str, object]:
    """name -> module: old and new source per level this CPU runs, and both as clones."""
    forms = [(level, flags, False) for level, (flags, needs) in LEVEL_BUILDS.items()
             if needs <= CPU_FLAGS]
    forms.append(("clones", [], True))
    modules = {}
    for level, flags, clones in forms:
        for side, source in (("old", old), ("new", SOURCE)):
            where = folder / f"b{len(modules)}"
            where.mkdir()
            modules[f"{side} {level}"] = build_kernel(source, where, flags, clones=clones)
    return modules


def contenders(modules: dict[str, object]) -> dict[str, Callable]:
    """name -> fn(X, count, m, n, double) -> eigenvalues: old builds at their own lanes, new
    builds at 8 and at 4 lanes."""
    out = {}
    for name, module in modules.items():
        lane_counts = [0] if name.startswith("old") else [8, 4]
        for lanes in lane_counts:
            def run(X, count, m, n, double, module=module, lanes=lanes) -> np.ndarray:
                eig = np.empty((count, min(m, n)))
                extra = (lanes,) if lanes else ()
                assert module.gram_eigenvalues(X, eig, count, m, n, double, *extra) == 0
                return eig
            out[f"{name}, lanes {lanes or module.LANES}"] = run
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", type=Path, required=True,
                        help="an earlier _spectral_kernel.c (the file name matters)")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        modules = builds(args.old, Path(tmp))
        print("default lanes: " + ", ".join(f"{name} {m.LANES}" for name, m in modules.items()))
        fns = contenders(modules)
        gen = torch.Generator().manual_seed(0)
        for count, m, n, double in CASES:
            P = torch.softmax(3 * torch.randn(count, m, n, generator=gen), dim=-1)
            X = P.double().numpy() if double else P.numpy()
            results = {name: fn(X, count, m, n, double) for name, fn in fns.items()}
            first = next(iter(results.values()))
            same = all(np.array_equal(first, r) for r in results.values())
            best = dict.fromkeys(fns, float("inf"))
            for _ in range(args.rounds):
                for name, fn in fns.items():
                    start = time.perf_counter()
                    fn(X, count, m, n, double)
                    best[name] = min(best[name], time.perf_counter() - start)
            kind = "float64" if double else "float32"
            print(f"\n{count} matrices {m}x{n} {kind}: {'same bits' if same else 'BITS DIFFER'}")
            for name, t in best.items():
                print(f"  {name:<28} {t * 1e3:8.2f} ms")


if __name__ == "__main__":
    main()
