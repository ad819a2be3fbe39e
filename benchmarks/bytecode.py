"""attnlens' own modules loaded from bytecode (compiled by `make setup`) or compiled at each
start, as they are wherever ``PYTHONDONTWRITEBYTECODE`` is set (issue 29, fixed costs).

An editable install leaves no bytecode for the package (a wheel install compiles it), and
with ``PYTHONDONTWRITEBYTECODE=1`` Python never writes it: every command compiled the ~230
modules `analyze` imports again. This copies ``attnlens/`` (with ``cli/`` as
``attnlens/cli``, kernels included) into two temporary folders, compiles one of them
(``python -m compileall``, as `make setup` does), and imports the modules a demo run imports
(listed by one run of ``attnlens analyze --null none`` first) in fresh processes, the two
copies alternated round by round, with ``PYTHONDONTWRITEBYTECODE=1``. Third-party modules are
imported before the clock starts. Prints the median CPU seconds of the imports per copy.

    python benchmarks/bytecode.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

LIST_MODULES = """
import atexit, json, sys
listed = sys.argv[1]
atexit.register(lambda: json.dump(sorted(m for m in sys.modules if m.startswith("attnlens")),
                                  open(listed, "w")))
from attnlens.cli.app import main
sys.argv = ["attnlens", "analyze", "--out", sys.argv[2], "--force", "--null", "none"]
main()
"""

IMPORT_MODULES = """
import importlib, json, resource, sys
import numpy, pandas, torch, transformers  # third-party: not timed
names = json.load(open(sys.argv[1]))
before = resource.getrusage(resource.RUSAGE_SELF)
for name in names:
    importlib.import_module(name)
after = resource.getrusage(resource.RUSAGE_SELF)
assert all(m.__file__.startswith(sys.argv[2]) for n, m in sys.modules.items()
           if n.startswith("attnlens") and getattr(m, "__file__", None))
print(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
"""


def copy_package(into: Path) -> Path:
    """``attnlens/`` and ``cli/`` (as ``attnlens/cli``) copied under ``into``, no bytecode."""
    ignore = shutil.ignore_patterns("__pycache__")
    shutil.copytree(ROOT / "attnlens", into / "attnlens", ignore=ignore)
    shutil.copytree(ROOT / "cli", into / "attnlens" / "cli", ignore=ignore)
    return into


def run(code: str, path: Path, *args: str) -> str:
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": str(path)}
    done = subprocess.run([sys.executable, "-c", code, *args], env=env, cwd=path,
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"failed ({done.returncode}): {done.stderr[-2000:]}")
    return done.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        source = copy_package(tmp_path / "source")
        compiled = copy_package(tmp_path / "compiled")
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(compiled / "attnlens")],
                       check=True, stdout=subprocess.DEVNULL)
        names = tmp_path / "modules.json"
        run(LIST_MODULES, compiled, str(names), str(tmp_path / "report"))
        seconds: dict[str, list[float]] = {"compiled at each start": [], "bytecode": []}
        for _ in range(args.rounds):
            for label, tree in (("compiled at each start", source), ("bytecode", compiled)):
                seconds[label].append(float(run(IMPORT_MODULES, tree, str(names), str(tree))))
        count = len(json.loads(names.read_text()))
        print(f"{count} attnlens modules imported by `attnlens analyze --null none`; CPU s of "
              f"their imports, median of {args.rounds} fresh processes:")
        medians = {label: statistics.median(values) for label, values in seconds.items()}
        for label, value in medians.items():
            print(f"  {label:24s} {value:.3f} s  ({', '.join(f'{v:.3f}' for v in seconds[label])})")
        print(f"  saved by bytecode: {medians['compiled at each start'] - medians['bytecode']:.3f}"
              " CPU s per command")


if __name__ == "__main__":
    main()
