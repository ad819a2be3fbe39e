"""`attnlens compare` on hand-built report folders whose differences are known."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest
from attnlens.cli.app import app
from typer.testing import CliRunner

from attnlens.errors import ConfigError
from attnlens.report.compare import compare, long_values
from tests.report_fixtures import known_tables, write_report

runner = CliRunner()


@pytest.fixture
def pair(tmp_path: Path) -> tuple[Path, Path]:
    a = write_report(tmp_path / "a", known_tables(), model_name="model-a")
    b = write_report(tmp_path / "b", known_tables(quarter_shift=0.2, syntactic_head=(1, 1)),
                     model_name="model-b")
    return a, b


def test_long_values_identify_rows_by_the_fewest_columns() -> None:
    tables = known_tables()
    rows = long_values(tables["syntactic_accuracy"])
    # relation is constant but direction is needed: label = "nsubj dep->head" etc.
    assert set(rows["label"]) == {"nsubj dep->head", "nsubj head->dep"}
    assert set(rows["measure"]) == {"accuracy", "baseline"}  # examples: a count, not compared
    per_head = long_values(tables["positional_heads"])
    assert set(per_head["label"]) == {""} and set(per_head["measure"]) == {"best_offset", "share"}


def test_largest_difference_and_role_changes(pair) -> None:
    comparison = compare(*pair)
    largest = comparison.tables["largest_differences"]
    # The syntactic head moved from 1-0 to 1-1 (accuracy 0.58 <-> 0.2, 2.7 spreads), then
    # the C(n/4) shift of head 0-1 (0.2, 2.0 spreads): ranked by difference / spread.
    top = [tuple(r) for r in largest[["table", "measure", "layer", "head"]].head(3).to_numpy()]
    assert set(top[:2]) == {("syntactic_accuracy", "accuracy", 1, 0),
                            ("syntactic_accuracy", "accuracy", 1, 1)}
    assert top[2] == ("spectrum_summary", "cum_at_quarter", 0, 1)
    assert largest.iloc[2]["difference"] == pytest.approx(0.2)  # the shift written into B
    changes = comparison.tables["role_changes"]
    assert set(zip(changes["layer"], changes["head"], changes["roles_a"], changes["roles_b"],
                   strict=True)) == {(1, 0, "syntactic", "none"), (1, 1, "none", "syntactic")}
    grid = {(g["table"], g["label"]): g for g in comparison.grids}[
        ("spectrum_summary", "cum_at_quarter")]
    assert grid["diverging"] and grid["values"][0] == [0.0, 0.2, 0.0]
    cells = comparison.role_cells["cells"]
    assert cells[1][0]["category"] == "lost" and cells[1][1]["category"] == "gained"
    assert cells[0][2]["category"] == "same"


def test_identical_reports_have_no_differences(tmp_path: Path) -> None:
    a = write_report(tmp_path / "a")
    comparison = compare(a, a)
    assert comparison.tables["role_changes"].empty
    assert comparison.tables["largest_differences"].empty
    assert (comparison.tables["differences"]["difference"].fillna(0) == 0).all()


def test_compare_command_writes_tables_and_page(pair, tmp_path: Path) -> None:
    out = tmp_path / "cmp"
    result = runner.invoke(app, ["compare", str(pair[0]), str(pair[1]), "--out", str(out)])
    assert result.exit_code == 0, result.output
    for name in ("largest_differences", "role_changes", "measure_differences", "differences"):
        assert (out / "tables" / f"{name}.csv").is_file()
    html = (out / "index.html").read_text(encoding="utf-8")
    data = json.loads(re.search(r'id="attnlens-data">(.*?)</script>', html, re.S).group(1))
    assert data["kind"] == "compare" and data["grids"]
    rows = pd.read_csv(out / "tables" / "differences.csv")
    assert {"table", "label", "measure", "layer", "head", "a", "b", "difference"} <= set(rows)
    assert json.loads((out / "run.json").read_text())["layers_and_heads_numbered_from"] == 0


def test_compare_refuses_to_write_into_a_compared_report(pair) -> None:
    result = runner.invoke(app, ["compare", str(pair[0]), str(pair[1]), "--out", str(pair[0])])
    assert result.exit_code != 0 and isinstance(result.exception, ConfigError)


def test_different_corpora_are_warned(tmp_path: Path) -> None:
    a = write_report(tmp_path / "a", corpus="one")
    b = write_report(tmp_path / "b", corpus="two")
    assert any("different corpora" in w for w in compare(a, b).warnings)


def test_compare_reads_every_table_of_a_real_report(tmp_path: Path) -> None:
    """The committed sample report (every table `attnlens analyze` writes, e.g. the
    `spectrum_curve` and `role_tests` shapes hand-built fixtures lack) against a copy with one
    changed value: that value is the largest difference, everything else equals."""
    import shutil

    sample = Path(__file__).resolve().parents[1] / "reports" / "minilm"
    changed = tmp_path / "changed"
    shutil.copytree(sample, changed)
    path = changed / "tables" / "spectrum_curve.csv"
    table = pd.read_csv(path)
    row = (table["layer"] == 3) & (table["head"] == 5) & (table["fraction"] == 0.25)
    assert row.sum() == 1
    table.loc[row, "value"] -= 0.3
    table.to_csv(path, index=False)
    comparison = compare(sample, changed)
    diffs = comparison.tables["differences"]
    assert set(diffs["table"]) >= {"spectrum_curve", "role_tests", "head_stats", "sparse_coverage"}
    moved = diffs[diffs["difference"].abs() > 1e-12]
    assert len(moved) == 1
    top = moved.iloc[0]
    assert (top["table"], top["measure"], top["layer"], top["head"]) == (
        "spectrum_curve", "value", 3, 5)
    assert top["difference"] == pytest.approx(-0.3, abs=1e-12)  # float64 CSV round trip
    assert comparison.tables["role_changes"].empty
