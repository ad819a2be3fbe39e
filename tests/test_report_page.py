"""The report page, `attnlens report` and the findings, on hand-built report folders
(no model: the page is built from run.json and the tables alone)."""

from __future__ import annotations

import base64
import hashlib
import html as html_module
import json
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from attnlens.cli.app import app, main
from typer.testing import CliRunner

from attnlens.errors import DataError
from attnlens.measures.pruning.section import head_importance
from attnlens.report.catalog import CardItem, Paper, SectionDoc, TableDoc
from attnlens.report.folder import Report
from attnlens.report.payload import encode_column, encode_table, script_json
from tests.report_fixtures import XSS_IMG, XSS_SCRIPT, known_tables, write_report

runner = CliRunner()


def page_data(html: str) -> dict:
    match = re.search(r'<script type="application/json" id="attnlens-data">(.*?)</script>',
                      html, re.S)
    assert match, "no data element"
    return json.loads(match.group(1))


def decode(table: dict) -> pd.DataFrame:
    columns = {}
    for name, column in zip(table["columns"], table["data"], strict=True):
        values = ([column["dict"][k] for k in column["codes"]] if "dict" in column
                  else column["values"])
        columns[name] = values
    return pd.DataFrame(columns)


@pytest.fixture
def report(tmp_path: Path) -> Report:
    return Report(write_report(tmp_path / "report"))


def test_encode_column_kinds_and_round_trip() -> None:
    assert encode_column(pd.Series([1, 2, 3])) == {"kind": "int", "values": [1, 2, 3]}
    assert encode_column(pd.Series([1.0, 2.0])) == {"kind": "int", "values": [1, 2]}
    floats = encode_column(pd.Series([0.123456789, float("nan"), float("inf")]))
    assert floats == {"kind": "num", "values": [0.123457, None, None]}
    assert encode_column(pd.Series([True, False]))["kind"] == "bool"
    mixed = encode_column(pd.Series([True, None, False], dtype=object))
    assert mixed == {"kind": "bool", "values": [True, None, False]}
    repeated = encode_column(pd.Series(["a", "b"] * 10))
    assert repeated["dict"] == ["a", "b"] and repeated["codes"][:3] == [0, 1, 0]
    assert encode_column(pd.Series(["x", None]))["values"] == ["x", None]


def test_script_json_cannot_close_its_element() -> None:
    text = script_json({"a": f"{XSS_SCRIPT} {XSS_IMG} & \u2028"})
    assert "<" not in text and ">" not in text and "&" not in text and "\u2028" not in text
    assert json.loads(text)["a"] == f"{XSS_SCRIPT} {XSS_IMG} & \u2028"


def test_page_embeds_every_row_of_every_table(report: Report) -> None:
    html = Path(report.render()).read_text(encoding="utf-8")
    data = page_data(html)
    assert set(data["tables"]) == set(report.tables)
    for name, table in data["tables"].items():
        csv = report.tables[name]
        shown = decode(table)
        assert list(shown.columns) == list(csv.columns), name
        assert len(shown) == len(csv), name
        for column in csv.columns:
            if pd.api.types.is_float_dtype(csv[column]):
                # 6 significant digits are embedded: relative error <= 5e-6 of the value.
                np.testing.assert_allclose(shown[column].astype(float), csv[column],
                                           rtol=5e-6, atol=0)
            else:
                assert list(shown[column]) == list(csv[column]), (name, column)
        assert table["csv"] == f"tables/{name}.csv"
        assert f'href="tables/{name}.csv"' in html


def test_page_is_self_contained_and_has_no_markdown(report: Report) -> None:
    html = Path(report.render()).read_text(encoding="utf-8")
    assert "<pre" not in html and "<link" not in html
    assert not re.search(r'\bsrc="(?!data:)', html), "every src is inline data"
    scripts = re.findall(r"<script([^>]*)>(.*?)</script>", html, re.S)
    assert [attrs.strip() for attrs, _ in scripts] == [
        'type="application/json" id="attnlens-data"', ""]
    # The CSP lets exactly this script run (by its sha256) and nothing load from elsewhere.
    digest = base64.b64encode(hashlib.sha256(scripts[1][1].encode()).digest()).decode()
    csp = html_module.unescape(
        re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', html).group(1))
    assert f"script-src 'sha256-{digest}'" in csp and "default-src 'none'" in csp
    for section in ("summary", "heads", "sec-heads", "sec-spectrum", "sec-asymmetry", "run"):
        assert f'id="{section}"' in html
    assert 'class="about"' in html and "arxiv.org/abs/1906.04341" in html


def test_findings_are_sentences_from_the_tables(report: Report) -> None:
    texts = [f.text() for f in report.findings()]
    assert "2 of 6 heads have a role: 1 positional, 1 syntactic, 0 rare-word." in texts
    assert ("L0H2 is a previous-token head: 99.8 % of tokens attend most to the "
            "previous token.") in texts
    assert ("nsubj (dep->head): best head L1H0, 58.0 % against a 33.0 % positional baseline "
            "(120 arcs).") in texts
    assert ("No head is a rare-word head; the closest is L1H2: 40.0 % of words attend most to "
            "the sentence's rarest word (chance under the model's mask 9.8 %).") in texts
    assert ("The most focused head is L0H2 (mean maximum weight 0.9996); the broadest is L1H1 "
            "(entropy 2.5 nats).") in texts
    assert ("Attention parks on [SEP] in layer 1: its heads put 60.0 % of their attention "
            "there on average.") in texts
    assert ("Attention becomes lower-rank with depth: C(n/4) rises from 0.71 in layer 0 to 0.91 "
            "in layer 1 (mean over heads).") in texts
    assert ("Learned attention is 10.3 times as asymmetric as symmetric-logit self-attention "
            "on the same inputs: ||P - P^T|| / ||P|| is 1.03 against 0.1.") in texts
    html = Path(report.render()).read_text(encoding="utf-8")
    assert 'data-layer="0" data-head="2"' in html and "previous-token head" in html


def test_findings_skip_tables_the_run_did_not_write(tmp_path: Path) -> None:
    tables = known_tables()
    del tables["syntactic_best"], tables["pattern_asymmetry"]
    found = Report(write_report(tmp_path / "r", tables)).findings()
    assert not any("relation-direction" in f.text() for f in found)
    assert any("antisymmetric" in f.text() for f in found)


def test_head_map_grids_and_cards(report: Report) -> None:
    data = page_data(Path(report.render()).read_text(encoding="utf-8"))
    assert (data["layers"], data["heads"]) == (2, 3)
    labels = {(g["table"], g["label"]): g["values"] for g in data["grids"]}
    assert labels[("spectrum_summary", "cum_at_quarter")][1][2] == pytest.approx(0.92)
    assert labels[("head_stats", "to_sep")][1] == [0.6, 0.6, 0.6]
    assert ("positional_heads", "share") in labels
    cells = data["roles"]["cells"]
    assert cells[0][2]["category"] == "positional" and cells[0][2]["label"] == "P-1"
    assert cells[1][0]["label"] == "S1" and cells[1][1]["category"] == "none"
    card_tables = {i["table"] for c in data["cards"] for i in c["items"]}
    assert {"head_roles", "head_stats", "spectrum_summary", "weight_asymmetry"} <= card_tables


def test_user_strings_are_escaped(tmp_path: Path) -> None:
    tables = known_tables(relation=XSS_SCRIPT + XSS_IMG)
    folder = write_report(tmp_path / "r", tables, model_name=XSS_IMG, corpus=XSS_SCRIPT)
    html = Path(Report(folder).render()).read_text(encoding="utf-8")
    assert "<img src=x" not in html and "<script>alert" not in html
    assert html.count("<script") == 2
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html  # shown as text in findings
    data = page_data(html)
    relations = decode(data["tables"]["syntactic_best"])["relation"]
    assert set(relations) == {XSS_SCRIPT + XSS_IMG}


def test_report_command_rebuilds_without_the_model(report: Report, monkeypatch) -> None:
    def refuse(*args, **kwargs):
        raise AssertionError("attnlens report must not load a model")

    monkeypatch.setattr("attnlens.loaders.load", refuse)
    monkeypatch.setattr("attnlens.loaders.load_model", refuse)
    result = runner.invoke(app, ["report", str(report.path)])
    assert result.exit_code == 0, result.output
    assert "previous-token head" in report.index.read_text(encoding="utf-8")


@pytest.mark.parametrize(("make", "message"), [
    (lambda p: p / "missing", "does not exist"),
    (lambda p: p, "is not an attnlens report folder"),
])
def test_report_command_errors_are_one_line(make, message, tmp_path, monkeypatch,
                                            capsys) -> None:
    monkeypatch.setattr("sys.argv", ["attnlens", "report", str(make(tmp_path))])
    with pytest.raises(SystemExit) as exit_info:
        main()
    assert exit_info.value.code == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("Error: ") and message in err


def test_legacy_flat_folder_is_read(tmp_path: Path) -> None:
    folder = tmp_path / "flat"
    folder.mkdir()
    known_tables()["head_stats"].to_csv(folder / "head_stats.csv", index=False)
    (folder / "run.json").write_text(json.dumps({"model": "old", "sentences": 3}))
    report = Report(folder)
    assert [s.name for s in report.sections()] == ["tables"]
    html = Path(report.render()).read_text(encoding="utf-8")
    assert "head_stats" in page_data(html)["tables"]


def test_prune_run_adds_head_importance(report: Report, tmp_path: Path) -> None:
    scores = pd.DataFrame([
        {"order": order, "seed": seed, "scored_after_step": step, "layer": layer, "head": head,
         "score": (10 * layer + head) if order == "importance" else 0.5}
        for order in ("random", "importance") for seed in (0, 1) for step in (0, 1)
        for layer in range(2) for head in range(3)])
    importance = head_importance(scores)
    assert list(importance["order"].unique()) == ["importance"]
    assert importance.set_index(["layer", "head"])["rank"].to_dict() == {
        (1, 2): 1, (1, 1): 2, (1, 0): 3, (0, 2): 4, (0, 1): 5, (0, 0): 6}
    prune_dir = tmp_path / "prune"
    prune_dir.mkdir()
    scores.to_csv(prune_dir / "prune_scores.csv", index=False)
    result = runner.invoke(app, ["report", str(report.path), "--prune", str(prune_dir)])
    assert result.exit_code == 0, result.output
    reopened = Report(report.path)
    assert [s.name for s in reopened.sections()][-1] == "prune"
    assert "head_importance" in reopened.tables
    texts = [f.text() for f in reopened.findings()]
    assert "The most important head for the pruning metric is L1H2; the least important is L0H0."\
        in texts


def test_an_older_prune_run_attaches_with_heads_in_l2h8(tmp_path: Path) -> None:
    """A pruning run of an older version wrote ``heads_removed`` as ``2.8`` (or ``2-8``): the
    report's copy writes ``L2H8``; a cell that names no head is refused with the table's path."""
    from attnlens.errors import DataError
    from attnlens.measures.pruning.section import attach_prune_run

    prune_dir = tmp_path / "prune"
    prune_dir.mkdir()
    pd.DataFrame([{"order": "importance", "seed": 0, "scored_after_step": 0, "layer": 0,
                   "head": 1, "score": 0.5}]).to_csv(prune_dir / "prune_scores.csv",
                                                     index=False)
    curve = pd.DataFrame({
        "order": "importance", "seed": 0, "step": [0, 1, 2], "n_pruned": [0, 2, 3],
        "fraction_pruned": [0.0, 0.5, 0.75], "heads_removed": ["", "2.8 1.11", "0-3"],
        "metric": 1.0, "change": 0.0, "params": 10, "seconds": 0.1})
    curve.to_csv(prune_dir / "prune_curve.csv", index=False)
    attach_prune_run(prune_dir, tmp_path / "tables", tmp_path / "figures")
    written = pd.read_csv(tmp_path / "tables" / "prune_curve.csv", keep_default_na=False)
    assert written["heads_removed"].tolist() == ["", "L2H8 L1H11", "L0H3"]
    assert written.drop(columns="heads_removed").equals(
        curve.drop(columns="heads_removed"))  # only that column changes
    curve.loc[1, "heads_removed"] = "two.eight"
    curve.to_csv(prune_dir / "prune_curve.csv", index=False)
    with pytest.raises(DataError, match=r"prune_curve.csv cannot be read.*two.eight"):
        attach_prune_run(prune_dir, tmp_path / "tables2", tmp_path / "figures2")


def test_section_doc_round_trips_through_json() -> None:
    doc = SectionDoc(about="a", papers=(Paper("p", "https://x.org"),), command="attnlens x",
                     tables=(TableDoc("t", "c", pivot=("measure", "value"), keys=("k",)),),
                     card=(CardItem("t", "T", kind="top", where=(("d", ("x", "y")),)),))
    again = SectionDoc.from_json(json.loads(json.dumps(doc.to_json())))
    assert again == doc
    assert SectionDoc.from_json({"about": "b", "new_field": 1}).about == "b"


def test_role_colours_match_the_role_map() -> None:
    from attnlens.plots import ROLE_COLORS
    from attnlens.report.heads_grid import ROLE_COLORS as PAGE_COLORS

    assert PAGE_COLORS == ROLE_COLORS


def test_encode_table_counts_rows() -> None:
    table = encode_table(pd.DataFrame({"a": [1, 2], "b": ["x", "y"]}))
    assert table["rows"] == 2 and table["columns"] == ["a", "b"]
    assert not math.isnan(0.0)


def test_unreadable_run_record_is_a_data_error(tmp_path: Path) -> None:
    (tmp_path / "run.json").write_text("{not json")
    with pytest.raises(DataError, match="cannot be read"):
        Report(tmp_path).run  # noqa: B018
