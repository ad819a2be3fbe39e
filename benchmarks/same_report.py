"""Are two `attnlens analyze` report folders the same, file for file and byte for byte?

Every file under the two folders (tables, figures, example pages, ``manifest.json``,
``run.json``, ``index.html``) must be identical, except what a run cannot repeat: run.json's
timings and creation time (``timings``, ``seconds``, ``created``, the null model's
``seconds`` and ``share_of_run``, each section's ``seconds``) and the checkout's own path
(the model's path inside the venv). Those are set to fixed values in copies of ``run.json``
and ``manifest.json``, and ``index.html`` (which shows run.json) is compared after each
copy's page is rendered again from the normalised ``run.json``, each with its own
checkout's code (``--render-a``, ``--render-b``: the checkout whose ``.venv`` renders;
default this one), so the page code of both checkouts is compared on the same input.
``--new-timing TEXT`` (repeatable) leaves out of both run.json copies, before the page is
rendered again, every fixed cost (``timings``, ``fixed costs``) whose name contains TEXT:
a timing entry one side adds, the one difference such a change may make.

``--before TREE`` runs the command first, one checkout after the other, into the same
``--out`` (so that paths written into the report agree) and compares the two folders;
arguments after ``--`` are passed to ``attnlens analyze``:

    python benchmarks/same_report.py A B [--render-a /work/main]
    python benchmarks/same_report.py --before /work/main [-- --treebank FILE --max-sentences 200]
    python benchmarks/same_report.py --before /work/main --new-timing "long probes"

Exit status 0 when identical, 1 otherwise (the differing files listed).
"""

from __future__ import annotations

import argparse
import filecmp
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
VOLATILE_RUN = ("timings", "seconds", "created")
VOLATILE_NULL = ("seconds", "share_of_run")
RENDER = "import sys; from attnlens.report.folder import Report; Report(sys.argv[1]).render()"


def _normalised_json(path: Path, tree: Path, new_timings: tuple[str, ...] = ()) -> None:
    """Replace the checkout's path and run.json's timings by fixed values, in place (the
    fixed costs named by any of ``new_timings`` left out)."""
    venv = tree / ".venv"  # a symlink to another checkout's venv: its real path too
    text = path.read_text().replace(str(venv.resolve()), "<checkout>/.venv")
    text = text.replace(str(tree), "<checkout>")
    data = json.loads(text)
    if path.name == "run.json":
        costs = data.get("timings", {}).get("fixed costs", {})
        for name in [n for n in costs if any(t in n for t in new_timings)]:
            del costs[name]
        for key in VOLATILE_RUN:
            if key in data:
                data[key] = _zeroed(data[key])
        if isinstance(data.get("null"), dict):
            for key in VOLATILE_NULL:
                if key in data["null"]:
                    data["null"][key] = 0.0
        for section in data.get("sections", []):
            if isinstance(section, dict) and "seconds" in section:
                section["seconds"] = 0.0
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def _zeroed(value):
    """Numbers set to 0 and strings emptied, the nesting kept (the page reads them)."""
    if isinstance(value, dict):
        return {k: _zeroed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_zeroed(v) for v in value]
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        return 0
    return "" if isinstance(value, str) else value


def _prepared(folder: Path, tree: Path, into: Path, new_timings: tuple[str, ...]) -> Path:
    copy = into / folder.name
    shutil.copytree(folder, copy)
    for name in ("run.json", "manifest.json"):
        if (copy / name).is_file():
            _normalised_json(copy / name, tree, new_timings)
    if (copy / "run.json").is_file():
        python = tree / ".venv" / "bin" / "python"
        env = {**os.environ, "PYTHONPATH": str(tree)}
        subprocess.run([str(python), "-c", RENDER, str(copy)], check=True, env=env,
                       cwd=tree)
    return copy


def _files(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()}


def differences(a: Path, b: Path, tree_a: Path = HERE, tree_b: Path = HERE,
                new_timings: tuple[str, ...] = ()) -> list[str]:
    """Relative paths that differ (or exist on one side only) after normalising."""
    with tempfile.TemporaryDirectory() as tmp:
        left = _prepared(a, tree_a, Path(tmp) / "a", new_timings)
        right = _prepared(b, tree_b, Path(tmp) / "b", new_timings)
        names_a, names_b = _files(left), _files(right)
        differ = [f"only in {a}: {n}" for n in sorted(names_a - names_b)]
        differ += [f"only in {b}: {n}" for n in sorted(names_b - names_a)]
        differ += [n for n in sorted(names_a & names_b)
                   if not filecmp.cmp(left / n, right / n, shallow=False)]
    return differ


def _run(tree: Path, out: Path, extra: list[str]) -> None:
    command = [str(tree / ".venv" / "bin" / "attnlens"), "analyze", "--out", str(out),
               "--force", "--quiet", *extra]
    # PYTHONPATH: the checkout's own code even where its .venv is another's (a symlink)
    subprocess.run(command, check=True, cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)})


def main() -> None:
    argv = sys.argv[1:]
    extra: list[str] = []
    if "--" in argv:
        at = argv.index("--")
        argv, extra = argv[:at], argv[at + 1:]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="*", type=Path)
    parser.add_argument("--render-a", type=Path, default=HERE)
    parser.add_argument("--render-b", type=Path, default=HERE)
    parser.add_argument("--before", type=Path, help="run main's command from this checkout")
    parser.add_argument("--keep", type=Path, help="keep the two folders here (a/, b/)")
    parser.add_argument("--new-timing", action="append", default=[],
                        help="leave out the fixed costs whose name contains this")
    args = parser.parse_args(argv)
    if args.before is not None:
        keep = args.keep or Path(tempfile.mkdtemp(prefix="same-report-"))
        out = keep / "report"
        folders = []
        for tree, name in ((args.before.resolve(), "a"), (HERE, "b")):
            _run(tree, out, extra)
            shutil.rmtree(keep / name, ignore_errors=True)
            out.rename(keep / name)
            folders.append(keep / name)
        a, b = folders
        tree_a, tree_b = args.before.resolve(), HERE
    elif len(args.folders) == 2:
        a, b = args.folders
        tree_a, tree_b = args.render_a.resolve(), args.render_b.resolve()
    else:
        parser.error("give two folders, or --before TREE")
    differ = differences(a, b, tree_a, tree_b, tuple(args.new_timing))
    n = len(_files(a))
    if differ:
        print(f"{len(differ)} of {n} files differ ({a} against {b}):")
        for name in differ:
            print(f"  {name}")
        raise SystemExit(1)
    print(f"identical: {n} files ({a} against {b})")


if __name__ == "__main__":
    main()
