"""`make demo` after set-up: the demo's command timed from its start to its exit.

Target (issue 29): at most 6 s wall. Runs what `make demo` runs,
``attnlens analyze --out DIR --force`` (the embedded model and sample treebank, every section,
the null model, the language-model heads), with this Python's ``attnlens`` (the venv's),
``--runs`` times in fresh processes, a temporary folder for ``DIR``; prints each run's wall
time and the range. ``--floor`` then measures the demo's floor (``demo_floor.py``: its imports
and the forwards it cannot avoid, over the machine's cores) and records it beside the runs.

    python benchmarks/demo_time.py [--runs 3] [--floor]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_record import record, this_command

TARGET = 6.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--floor", action="store_true",
                        help="also measure the demo's floor (demo_floor.py)")
    args = parser.parse_args()
    attnlens = Path(sys.executable).with_name("attnlens")
    times = []
    print(f"{attnlens} analyze --out DIR --force, {args.runs} runs")
    with tempfile.TemporaryDirectory() as tmp:
        command = [str(attnlens), "analyze", "--out", str(Path(tmp) / "report"), "--force"]
        for run in range(args.runs):
            start = time.perf_counter()
            subprocess.run(command, check=True, capture_output=True)
            times.append(time.perf_counter() - start)
            print(f"run {run + 1}: {times[-1]:.2f} s", flush=True)
    low, high = min(times), max(times)
    print(f"`make demo` after set-up: {low:.2f}-{high:.2f} s over {args.runs} runs "
          f"(target <= {TARGET:g} s)")
    floor = ""
    if args.floor:
        from demo_floor import demo_floor, describe, forward_seconds

        seconds, parts, cores = demo_floor()
        print(describe(seconds, parts, cores))
        floor = (f"; floor {seconds:.2f} s = imports {parts['imports (wall)']:.2f} s + "
                 f"unavoidable forwards {forward_seconds(parts):.2f} CPU s / {cores} cores")
    record("`make demo` after set-up (`attnlens analyze --out attnlens-report --force`: 43 "
           "sentences, every section, null model, language-model heads)", f"<= {TARGET:g} s",
           (f"{low:.2f}-{high:.2f} s ({args.runs} runs: " + ", ".join(f"{t:.2f}" for t in times)
            + " s)" if args.runs > 1 else f"{low:.2f} s (1 run)") + floor,
           high <= TARGET, this_command(), key="demo")


if __name__ == "__main__":
    main()
