"""The report's null-model pass before and after null35, alternated in one process.

Runs ``attnlens COMMAND --out TMP --force --quiet [ARGS]`` (``--command``, default
``analyze``) in this process with the null
pass replaced by a recorder (so the corpus pass, tables and page run once, as the command
runs them), then calls on the recorded model, batches and sections, ``--rounds`` times
after one warm-up call of each, alternating which goes first:

- ``before``: the pass as it was before null35 (6c762e5, kept in
  ``tests/null_pass_before.py``): every null-control section's whole ``write`` on the null
  model, every forward to the last layer;
- ``after``: ``report.null_run.run_null``.

Each call's wall time (``time.perf_counter``) and CPU time of every thread
(``time.process_time``), split into initialisation, pass and tables (the stopwatch phases
of ``run_null``), the median per path and their ratio, and whether the two calls' tables
agree on every table the after pass makes (``pandas.testing.assert_frame_equal``, exact):

    python benchmarks/null_pass.py [--rounds 3] [--command analyze] [-- --treebank FILE]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from anywhere: the reference lives in tests/
PHASES = {"null model: initialisation": "init",
          "null model: its pass over the corpus sample": "pass",
          "null model: its tables": "tables"}


def _recorded(args: list[str], command: str = "analyze") -> tuple:
    """The null pass's arguments as ``attnlens COMMAND ARGS`` gives them."""
    from attnlens.cli.app import main

    import attnlens.report.analyze as analyze

    recorded = []
    analyze.run_null = lambda *a, **k: recorded.append(a)  # the report gets no null columns
    with tempfile.TemporaryDirectory() as out:
        try:
            main([command, "--out", out, "--force", "--quiet", *args])
        except SystemExit as stop:
            if stop.code:
                raise
    return recorded[0]


def _timed(run, recorded) -> tuple[dict[str, float], object]:
    from attnlens.runs import stopwatch

    stopwatch.take()
    wall, cpu = time.perf_counter(), time.process_time()
    result = run(*recorded)
    times = {"wall": time.perf_counter() - wall, "cpu": time.process_time() - cpu}
    taken = stopwatch.take()
    times.update({short: taken.get(name, 0.0) for name, short in PHASES.items()})
    return times, result


def main() -> None:
    argv = sys.argv[1:]
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[:argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--command", default="analyze", help="or heads, rollout, ...")
    args = parser.parse_args(argv)
    os.environ.setdefault("ATTNLENS_SIDE_WORKERS", "0")
    import pandas as pd

    from attnlens.report.null_run import run_null

    recorded = _recorded(extra, args.command)
    from tests.null_pass_before import run_null_before

    paths = {"before": run_null_before, "after": run_null}
    found = {name: [] for name in paths}
    results = {name: _timed(run, recorded)[1] for name, run in paths.items()}  # warm-up
    for name, table in results["after"].tables.items():
        pd.testing.assert_frame_equal(table, results["before"].tables[name], check_exact=True)
    print(f"tables: after's {len(results['after'].tables)} equal before's; before also made "
          f"{sorted(set(results['before'].tables) - set(results['after'].tables))}")
    for r in range(args.rounds):
        for name in (("before", "after") if r % 2 == 0 else ("after", "before")):
            times, _ = _timed(paths[name], recorded)
            found[name].append(times)
            print(f"round {r} {name:6s} " + " ".join(f"{k} {v:.2f}" for k, v in times.items())
                  + f"  load {os.getloadavg()[0]:.2f}", flush=True)
    for key in found["before"][0]:
        old = statistics.median(t[key] for t in found["before"])
        new = statistics.median(t[key] for t in found["after"])
        print(f"median {key:6s} before {old:.2f} s  after {new:.2f} s  ratio "
              f"{new / old if old else float('nan'):.2f}")


if __name__ == "__main__":
    main()
