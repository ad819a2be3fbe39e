"""Time from starting `attnlens` to its one-line error, for mistakes caught before the model.

Target (DESIGN.md / issue 14): any argument or path error in at most 0.5 s. Each case runs
as a fresh process (median of --rounds runs) with ATTNLENS_FORBID_MODEL_LOAD=1, so a check
that came after loading would fail loudly instead of being timed. Also printed: a bare
`python -c pass` and `attnlens --help` in the same run, as baselines.

    python benchmarks/error_latency.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CASES = {
    "missing --text file": ["analyze", "--text", "missing.txt", "--out", "out"],
    "--format gif": ["analyze", "--format", "gif", "--out", "out"],
    "--batch-size 0": ["analyze", "--batch-size", "0"],
    "non-empty --out": ["spectrum", "--out", "full"],
    "--out is a file": ["heads", "--out", "file.txt"],
    "prune --data missing": ["prune", "--data", "missing.csv"],
    "prune --export not empty": ["prune", "--data", "good.csv", "--export", "full"],
    "pairs score out of range": ["eval", "stsb", "--pairs", "bad.csv"],
}


def _timed(argv: list[str], cwd: Path, expect_error: bool) -> float:
    env = {**os.environ, "ATTNLENS_FORBID_MODEL_LOAD": "1"}
    start = time.perf_counter()
    result = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - start
    if expect_error and (result.returncode != 1 or not result.stderr.startswith("Error: ")):
        raise SystemExit(f"{argv}: expected a one-line error, got {result.stderr!r}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    cli = [sys.executable, "-m", "attnlens.cli.app"]
    with tempfile.TemporaryDirectory() as tmp:
        cwd = Path(tmp)
        (cwd / "full").mkdir()
        (cwd / "full" / "keep.txt").write_text("x")
        (cwd / "file.txt").write_text("x")
        (cwd / "bad.csv").write_text("a b,c d,1\ne f,g h,2\ni j,k l,9\n")
        (cwd / "good.csv").write_text("a b,c d,1\ne f,g h,2\ni j,k l,4\n")
        rows = [("python -c pass", [sys.executable, "-c", "pass"], False),
                ("attnlens --help", [*cli, "--help"], False)]
        rows += [(name, [*cli, *argv], True) for name, argv in CASES.items()]
        base = None
        print(f"{'case':32} {'median s':>9} {'/ python':>9}")
        for name, argv, is_error in rows:
            median = statistics.median(_timed(argv, cwd, is_error) for _ in range(args.rounds))
            base = base or median
            print(f"{name:32} {median:9.3f} {median / base:9.1f}")


if __name__ == "__main__":
    main()
