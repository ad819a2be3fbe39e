"""Start-up of `attnlens analyze`: imports, model and tokenizer load, the null model's
initialisation, and the whole demo, each in fresh processes, this checkout against another
(``--before /work/main``) interleaved round by round (issue 29, fixed costs).

Stages (each a new process running this checkout's or the other's code with its own venv):

- ``help``: ``attnlens analyze --help`` (must stay torch-free);
- ``imports``: the modules `analyze` imports before it reads the corpus (``cli.analyze``'s
  body imports) and then what the report needs (``attnlens.report.analyze``);
- ``load``: ``imports`` plus ``attnlens.load()`` (MiniLM and its tokenizer);
- ``null``: ``load`` plus the null model's initialisation (``random_init_copy``);
- ``demo`` (``--demo``): ``attnlens analyze --out DIR --force --quiet`` (the sample treebank).

Each process's wall time and CPU time (user + sys of the process and its children, from
``os.wait4``) are recorded; the minimum over ``--rounds`` is printed per stage and
checkout, with the before/after ratio. ``--demo`` also prints the demo's run.json fixed
costs (imports and start-up, model and tokenizer load, null model initialisation) per round.

    python benchmarks/startup.py --before /work/main [--rounds 5] [--demo]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

STAGES = {
    "imports": "import attnlens.cli.app, attnlens.report.analyze, attnlens.loaders",
    "load": ("import attnlens.cli.app, attnlens.report.analyze, attnlens.loaders\n"
             "model, tokenizer = attnlens.loaders.load()"),
    "null": ("import attnlens.cli.app, attnlens.report.analyze, attnlens.loaders\n"
             "from attnlens.loaders.random_init import random_init_copy\n"
             "model, tokenizer = attnlens.loaders.load()\n"
             "random_init_copy(model, 0)"),
}


def timed(command: list[str], cwd: Path) -> tuple[float, float]:
    """(wall s, CPU s of the process and its children) of one run."""
    start = time.perf_counter()
    proc = subprocess.Popen(command, cwd=cwd, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    err = proc.stderr.read().decode() if proc.stderr else ""
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(command)} in {cwd} exited {proc.returncode}: {err[-2000:]}")
    return wall, usage.ru_utime + usage.ru_stime


def commands(tree: Path, demo_dir: Path) -> dict[str, list[str]]:
    python = str(tree / ".venv" / "bin" / "python")
    found = {"help": [python, "-m", "attnlens.cli", "analyze", "--help"]}
    found.update({name: [python, "-c", code] for name, code in STAGES.items()})
    found["demo"] = [python, "-m", "attnlens.cli", "analyze", "--out", str(demo_dir),
                     "--force", "--quiet"]
    return found


FIXED = ("imports and start-up", "model and tokenizer load", "null model: initialisation")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, required=True, help="the other checkout")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--demo", action="store_true", help="also time the whole demo")
    parser.add_argument("--stages", default="help,imports,load,null")
    args = parser.parse_args()
    stages = args.stages.split(",") + (["demo"] if args.demo else [])
    trees = {"before": args.before.resolve(), "after": ROOT}
    results: dict[tuple[str, str], list[tuple[float, float]]] = {}
    fixed: dict[str, list[dict]] = {"before": [], "after": []}
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(args.rounds):
            for stage in stages:
                for label in (("before", "after") if round_ % 2 == 0 else ("after", "before")):
                    out = Path(tmp) / f"{label}-demo"
                    command = commands(trees[label], out)[stage]
                    results.setdefault((stage, label), []).append(timed(command, trees[label]))
                    if stage == "demo":
                        run = json.loads((out / "run.json").read_text(encoding="utf-8"))
                        costs = run["timings"]["fixed costs"]
                        fixed[label].append({k: costs.get(k) for k in FIXED})
            print(f"round {round_ + 1}/{args.rounds} done", file=sys.stderr)
    print(f"{'stage':8s} {'before wall':>11s} {'after wall':>10s} {'ratio':>6s}   "
          f"{'before CPU':>10s} {'after CPU':>9s} {'ratio':>6s}   (min of {args.rounds})")
    for stage in stages:
        bw = min(w for w, _ in results[(stage, "before")])
        aw = min(w for w, _ in results[(stage, "after")])
        bc = min(c for _, c in results[(stage, "before")])
        ac = min(c for _, c in results[(stage, "after")])
        print(f"{stage:8s} {bw:11.2f} {aw:10.2f} {bw / aw:6.2f}   {bc:10.2f} {ac:9.2f} "
              f"{bc / ac:6.2f}")
    for label in ("before", "after"):
        for i, costs in enumerate(fixed[label]):
            print(f"demo run.json fixed costs, {label}, round {i + 1}: "
                  + ", ".join(f"{k} {v}" for k, v in costs.items()))


if __name__ == "__main__":
    main()
