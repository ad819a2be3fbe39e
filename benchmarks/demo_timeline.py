"""A timeline of the demo's command: the main process and its forked children, phase by phase.

Runs ``attnlens analyze --out DIR --force --quiet [ARGS]`` (what `make demo` runs) as the
program itself, in this process, and logs, with wall times from the process's start and the
CPU seconds of the process that ran it (a forked child's count from its fork):

- every ``attnlens.runs.stopwatch`` phase, in the main process and in the children (the
  language-model probes, the collapse variants' own passes, the null model's parts, ...);
- each side job's child (``report.side_work``: start, end, CPU) and the main process's
  waits for it;
- the corpus pass, the null model, each section's write (its end; its length is in
  run.json), the language-model heads' long probes (in whichever process ran them), the
  example pages and the page.

Then the windows where the main process ran alone (before the first fork; after the last
child ended: its tail, where a second core idles) and what it did there. Wall times include
the instrumentation (a few ms). With ``--profile FILE`` the main process is also profiled
(cProfile; slower).

    python benchmarks/demo_timeline.py [--out DIR] [--profile FILE] [-- ARGS...]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from contextlib import contextmanager
from importlib.abc import MetaPathFinder
from pathlib import Path

T0 = 0.0  # the process's start on the wall clock (main() sets it)
LOG: Path | None = None  # the events' file, one JSON list a line


def log(kind: str, name: str, began: float, ended: float) -> None:
    """One event, appended to the log file at once (children end with os._exit)."""
    row = [os.getpid(), kind, name, round(began - T0, 3), round(ended - T0, 3),
           round(time.process_time(), 2)]
    with open(LOG, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(row) + "\n")


def timed_call(function, kind: str, name):
    def run(*args, **kwargs):
        began = time.time()
        try:
            return function(*args, **kwargs)
        finally:
            log(kind, name(args) if callable(name) else name, began, time.time())
    return run


def instrument_light() -> None:
    """The modules that import no torch: stopwatch's phases and the side jobs."""
    from attnlens.report import side_work
    from attnlens.runs import stopwatch

    phase = stopwatch.phase

    @contextmanager
    def logged(name: str):
        began = time.time()
        try:
            with phase(name):
                yield
        finally:
            log("phase", name, began, time.time())

    stopwatch.phase = logged
    child = side_work._child

    def logged_child(work, send, receive, parent):
        began = time.time()
        name = getattr(getattr(work, "func", work), "__name__", "work")
        try:
            child(work, send, receive, parent)
        finally:
            log("child", name, began, time.time())

    side_work._child = logged_child
    side_work.SideJob.result = timed_call(side_work.SideJob.result, "wait",
                                          lambda args: args[0].name)


def instrument_analyze(module) -> None:
    """``attnlens.report.analyze`` once imported (it imports torch)."""
    for name in ("run_sharded", "run_null", "_write_sections", "_analyzers_and_probes"):
        setattr(module, name, timed_call(getattr(module, name), "call", name))
    module._write_held = timed_call(module._write_held, "written",
                                    lambda args: args[-1].name)  # staging/<section>
    module.LmHeads._long_runs = timed_call(module.LmHeads._long_runs, "call",
                                           "long probes (LmHeads._long_runs)")
    from attnlens.report.folder import Report

    Report.render = timed_call(Report.render, "call", "page (Report.render)")


class AfterImport(MetaPathFinder):
    """Instrument ``attnlens.report.analyze`` as it is first imported (not before: the
    command imports torch when it chooses to)."""

    def find_spec(self, fullname, path, target=None):
        if fullname != "attnlens.report.analyze":
            return None
        sys.meta_path.remove(self)
        from importlib.util import find_spec

        spec = find_spec(fullname)
        execute = spec.loader.exec_module

        def exec_module(module):
            execute(module)
            instrument_analyze(module)

        spec.loader.exec_module = exec_module
        return spec


def report(rows: list[list]) -> str:
    main_pid = min(r[0] for r in rows)
    children = {r[0]: r[2] for r in rows if r[1] == "child"}
    lines = [f"{'process':28s} {'start':>6s} {'end':>6s} {'wall':>5s} {'cpu@end':>7s}  what"]
    for pid, kind, name, began, ended, cpu in sorted(rows, key=lambda r: (r[3], -r[4])):
        who = "main" if pid == main_pid else f"child {children.get(pid, pid)}"
        lines.append(f"{who:28s} {began:6.2f} {ended:6.2f} {ended - began:5.2f} {cpu:7.2f}  "
                     f"{kind}: {name}")
    spans = [(r[3], r[4]) for r in rows if r[1] == "child"]
    end = max(r[4] for r in rows)
    if spans:
        first_fork, last_child = min(s for s, _ in spans), max(e for _, e in spans)
        cpu_children = sum(r[5] for r in rows if r[1] == "child")
        lines += ["", f"main alone before the first fork: 0.00-{first_fork:.2f} s "
                  f"(imports, model load, the probes' analyzers)",
                  f"children: {len(spans)}, from {first_fork:.2f} to {last_child:.2f} s, "
                  f"{cpu_children:.2f} CPU s together",
                  f"main alone after the last child ended (its tail): {last_child:.2f}-"
                  f"{end:.2f} s = {end - last_child:.2f} s"]
    return "\n".join(lines)


def main() -> None:
    global T0, LOG
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None, help="report folder (default: a temporary one)")
    parser.add_argument("--profile", default=None, help="write a cProfile of the main process")
    parser.add_argument("args", nargs="*", help="more arguments of `attnlens analyze`")
    options = parser.parse_args()
    T0 = time.time() - time.clock_gettime(time.CLOCK_MONOTONIC) + _process_start()
    with tempfile.TemporaryDirectory() as tmp:
        LOG = Path(tmp) / "events.jsonl"
        LOG.touch()
        out = options.out or str(Path(tmp) / "report")
        instrument_light()
        sys.meta_path.insert(0, AfterImport())
        sys.argv = ["attnlens", "analyze", "--out", out, "--force", "--quiet", *options.args]
        from attnlens.cli.app import main as attnlens_main

        profile = None
        if options.profile:
            import cProfile

            profile = cProfile.Profile()
            profile.enable()
        try:
            attnlens_main()
        except SystemExit as exc:
            if exc.code:
                raise
        finally:
            if profile is not None:
                profile.disable()
                profile.dump_stats(options.profile)
            log("end", "the command returned", time.time(), time.time())
        rows = [json.loads(line) for line in LOG.read_text().splitlines()]
    print(report(rows))


def _process_start() -> float:
    """This process's start on the monotonic clock (Linux /proc; now elsewhere)."""
    try:
        with open("/proc/self/stat", encoding="ascii") as handle:
            started = int(handle.read().rsplit(")", 1)[1].split()[19])
        return started / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return time.clock_gettime(time.CLOCK_MONOTONIC)


if __name__ == "__main__":
    main()
