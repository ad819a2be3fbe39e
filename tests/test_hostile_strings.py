"""User-controlled strings (file names, model names, words, relation labels) reach the HTML
report only escaped, and names made from data never leave the output folder."""

from __future__ import annotations

import html
import os
import subprocess
import sys
from pathlib import Path

PAYLOADS = {
    "relation": "<script>alert(1)</script>",
    "word": "<img src=x onerror=alert(2)>",
    "file": '"><svg onload=alert(3)>',
    "model": "<b onmouseover=alert(4)>m</b>",
}

OPENINGS = {"relation": "<script>alert", "word": "<img src=x", "file": "<svg onload",
            "model": "<b onmouseover"}


def _treebank(relation: str, word: str) -> str:
    rows = []
    for n in range(3):
        rows.append(f"# sent_id = s{n}")
        rows += [f"1\tThe\tthe\tDET\t_\t_\t2\t{relation}\t_\t_",
                 f"2\t{word}\tx\tNOUN\t_\t_\t3\tnsubj\t_\t_",
                 "3\tslept\tsleep\tVERB\t_\t_\t0\troot\t_\t_",
                 "4\t.\t.\tPUNCT\t_\t_\t3\tpunct\t_\t_", ""]
    return "\n".join(rows) + "\n"


def _script_json_text(text: str) -> str:
    """``text`` as it appears inside a JSON string of the page's data element."""

    from attnlens.report.payload import script_json

    return script_json(text)[1:-1]  # without the JSON string's quotes


def test_hostile_strings_are_escaped_in_the_html_report(tmp_path):
    from attnlens.loaders.checkpoint import default_model_path

    treebank = tmp_path / f"{PAYLOADS['file']}.conllu"
    treebank.write_text(_treebank(PAYLOADS["relation"], PAYLOADS["word"]), encoding="utf-8")
    model = tmp_path / PAYLOADS["model"].replace("/", "|")
    os.symlink(default_model_path(), model)
    result = subprocess.run(
        [sys.executable, "-m", "attnlens.cli.app", "heads", str(model), "--treebank",
         str(treebank), "--min-examples", "1", "--format", "png,svg", "--out", "out", "--quiet"],
        cwd=tmp_path, capture_output=True, text=True, timeout=900,
    )
    assert result.returncode == 0, result.stderr
    page = (tmp_path / "out" / "index.html").read_text(encoding="utf-8")
    for name, payload in PAYLOADS.items():
        raw = payload.replace("/", "|") if name == "model" else payload
        assert raw not in page, f"the {name} reached the page unescaped"
        assert OPENINGS[name] not in page  # not even its opening tag
    # not vacuous: the file name, model name and relation are on the page, escaped as HTML
    # text or as JSON inside the page's data <script> element (report/payload.script_json)
    for name in ("file", "relation", "model"):
        raw = PAYLOADS[name].replace("/", "|") if name == "model" else PAYLOADS[name]
        forms = {html.escape(raw), html.escape(raw, quote=False), _script_json_text(raw)}
        assert any(form in page for form in forms), f"the {name} is not on the page"
    # every file written stayed inside --out
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["out", treebank.name, model.name])
    assert all(Path(p).resolve().is_relative_to((tmp_path / "out").resolve())
               for p in (tmp_path / "out").rglob("*"))


def test_tables_and_figures_named_from_data_cannot_leave_their_folder(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd
    import pytest

    from attnlens.errors import ConfigError
    from attnlens.runs.io import safe_filename, save_figure, write_table

    out = tmp_path / "out"
    out.mkdir()
    for name in ("../../escaped", "/tmp/escaped", "a/../../escaped"):
        with pytest.raises(ConfigError, match="outside"):
            write_table(pd.DataFrame({"a": [1]}), out, name)
        with pytest.raises(ConfigError, match="outside"):
            save_figure(plt.figure(), out, name)
        write_table(pd.DataFrame({"a": [1]}), out, safe_filename(name))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    assert sorted(p.name for p in out.iterdir()) == [
        "a_escaped.csv", "a_escaped.md", "escaped.csv", "escaped.md", "tmp_escaped.csv",
        "tmp_escaped.md"]


# Issue 23: tables that run code in a spreadsheet, or markup in Markdown ------------------------
FORMULA = "=cmd|' /C calc'!A0"


def test_csv_cells_from_data_cannot_run_as_formulas_and_round_trip(tmp_path):
    import csv

    import pandas as pd

    from attnlens.report.folder import Tables
    from attnlens.runs.io import neutralise_cell, restore_cell, write_table

    table = pd.DataFrame({
        "word": [FORMULA, "+cmd", "-2+3+cmd|' /C calc'!A0", "@SUM(1)", "\tx", "'=x",
                 "-LRB-", "-3", "+0", "cat"],
        "value": [-0.5, -1.0, 0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0],  # numeric: untouched
        "target": [-3, "special", -1, 0, 1, 2, 3, 4, 5, 6],  # offsets, and text
    })
    write_table(table, tmp_path, "t")
    with (tmp_path / "t.csv").open(newline="", encoding="utf-8") as handle:
        rows = list(csv.reader(handle))[1:]
    words = [r[0] for r in rows]
    assert words == ["'" + FORMULA, "'+cmd", "'-2+3+cmd|' /C calc'!A0", "'@SUM(1)", "'\tx",
                     "''=x", "'-LRB-", "-3", "+0", "cat"]  # a plain number stays a number
    assert neutralise_cell("\rx") == "'\rx" and restore_cell("'\rx") == "\rx"
    assert [r[1] for r in rows][:2] == ["-0.5", "-1.0"] and rows[0][2] == "-3"
    back = Tables(tmp_path)["t"]  # a report reads the data's own text back
    assert back["word"].tolist() == table["word"].tolist()


def test_markdown_cells_escape_markup():
    import pandas as pd

    from attnlens.runs.io import markdown_table

    text = markdown_table(pd.DataFrame({"<b>col</b>": ["<script>alert(1)</script>",
                                                       "<img src=x onerror=alert(2)>",
                                                       "a | b & c"]}))
    assert "<" not in text and ">" not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text and "&lt;b&gt;col&lt;/b&gt;" in text
    assert "a \\| b &amp; c" in text


def test_a_treebank_with_formulas_and_markup_gives_safe_tables(tmp_path):
    """The issue's case: words and relation labels from the data reached 370 CSV cells as
    formulas and the Markdown tables as raw markup."""
    import csv
    import re

    import pandas as pd

    treebank = tmp_path / "t.conllu"
    treebank.write_text(_treebank(FORMULA, "<img src=x onerror=alert(2)>"), encoding="utf-8")
    result = subprocess.run(
        [sys.executable, "-m", "attnlens.cli.app", "heads", "--treebank", str(treebank),
         "--min-examples", "1", "--bootstrap", "20", "--out", "out", "--quiet"],
        cwd=tmp_path, capture_output=True, text=True, timeout=900,
    )
    assert result.returncode == 0, result.stderr
    neutralised = 0
    for path in sorted((tmp_path / "out" / "tables").glob("*.csv")):
        numeric = {c for c, kind in pd.read_csv(path).dtypes.items() if kind.kind in "iufb"}
        with path.open(newline="", encoding="utf-8") as handle:
            header, *rows = list(csv.reader(handle))
        for row in rows:
            for column, cell in zip(header, row, strict=True):
                if column in numeric:
                    continue
                plain_number = re.fullmatch(r"[+-]?\d+(\.\d*)?([eE][+-]?\d+)?", cell)
                assert plain_number or not cell.startswith(("=", "+", "-", "@", "\t", "\r")), \
                    (path.name, cell)
                neutralised += cell == "'" + FORMULA
        markdown = path.with_suffix(".md").read_text(encoding="utf-8")
        assert "<img" not in markdown and "<script" not in markdown, path.name
    assert neutralised > 0  # not vacuous: the relation label is in the tables, neutralised
