"""The demo's command from several checkouts or settings, alternating, with the machine's load.

Each round runs every variant once, in the order given: ``attnlens analyze --out DIR --force
--quiet`` (what `make demo` runs) in a fresh process. A variant is ``LABEL:ENV:ATTNLENS``:
a label, ``NAME=VALUE`` pairs separated by commas (or nothing), and the ``attnlens`` program
to run (a checkout's ``.venv/bin/attnlens``). Each run prints its wall seconds, its own CPU
seconds (its child processes included) and the CPU seconds other processes used meanwhile
(``/proc/stat``'s busy time less the run's own): a run with ~0 there had an idle machine.
Then the figures of its ``run.json`` (corpus pass, null pass, the probes in the child and
the process that ran their long probes, "-" where run.json does not say (before lmplace46),
the wait for them, imports, example pages, page).

    python benchmarks/demo_alternate.py --rounds 3 \\
        main::/work/main/.venv/bin/attnlens demo34::.venv/bin/attnlens \\
        spin:GOMP_SPINCOUNT=300000:.venv/bin/attnlens

Arguments after ``--`` go to every run's ``attnlens analyze`` (another corpus); ``--swap``
reverses the variants' order every other round.

    python benchmarks/demo_alternate.py --rounds 4 --swap main::/work/main/.venv/bin/attnlens \
        lm46::.venv/bin/attnlens -- --treebank ../shared/data/ud-ewt/en_ewt-ud-dev.conllu
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from attnlens.report.side_work import SIDE_PREFIX
from attnlens.runs.stopwatch import LM_PROBES, LONG_PROBES


def busy_seconds() -> float:
    """CPU seconds every process has used since boot (Linux ``/proc/stat``)."""
    with open("/proc/stat", encoding="ascii") as handle:
        ticks = [int(x) for x in handle.readline().split()[1:9]]
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")  # less idle, iowait


def children_cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def run_once(label: str, env: dict[str, str], attnlens: str, out: Path,
             extra: tuple[str, ...] = ()) -> str:
    load = Path("/proc/loadavg").read_text().split()[0]
    cpu, busy, began = children_cpu(), busy_seconds(), time.perf_counter()
    subprocess.run([attnlens, "analyze", "--out", str(out), "--force", "--quiet", *extra],
                   env={**os.environ, **env}, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - began
    own = children_cpu() - cpu
    other = busy_seconds() - busy - own
    timings = json.loads((out / "run.json").read_text())["timings"]
    fixed = timings["fixed costs"]
    child = fixed.get(SIDE_PREFIX + LM_PROBES)
    long_in = ("child" if SIDE_PREFIX + LONG_PROBES in fixed
               else "main" if LONG_PROBES in fixed else "-")
    return (f"{label:10s} load {load:>5s}  wall {wall:6.2f}  cpu {own:6.2f}  other {other:6.2f} | "
            f"pass {timings['corpus pass (forward and every analyzer)']:5.2f}  "
            f"null {timings.get('null model pass (included in total)', 0.0):5.2f}  "
            f"probes in the child {child} (long in {long_in})  "
            f"waited {fixed.get('waited for: language-model probes')}"
            f"  imports {fixed.get('imports and start-up')}  example pages "
            f"{fixed.get('example pages')}  page {fixed.get('page')}")


def parse_variant(text: str) -> tuple[str, dict[str, str], str]:
    label, pairs, attnlens = text.split(":", 2)
    env = dict(pair.split("=", 1) for pair in pairs.split(",") if pair)
    return label, env, attnlens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("variants", nargs="+", help="LABEL:ENV:ATTNLENS")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--swap", action="store_true",
                        help="every other round runs the variants in reverse order")
    argv = sys.argv[1:]
    extra = tuple(argv[argv.index("--") + 1:]) if "--" in argv else ()
    args = parser.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    variants = [parse_variant(v) for v in args.variants]
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.rounds):
            order = variants[::-1] if args.swap and i % 2 else variants
            for label, env, attnlens in order:
                print(run_once(label, env, attnlens, Path(tmp) / label, extra), flush=True)


if __name__ == "__main__":
    main()
