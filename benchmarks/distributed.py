"""N processes (torchrun) against one: the same tables, and the wall time of each.

Target (DESIGN.md): ``torchrun --nproc-per-node N -m attnlens.cli analyze`` writes the tables
of a one-process run: text and integer columns (counts, argmax results, labels) identical,
float columns within 1e-9 (float64 running sums added in another order). Printed: the worst
float difference over every table, whether all exact columns match, and the wall-time ratio
one process / N processes (each process gets ``--threads`` / N threads, so both runs use the
same cores).

The tables are compared against a one-process run with the same threads per process as the
N-process run: a different thread count changes the float32 summation order inside the
forward pass itself, not the merge. That difference is printed too: on 400 EWT sentences
(2 threads against 1) only ``collapse_fits`` moves, by up to 6e-3 in a fit intercept, because
the fits take logarithms of residuals that reach the float64 floor (~1e-13).

    python benchmarks/distributed.py [--processes 2] [--threads 2] [--sentences 400]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
from bench_record import record, this_command

SHARED_UD = Path(__file__).resolve().parents[2] / "shared/data/ud-ewt/en_ewt-ud-dev.conllu"
TOLERANCE = 1e-9


def first_sentences(path: Path, count: int, out: Path) -> Path:
    """The first ``count`` sentences of a CoNLL-U file (blank-line separated)."""
    blocks = path.read_text(encoding="utf-8").split("\n\n")
    out.write_text("\n\n".join(b for b in blocks[:count] if b.strip()) + "\n\n", encoding="utf-8")
    return out


def run(processes: int, threads: int, args: list[str], out: Path) -> float:
    env = {**os.environ, "OMP_NUM_THREADS": str(max(1, threads // processes))}
    prefix = ([sys.executable] if processes == 1 else
              [str(Path(sys.executable).with_name("torchrun")), "--nproc-per-node",
               str(processes)])
    start = time.perf_counter()
    subprocess.run([*prefix, "-m", "attnlens.cli", "analyze", *args, "--out", str(out), "-q"],
                   env=env, check=True, capture_output=True)
    return time.perf_counter() - start


def compare(one: Path, many: Path) -> tuple[float, bool]:
    one, many = one / "tables", many / "tables"
    worst, exact = 0.0, True
    for path in sorted(one.glob("*.csv")):
        a, b = pd.read_csv(path), pd.read_csv(many / path.name)
        if a.shape != b.shape or list(a.columns) != list(b.columns):
            return float("inf"), False
        for column in a.columns:
            if pd.api.types.is_float_dtype(a[column]):
                diff = np.abs(a[column].to_numpy() - b[column].to_numpy())
                worst = max(worst, float(np.nanmax(diff)) if len(diff) else 0.0)
                exact &= bool((a[column].isna() == b[column].isna()).all())
            else:
                exact &= bool(a[column].equals(b[column]))
    return worst, exact


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--sentences", type=int, default=400)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        corpus = []
        if SHARED_UD.is_file():
            corpus = ["--treebank", str(first_sentences(SHARED_UD, args.sentences,
                                                        tmp / "part.conllu"))]
        one = run(1, args.threads, corpus, tmp / "one")
        many = run(args.processes, args.threads, corpus, tmp / "many")
        per_process = max(1, args.threads // args.processes)
        run(1, per_process, corpus, tmp / "same_threads")
        worst, exact = compare(tmp / "same_threads", tmp / "many")
        worst_threads, _ = compare(tmp / "one", tmp / "many")
    print(f"{args.processes} processes vs 1 on {args.sentences if corpus else 43} sentences, "
          f"{args.threads} threads in all")
    print(f"against 1 process with {per_process} thread(s) as each of the {args.processes}: "
          f"exact columns identical: {exact}; worst float difference {worst:.1e} "
          f"(tolerance {TOLERANCE:g})")
    print(f"against 1 process with {args.threads} threads (another float32 summation order in "
          f"the forward): worst float difference {worst_threads:.1e}")
    print(f"wall time 1 process {one:.1f} s, {args.processes} processes {many:.1f} s: "
          f"ratio {one / many:.2f}")
    sentences = args.sentences if corpus else 43
    record(f"{args.processes} processes (`torchrun`) / 1 process, same threads per process "
           f"({sentences} sentences)", f"same tables (floats within {TOLERANCE:g})",
           f"{'exact columns identical' if exact else 'exact columns differ'}, floats within "
           f"{worst:.1e} (wall time 1 process {one:.1f} s, {args.processes} processes "
           f"{many:.1f} s)", exact and worst <= TOLERANCE, this_command(), key="distributed")


if __name__ == "__main__":
    main()
