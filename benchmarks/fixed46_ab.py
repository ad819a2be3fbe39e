"""fixed46: main's table files and the page's table payload, this checkout's path against
main's, alternated round by round in one process (outputs compared first). Prints the median
CPU seconds of each and the ratio new / old:

    python benchmarks/fixed46_ab.py [--rounds 11] [--report reports/minilm]

Every table of ``--report`` is read back as the page reads it (``Report.tables``); a report
of ``analyze`` over UD EWT dev (``--treebank .../en_ewt-ud-dev.conllu``) gives its tables'
sizes (syntactic_accuracy: 6,696 rows).

- ``csv``: each table's CSV text (formulas neutralised, then written to memory): this
  checkout's ``runs.io.write_csv`` (each column's cells at once, each distinct float64 value
  formatted once) against pandas' ``to_csv`` (what main writes).
- ``markdown``: ``runs.io.markdown_table`` (floats: each distinct value formatted once)
  against main's module, read from git.
- ``payload``: ``report.payload.encode_table`` of each table (floats: each distinct value
  rounded once) against main's module.
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import statistics
import subprocess
import tempfile
import time
from pathlib import Path


def main_module(path: str):
    """main's ``path`` (``attnlens/...py``) loaded from git as a module of its own."""
    text = subprocess.run(["git", "show", f"main:{path}"], check=True, text=True,
                          capture_output=True).stdout
    file = Path(tempfile.mkdtemp()) / ("main_" + Path(path).name)
    file.write_text(text)
    spec = importlib.util.spec_from_file_location(file.stem, file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def report_tables(report: str) -> list:
    from attnlens.report.folder import Report

    folder = Report(report)
    return [folder.tables[name] for name in folder.tables]


def csv_texts(tables: list):
    """Every table's CSV text, by ``write_csv`` and by pandas' ``to_csv``."""
    from attnlens.runs.io import neutralise_formulas, write_csv

    ready = [neutralise_formulas(table) for table in tables]

    def text(write) -> list[str]:
        texts = []
        for table in ready:
            buffer = io.StringIO()
            write(table, buffer)
            texts.append(buffer.getvalue())
        return texts

    return ((lambda: text(write_csv)),
            (lambda: text(lambda table, handle: table.to_csv(handle, index=False))))


def markdown(tables: list):
    """Every table as Markdown, this checkout's ``markdown_table`` and main's."""
    from attnlens.runs import io as runs_io

    old_module = main_module("attnlens/runs/io.py")
    return ((lambda: [runs_io.markdown_table(t) for t in tables]),
            (lambda: [old_module.markdown_table(t) for t in tables]))


def payload(tables: list):
    """Every table encoded for the page, this checkout's way and main's."""
    from attnlens.report import payload as module

    old_module = main_module("attnlens/report/payload.py")
    return ((lambda: [module.encode_table(t) for t in tables]),
            (lambda: [old_module.encode_table(t) for t in tables]))


def same(a, b) -> bool:
    """Equal outputs, compared as JSON text where they are dicts (-0.0 is not 0.0 there)."""
    import json

    return json.dumps(a) == json.dumps(b)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--report", default="reports/minilm", help="a report folder")
    args = parser.parse_args()
    tables = report_tables(args.report)
    print(f"{len(tables)} tables, {sum(len(t) for t in tables)} rows")
    for name, make in (("csv", csv_texts), ("markdown", markdown), ("payload", payload)):
        new, old = make(tables)
        assert same(new(), old()), name
        times: dict[str, list[float]] = {"old": [], "new": []}
        for _ in range(args.rounds):
            for key, run in (("old", old), ("new", new)):
                start = time.process_time()
                run()
                times[key].append(time.process_time() - start)
        o, n = statistics.median(times["old"]), statistics.median(times["new"])
        print(f"{name:10} old {o:.4f} s  new {n:.4f} s  new/old {n / o:.3f}  "
              f"(old {min(times['old']):.4f}-{max(times['old']):.4f}, "
              f"new {min(times['new']):.4f}-{max(times['new']):.4f})")


if __name__ == "__main__":
    main()
