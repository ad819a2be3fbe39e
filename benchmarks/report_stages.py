"""CPU time of `attnlens analyze`'s stages after the corpus pass, two checkouts interleaved.

Each round runs ``attnlens analyze --out DIR --force --quiet [ARGS]`` in a fresh process
of each checkout in turn (``--before TREE``, then this one), calling the CLI's ``main`` a
few times in that process (``--inner``; the first call, which warms caches and imports,
is left out), and times with ``time.process_time`` (every thread of the process):

- ``corpus pass``: the forward with every analyzer (``run_sharded`` inside ``analyze``);
- ``null init``, ``null pass``, ``null tables``: the null model's initialisation, its pass
  over the corpus sample, its sections' tables (``run_null``'s three phases);
- ``null tables <section>``: each section's part of ``null tables``;
- ``table files (after each section)``: since once32 a section's ``write_table`` calls are
  held back and its files written once when it returns (``analyze._write_held``), outside
  ``tables <section>``, which before once32 included them: compare the sums;
- ``tables <section>``: each section's tables and figures (``Section.write``; figures are
  drawn in worker processes, whose CPU time is not counted); the language-model probes'
  forwards (``LmHeads._synthetic``) run once in the warm-up call and are reused afterwards,
  so they are out of these figures;
- ``null columns``: ``join_null`` (``apply_null`` before once32); ``page``:
  ``Report.render``;
- ``after the pass``: everything of ``main`` but the corpus pass and the probes.

The side worker is off (``ATTNLENS_SIDE_WORKERS=0``) and torch's threads as the command
sets them. Prints the median of each stage per checkout and their ratio:

    python benchmarks/report_stages.py --before /work/main [--rounds 3] [--inner 3]
        [--threads 1] [--profile FILE]
        [-- --treebank /work/shared/data/ud-ewt/en_ewt-ud-dev.conllu --max-sentences 300]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]


def _instrument(seconds: dict[str, float]) -> None:
    """Wrap the stages with CPU timers adding into ``seconds`` (in this process)."""
    import copy
    import functools

    import attnlens.report.analyze as analyze
    import attnlens.report.folder as folder
    import attnlens.runs.stopwatch as stopwatch
    from attnlens.measures.lm_heads.run import LmHeads
    from attnlens.measures.registry import report_measures

    state = {"null": False}

    def timed(key_of, function):
        @functools.wraps(function)
        def run(*args, **kwargs):
            began = time.process_time()
            try:
                return function(*args, **kwargs)
            finally:
                key = key_of(*args) if callable(key_of) else key_of
                if key:
                    seconds[key] = seconds.get(key, 0.0) + time.process_time() - began
        return run

    analyze.run_sharded = timed("corpus pass", analyze.run_sharded)
    if hasattr(analyze, "_write_held"):  # once32: the tables' files, after each section
        analyze._write_held = timed("table files (after each section)", analyze._write_held)
    for name in ("join_null", "apply_null"):  # once32's name, and the one before it
        if hasattr(analyze, name):
            setattr(analyze, name, timed("null columns", getattr(analyze, name)))
    folder.Report.render = timed("page", folder.Report.render)
    original_null = analyze.run_null

    def run_null(*args, **kwargs):
        state["null"] = True
        try:
            return original_null(*args, **kwargs)
        finally:
            state["null"] = False
    analyze.run_null = run_null

    original_phase = stopwatch.phase

    def phase(name):
        key = {"null model: initialisation": "null init",
               "null model: its pass over the corpus sample": "null pass",
               "null model: its tables": "null tables"}.get(name)
        return _cpu_phase(original_phase(name), key, seconds)
    stopwatch.phase = phase

    for measure in report_measures():
        cls = analyze.section_class(measure)
        if "write" in vars(cls):
            cls.write = timed(lambda self, *a: f"{'null ' if state['null'] else ''}tables "
                              f"{self.name}", cls.write)

    cache: dict = {}
    original_synthetic = LmHeads._synthetic

    def synthetic(self, model, facts):
        began = time.process_time()
        if "runs" not in cache:
            made: dict = {}
            cache["runs"] = (original_synthetic(self, model, made), made)
        runs, made = copy.deepcopy(cache["runs"])
        facts.update(made)
        seconds["probes (left out)"] = (seconds.get("probes (left out)", 0.0)
                                        + time.process_time() - began)
        return runs
    LmHeads._synthetic = synthetic


class _cpu_phase:
    def __init__(self, inner, key, seconds):
        self.inner, self.key, self.seconds = inner, key, seconds

    def __enter__(self):
        self.began = time.process_time()
        return self.inner.__enter__()

    def __exit__(self, *exc):
        if self.key:
            self.seconds[self.key] = (self.seconds.get(self.key, 0.0)
                                      + time.process_time() - self.began)
        return self.inner.__exit__(*exc)


def child(inner: int, extra: list[str], profile: str | None = None,
          threads: int | None = None) -> None:
    """Run the command ``inner`` times in this process; print one JSON line per timed call;
    ``profile``: the last call under cProfile, its statistics written there."""
    import cProfile

    import torch

    from cli.app import main

    if threads:
        torch.set_num_threads(threads)

    with tempfile.TemporaryDirectory() as tmp:
        for call in range(inner):
            seconds: dict[str, float] = {}
            if call == 0:
                _instrument(seconds)
                holder = seconds
            else:
                holder.clear()
            profiler = cProfile.Profile() if profile and call == inner - 1 else None
            began = time.process_time()
            try:
                if profiler is not None:
                    profiler.enable()
                main(["analyze", "--out", f"{tmp}/report", "--force", "--quiet", *extra])
            except SystemExit as exc:
                if exc.code:
                    raise
            finally:
                if profiler is not None:
                    profiler.disable()
                    profiler.dump_stats(profile)
            whole = time.process_time() - began
            if call == 0:
                continue
            holder["after the pass"] = (whole - holder.get("corpus pass", 0.0)
                                        - holder.get("probes (left out)", 0.0))
            print("STAGES " + json.dumps(holder), flush=True)


def _one(tree: Path, inner: int, extra: list[str], profile: str | None = None,
         threads: int | None = None) -> list[dict[str, float]]:
    env = {**os.environ, "PYTHONPATH": str(tree), "ATTNLENS_SIDE_WORKERS": "0"}
    command = [str(tree / ".venv" / "bin" / "python"), str(Path(__file__).resolve()),
               "--child", "--inner", str(inner), *(["--profile", profile] if profile else []),
               *(["--threads", str(threads)] if threads else []),
               "--", *extra]
    done = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"{tree}: exit {done.returncode}\n{done.stderr[-3000:]}")
    return [json.loads(line[len("STAGES "):]) for line in done.stdout.splitlines()
            if line.startswith("STAGES ")]


def main() -> None:
    argv = sys.argv[1:]
    extra: list[str] = []
    if "--" in argv:
        at = argv.index("--")
        argv, extra = argv[:at], argv[at + 1:]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--inner", type=int, default=3)
    parser.add_argument("--child", action="store_true")
    parser.add_argument("--profile", help="this checkout's last call profiled (cProfile) here")
    parser.add_argument("--threads", type=int,
                        help="torch threads (1: no OpenMP thread spins while the machine is "
                        "shared, so CPU time counts work, not waiting)")
    args = parser.parse_args(argv)
    if args.child:
        child(args.inner, extra, args.profile, args.threads)
        return
    trees = ([("before", args.before.resolve())] if args.before else []) + [("now", HERE)]
    runs: dict[str, list[dict[str, float]]] = {name: [] for name, _ in trees}
    for round_ in range(args.rounds):
        for name, tree in trees:
            got = _one(tree, args.inner, extra, args.profile if tree == HERE else None,
                       args.threads)
            runs[name].extend(got)
            print(f"round {round_ + 1} {name}: after the pass "
                  + ", ".join(f"{r['after the pass']:.2f}" for r in got) + " CPU s", flush=True)
    keys = list(dict.fromkeys(k for name, _ in trees for r in runs[name] for k in r))
    header = f"{'stage (CPU s, median)':32}" + "".join(f"{n:>10}" for n, _ in trees)
    print(header + ("     ratio" if len(trees) == 2 else ""))
    for key in keys:
        medians = [statistics.median(r.get(key, 0.0) for r in runs[n]) for n, _ in trees]
        ratio = (f"{medians[0] / medians[1]:10.2f}" if len(trees) == 2 and medians[1] > 0
                 else "")
        print(f"{key:32}" + "".join(f"{m:10.3f}" for m in medians) + ratio)


if __name__ == "__main__":
    main()
