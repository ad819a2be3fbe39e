"""`attnlens.analyze(...)` and `attnlens.compare(...)` from Python: the report objects the
README's Python section shows."""

from __future__ import annotations

from pathlib import Path

import pytest

import attnlens
from attnlens.errors import AttnlensError
from attnlens.report.folder import Report

SENTENCES = ["The cat sat on the mat.", "A keeper climbed the old stairs at dusk.",
             "Rare words such as quixotic seldom appear."]


@pytest.fixture(scope="module")
def python_report(tmp_path_factory) -> Report:
    out = tmp_path_factory.mktemp("api") / "report"
    return attnlens.analyze(sentences=SENTENCES, out=out)


def test_analyze_returns_the_report_it_wrote(python_report: Report) -> None:
    assert isinstance(python_report, Report)
    assert (python_report.path / "index.html").is_file()
    stats = python_report.tables["head_stats"]
    assert set(stats["layer"]) == set(range(6)) and set(stats["head"]) == set(range(12))
    assert "3 given sentences" in (python_report.path / "run.json").read_text()
    # max_length left out: MiniLM's trained length, recorded with its source (was 128, null)
    options = python_report.run["options"]
    assert options["max_length"] == 256
    assert options["max_length_source"] == "sentence_bert_config.json max_seq_length"
    html = python_report._repr_html_()
    assert "<iframe" in html and len(html) > 1000


def test_a_report_writes_a_copy_that_renders(python_report: Report, tmp_path: Path) -> None:
    copy = python_report.write(tmp_path / "copy")
    assert (copy.path / "index.html").is_file()
    assert set(copy.tables) == set(python_report.tables)
    with pytest.raises(AttnlensError, match="not empty"):
        python_report.write(tmp_path / "copy")


def test_compare_from_python(python_report: Report, tmp_path: Path) -> None:
    comparison = attnlens.compare(python_report, python_report.path, out=tmp_path / "cmp")
    assert (tmp_path / "cmp" / "index.html").is_file()
    differences = comparison.tables["differences"]["difference"]
    assert len(differences) > 1000 and differences.abs().max() == 0  # every compared value equal
    assert comparison.tables["largest_differences"].empty  # no head differs


def test_bad_calls_are_attnlens_errors(tmp_path: Path) -> None:
    with pytest.raises(AttnlensError, match="give one corpus"):
        attnlens.analyze(sentences=SENTENCES, text="x.txt", out=tmp_path / "a")
    with pytest.raises(AttnlensError, match="holds no text"):
        attnlens.analyze(sentences=["  "], out=tmp_path / "b")
    model = attnlens.load_model()  # no tokenizer (attnlens.load attaches one: model.tokenizer)
    with pytest.raises(AttnlensError, match="tokenizer"):
        attnlens.analyze(model, sentences=SENTENCES, out=tmp_path / "c")
