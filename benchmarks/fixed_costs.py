"""Fixed costs a new user meets: `attnlens --help`, an argument error, a path error, the demo.

Targets (DESIGN.md): ``attnlens --help`` and any argument or path error <= 0.5 s; `make demo`
after set-up (``attnlens analyze --out attnlens-report --force`` on the embedded sample treebank,
43 sentences) <= 10 s wall. Each command runs in a fresh process, wall time from its start
to its exit (median of ``--rounds``); the figures are printed as ratios to their targets.

``--phases`` also times the demo's stages in one process (imports, model + tokenizer load,
corpus, the analyzer pass, tables + figures, HTML), which is where the demo's time goes, and
prints the itemised fixed costs its ``run.json`` records (``timings``, ``fixed costs``: the
null model's initialisation, pass and tables, the language-model probes, example pages, the
page, ...).

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

from bench_record import record, this_command

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
import json, pathlib, tempfile
import torch, attnlens.report.analyze as ra, attnlens.loaders as L, attnlens.data.corpus as C
t1 = time.perf_counter()
corpus = C.load_corpus(text=None, treebank=None)
model, tok = L.load(None); t2 = time.perf_counter()
batches = corpus.batches(tok, batch_size=16, max_length=128); t3 = time.perf_counter()
out = pathlib.Path(tempfile.mkdtemp()) / "report"
ra.analyze(model, tok, batches, out, show_progress=False, command="fixed_costs")
t4 = time.perf_counter()
timings = json.loads((out / "run.json").read_text())["timings"]
corpus_pass = timings["corpus pass (forward and every analyzer)"]
writes = sum(s["tables and figures"] for s in timings["sections"].values())
for name, seconds in [("imports", t1 - t0), ("model + tokenizer load", t2 - t1),
                      ("corpus batches", t3 - t2), ("corpus pass (every analyzer)", corpus_pass),
                      ("tables (figures queued)", writes),
                      ("figures drawn + run.json + page", t4 - t3 - corpus_pass - writes)]:
    print(f"  {name:32s} {seconds:6.2f} s")
print("  run.json's itemised fixed costs (timings: fixed costs; section tables after):")
for name, seconds in timings.get("fixed costs", {}).items():
    print(f"    {seconds:6.2f} s  {name}")
for name, section in timings["sections"].items():
    print(f"    {section['tables and figures']:6.2f} s  section {name}: tables and figures")
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
             [*ATTNLENS, "analyze", "--out", str(Path(tmp) / "report"), "-q", "--force"],
             False, 10.0),
        ]
        measured = []
        for label, command, fails, target in cases:
            seconds = wall(command, args.rounds, fails)
            print(f"{label:40s} {seconds:6.2f} s  ratio to target {seconds / target:5.2f} "
                  f"(target {target:g} s)")
            measured.append((seconds, target))
    if args.phases:
        print("demo stages in one process:")
        phases()
    quick = measured[:3]  # --help, the argument error, the path error (the demo: demo_time.py)
    record("`attnlens --help`; an argument error; a path error", "<= 0.5 s",
           "; ".join(f"{seconds:.2f} s" for seconds, _ in quick)
           + f" (each the median of {args.rounds} fresh process"
           + ("es)" if args.rounds > 1 else ")"),
           all(seconds <= target for seconds, target in quick), this_command(),
           key="fixed.cli")


if __name__ == "__main__":
    main()
