"""Builds of the pattern-asymmetry C kernel against each other, in one process.

Each positional argument is one build: ``NAME`` followed by compiler flags (quoted as one
argument), compiled from ``attnlens/measures/asymmetry/_asymmetry_kernel.c`` with setup.py's
flags (``-O3 -std=c99``, attnlens/ on the include path for kernel_common.h); ``installed`` is
the package's own build. Every build reads the same random softmax patterns (``--sentences``
sentences of 12 to 26 tokens, 12 heads; float32 and, for the baseline's call, float64 with
the violations), best of 5 rounds of 50 calls each; the figure is nanoseconds per unordered
pair {i, j}. Each build's outputs are compared bit for bit
with the first build's (builds of other ``LANES`` sum in another order: other bits).

    python benchmarks/asymmetry_builds.py installed "v4 -DKERNEL_NO_CLONES -march=x86-64-v4" \
        "v3 -DKERNEL_NO_CLONES -march=x86-64-v3" "x86-64 -DKERNEL_NO_CLONES" \
        "plain -DASYMMETRY_PLAIN_C" "lanes8 -DLANES=8"
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sysconfig
import tempfile
import time
from pathlib import Path

import torch

from attnlens.measures.asymmetry import pattern_asymmetry as module

SOURCE = Path(module.__file__).with_name("_asymmetry_kernel.c")


def build(name: str, flags: list[str], folder: Path):
    """The kernel module compiled with ``flags`` (the installed one for ``installed``)."""
    if name == "installed":
        return module._asymmetry_kernel
    where = folder / name
    where.mkdir()
    so = where / ("_asymmetry_kernel" + sysconfig.get_config_var("EXT_SUFFIX"))
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    subprocess.run([compiler, "-O3", "-std=c99", "-fPIC", "-shared",
                    f"-I{sysconfig.get_paths()['include']}", f"-I{SOURCE.parents[2]}", *flags,
                    str(SOURCE), "-o", str(so)], check=True)
    spec = importlib.util.spec_from_file_location("_asymmetry_kernel", so)
    built = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(built)
    return built


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("builds", nargs="+")
    parser.add_argument("--sentences", type=int, default=40)
    args = parser.parse_args()
    torch.manual_seed(0)
    heads, pos = 12, 26
    lengths = torch.randint(12, pos + 1, (args.sentences,))
    mask = torch.arange(pos)[None] < lengths[:, None]  # [sentence, pos]
    hidden = ~mask[:, None, None]
    cases = {"float32": (torch.softmax(torch.randn(args.sentences, heads, pos, pos)
                                       .masked_fill(hidden, -torch.inf), -1), False),
             "float64 + violations": (torch.softmax(
                 torch.randn(args.sentences, 1, pos, pos, dtype=torch.float64)
                 .masked_fill(hidden, -torch.inf), -1), True)}
    pairs = float((lengths * (lengths - 1)).sum()) / 2
    first = {}
    with tempfile.TemporaryDirectory() as folder:
        for spec in args.builds:
            name, *flags = spec.split()
            module._asymmetry_kernel = build(name, flags, Path(folder))
            line = [f"{name:10s}"]
            for case, (P, violations) in cases.items():
                outputs = module.kernel_pattern_asymmetry(P, mask, 2.0, 1.0, violations)
                same = all(torch.equal(a, b) for a, b in
                           zip(outputs, first.setdefault(case, outputs), strict=True))
                best = float("inf")
                for _ in range(5):
                    start = time.perf_counter()
                    for _ in range(50):
                        module.kernel_pattern_asymmetry(P, mask, 2.0, 1.0, violations)
                    best = min(best, (time.perf_counter() - start) / 50)
                per_pair = best / (pairs * P.shape[1]) * 1e9
                line.append(f"{case}: {per_pair:5.2f} ns/pair (same bits: {same})")
            print("  ".join(line))


if __name__ == "__main__":
    main()
