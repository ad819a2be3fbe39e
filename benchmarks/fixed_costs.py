"""Fixed costs a new user meets: `attnlens --help`, an argument error, a path error, the demo.

Targets (DESIGN.md): ``attnlens --help`` and any argument or path error <= 0.5 s; `make demo`
after set-up (``attnlens analyze --out attnlens-report`` on the embedded sample treebank,
43 sentences) <= 10 s wall. Each command runs in a fresh process, wall time from its start
to its exit (median of ``--rounds``); the figures are printed as ratios to their targets.

``--phases`` also times the demo's stages in one process (imports, model + tokenizer load,
corpus, the analyzer pass, tables + figures, HTML), which is where the demo's time goes.

    python benchmarks/fixed_costs.py [--rounds 3] [--phases]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ATTNLENS = [sys.executable, "-m", "attnlens.cli"]


def wall(command: list[str], rounds: int, expect_fail: bool = False) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True)
        times.append(time.perf_counter() - start)
        if (done.returncode != 0) != expect_fail:
            raise SystemExit(f"{' '.join(command)} exited {done.returncode}: {done.stderr}")
    return statistics.median(times)


def phases() -> None:
    """The demo's stages in one process (seconds)."""
    code = r"""
import time; t0 = time.perf_counter()
import torch, attnlens.report.analyze as ra, attnlens.loaders as L, attnlens.data.words as W
t1 = time.perf_counter()
corpus = W.load_corpus(text=None, treebank=None)
model, tok = L.load(None); t2 = time.perf_counter()
batches = corpus.batches(tok, batch_size=16, max_length=128); t3 = time.perf_counter()
from attnlens.analysis.runner import run_analyzers
from attnlens.report.figure_pool import figure_pool
import tempfile, pathlib
sections = ra.default_sections()
groups = [s.analyzers(model, tok) for s in sections]; t4 = time.perf_counter()
run_analyzers(model, batches, [a for g in groups for a in g], show_progress=False)
t5 = time.perf_counter()
out = pathlib.Path(tempfile.mkdtemp())
with figure_pool():
    outputs = [s.write(model, g, out, ("png",)) for s, g in zip(sections, groups)]
t6 = time.perf_counter()
ra.write_html_report(outputs, out / "index.html", {}); t7 = time.perf_counter()
for name, a, b in [("imports", t0, t1), ("model + tokenizer load", t1, t2),
                   ("corpus batches", t2, t3), ("analyzer set-up", t3, t4),
                   ("analyzer pass", t4, t5), ("tables + figures", t5, t6), ("html", t6, t7)]:
    print(f"  {name:24s} {b - a:6.2f} s")
"""
    subprocess.run([sys.executable, "-c", code], check=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--phases", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        a_file = Path(tmp) / "a-file"
        a_file.write_text("x")
        cases = [
            ("attnlens --help", [*ATTNLENS, "--help"], False, 0.5),
            ("argument error (--batch-size 0)", [*ATTNLENS, "analyze", "--batch-size", "0"],
             True, 0.5),
            ("path error (--out is a file)", [*ATTNLENS, "analyze", "--out", str(a_file)],
             True, 0.5),
            ("demo: analyze on the sample treebank",
             [*ATTNLENS, "analyze", "--out", str(Path(tmp) / "report"), "-q"], False, 10.0),
        ]
        for label, command, fails, target in cases:
            seconds = wall(command, args.rounds, fails)
            print(f"{label:40s} {seconds:6.2f} s  ratio to target {seconds / target:5.2f} "
                  f"(target {target:g} s)")
    if args.phases:
        print("demo stages in one process:")
        phases()


if __name__ == "__main__":
    main()
