"""fixed43: main's CPU after the passes, piece by piece, this checkout's path against the one
it replaced, alternated round by round in one process at one torch thread (outputs compared
first). Prints the median CPU seconds of each and the ratio new / old:

    python benchmarks/fixed43_ab.py [--rounds 11] [--report reports/minilm]

- ``head_examples``: ``HeadExamples.examples`` on MiniLM's shape (7 measures x 6 layers x
  12 heads x top 3 = 1,512 examples, windows of 10 tokens): every window's percentages from
  one conversion (``window_percents``) against one ``window_text`` per example (the path it
  keeps for non-finite windows).
- ``shared_subspace_svg``: ``plots.svg.curves.shared_subspace_curves`` on MiniLM's
  ``shared_subspace_curve`` table (6 layers x 3 matrices x 2 scopes x 384 dimensions), each
  line's rows from one group-by against main's two masks per line (main's module from git).
- ``sparse_result``: ``SparseCoverage.result`` on MiniLM's shape (random sums), the window
  curve's 9,288 rows as columns against main's one record per head and window.
- ``head_grids``: the page's head map (``report.heads_grid.head_grids``) on ``--report``'s
  tables, one-row splits left out before their grids are built, against main's module.
- ``tables_read``: every table of ``--report`` read back as the page reads it
  (``read_csv``, then ``runs.io.restore_formulas``), against main's ``restore_formulas``.
- ``encode_tables``: every table of ``--report`` encoded for the page
  (``report.payload.encode_table``), text columns without the all-booleans check, against
  main's module.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import tempfile
import time
from functools import partial
from pathlib import Path
from unittest import mock

import numpy as np
import torch


def head_examples():
    """A ``HeadExamples`` state of MiniLM's shape with random windows, and its decode."""
    from attnlens.measures.heads import examples as module
    from attnlens.measures.heads.head_stats import MEASURES

    torch.manual_seed(0)
    state = module.HeadExamples(6, 12, {101}, {102}, set(), MEASURES)
    shape = state.top_value.shape  # [measure, layer, head, rank]
    state.top_value = torch.rand(shape)
    state.top_sentence = torch.randint(0, 40, shape)
    state.top_query = torch.randint(0, 30, shape)
    state.top_key = torch.randint(0, 30, shape)
    state.top_start = torch.randint(0, 20, shape)
    window = torch.rand(*shape, state.window, state.window)
    state.top_window = (window / window.sum(-1, keepdim=True)).half()
    for index in range(40):
        state.sentence_ids[str(index)] = list(range(1000 + index, 1030 + index))

    def decode(ids):
        return [f"t{i}" for i in ids]

    def new():
        return state.examples(decode)

    def old():
        with mock.patch.object(module, "window_percents", lambda windows: None):
            return state.examples(decode)

    return new, old


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


def shared_subspace_svg():
    """MiniLM's shared-subspace curve table (random energies) and the SVG of each path."""
    import pandas as pd

    from attnlens.plots.svg import curves

    old_curves = main_module("attnlens/plots/svg/curves.py")
    rng = np.random.default_rng(0)
    rows = [(layer, matrix, scope, k + 1, e)
            for layer in range(6) for matrix in ("W_Q", "W_K", "W_QK")
            for scope in ("concat", "per_head_mean")
            for k, e in enumerate(np.sort(rng.random(384)).tolist())]
    table = pd.DataFrame(rows, columns=["layer", "matrix", "scope", "k", "energy"])

    def new():
        return curves.shared_subspace_curves(table, 384, "Shared").render()

    def old():
        return old_curves.shared_subspace_curves(table, 384, "Shared").render()

    return new, old


def sparse_result():
    """``SparseCoverage.result`` of this checkout and of main's module, one random state."""
    import pandas as pd

    from attnlens.measures.sparse.sparse import SparseCoverage

    old_module = main_module("attnlens/measures/sparse/sparse.py")
    new_state, old_state = SparseCoverage(6, 12), old_module.SparseCoverage(6, 12)
    generator = torch.Generator().manual_seed(0)
    for field in ("by_distance", "nonglobal_by_distance", "masses", "errors"):
        values = torch.rand(getattr(new_state, field).shape, generator=generator,
                            dtype=torch.float64)
        setattr(new_state, field, values)
        setattr(old_state, field, values.clone())
    for state in (new_state, old_state):
        state.rows, state.sentences = 900, 43

    def table(state):
        return pd.concat(state.result(), names=["table"])

    return (lambda: table(new_state)), (lambda: table(old_state))


def head_grids(report: str):
    """The head map's grids from ``report``'s tables, this checkout's and main's."""
    from attnlens.report import heads_grid
    from attnlens.report.folder import Report

    old_module = main_module("attnlens/report/heads_grid.py")
    folder = Report(report)
    sections = folder.sections()
    layers, heads = heads_grid.head_shape(folder.run, folder.tables)
    tables = {name: folder.tables[name] for name in folder.tables}

    def new():
        return heads_grid.head_grids(tables, sections, layers, heads)

    def old():
        return old_module.head_grids(tables, sections, layers, heads)

    return new, old


def tables_read(report: str):
    """Every table of ``report`` read back (CSV, then formulas restored), both ways."""
    import pandas as pd

    from attnlens.report.folder import Report
    from attnlens.runs import io

    old_module = main_module("attnlens/runs/io.py")
    paths = sorted((Report(report).tables_dir).glob("*.csv"))

    def read(restore):
        return [restore(pd.read_csv(path)) for path in paths]

    return (lambda: read(io.restore_formulas)), (lambda: read(old_module.restore_formulas))


def encode_tables(report: str):
    """Every table of ``report`` encoded for the page, this checkout's way and main's."""
    from attnlens.report import payload
    from attnlens.report.folder import Report

    old_module = main_module("attnlens/report/payload.py")
    folder = Report(report)
    tables = [folder.tables[name] for name in folder.tables]
    return ((lambda: [payload.encode_table(t) for t in tables]),
            (lambda: [old_module.encode_table(t) for t in tables]))


def same(a, b) -> bool:
    """Equal outputs: DataFrames by ``equals`` (values and dtypes) and their column names,
    lists item by item, anything else by ``==``."""
    if isinstance(a, list) and a and hasattr(a[0], "equals"):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if hasattr(a, "equals"):
        return a.equals(b) and list(a.columns) == list(b.columns)
    return a == b


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--report", default="reports/minilm",
                        help="a report folder (head_grids, tables_read, encode_tables)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    for name, make in (("head_examples", head_examples),
                       ("shared_subspace_svg", shared_subspace_svg),
                       ("sparse_result", sparse_result),
                       ("head_grids", partial(head_grids, args.report)),
                       ("tables_read", partial(tables_read, args.report)),
                       ("encode_tables", partial(encode_tables, args.report))):
        new, old = make()
        assert same(new(), old()), name
        times: dict[str, list[float]] = {"old": [], "new": []}
        for _ in range(args.rounds):
            for key, run in (("old", old), ("new", new)):
                start = time.process_time()
                run()
                times[key].append(time.process_time() - start)
        o, n = statistics.median(times["old"]), statistics.median(times["new"])
        print(f"{name:24} old {o:.4f} s  new {n:.4f} s  new/old {n / o:.3f}")


if __name__ == "__main__":
    main()
