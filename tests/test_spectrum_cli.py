"""`attnlens spectrum` and `attnlens asymmetry` end to end on the embedded MiniLM."""

from __future__ import annotations

import pandas as pd
import pytest
from attnlens.cli.app import app
from typer.testing import CliRunner

from attnlens.errors import ConfigError
from attnlens.measures.asymmetry.section import AsymmetrySection
from attnlens.measures.spectrum.section import SpectrumSection
from attnlens.report.analyze import default_sections

runner = CliRunner()


@pytest.fixture
def text_file(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text(
        "The cat sat on the mat.\nA quick brown fox jumps over the lazy dog.\nIt rained.\n",
        encoding="utf-8",
    )
    return path


def test_spectrum_command_writes_tables_and_figures(tmp_path, text_file):
    out = tmp_path / "report"
    result = runner.invoke(
        app, ["spectrum", "--text", str(text_file), "--out", str(out), "-q", "--format", "png,svg"]
    )
    assert result.exit_code == 0, result.output
    assert "cumulative share at k = n/4" in result.output
    for name in ("spectrum_summary", "spectrum_curve", "spectrum_curve_by_length",
                 "low_rank_cost", "circuit_summary", "shared_subspace_dims"):
        assert (out / "tables" / f"{name}.csv").is_file(), name
        assert (out / "tables" / f"{name}.md").is_file(), name
    for name in ("spectrum_at_quarter", "spectrum_curves", "shared_subspace"):
        assert (out / "figures" / f"{name}.png").stat().st_size > 0
        assert (out / "figures" / f"{name}.svg").is_file()
    summary = pd.read_csv(out / "tables" / "spectrum_summary.csv")
    # the null model's columns follow the value (--null random-init is the default)
    assert list(summary.columns) == ["layer", "head", "measure", "value", "null_mean",
                                     "null_low", "null_high"]
    assert len(summary[summary["measure"] == "cum_at_quarter"]) == 6 * 12
    assert (out / "index.html").is_file()


def test_asymmetry_weights_only_reads_no_corpus(tmp_path):
    out = tmp_path / "weights"
    result = runner.invoke(app, ["asymmetry", "--weights-only", "--out", str(out), "-q"])
    assert result.exit_code == 0, result.output
    table = pd.read_csv(out / "tables" / "weight_asymmetry.csv")
    assert set(table["measure"]) >= {"sym_share", "antisym_share", "sym_share_affine"}
    assert not (out / "tables" / "pattern_asymmetry.csv").exists()
    assert (out / "figures" / "asymmetry_weights.svg").is_file()


def test_asymmetry_with_corpus_reports_the_baseline(tmp_path, text_file):
    out = tmp_path / "patterns"
    result = runner.invoke(app, ["asymmetry", "--text", str(text_file), "--out", str(out), "-q"])
    assert result.exit_code == 0, result.output
    assert "baseline" in result.output
    baseline = pd.read_csv(out / "tables" / "asymmetry_baseline.csv")
    assert set(baseline["layer"]) == set(range(6))
    assert (out / "figures" / "asymmetry_patterns.svg").is_file()


def test_weights_only_with_text_is_a_one_line_error(tmp_path, text_file):
    result = runner.invoke(
        app, ["asymmetry", "--weights-only", "--text", str(text_file), "--out",
              str(tmp_path / "out")]
    )
    assert result.exit_code != 0
    assert isinstance(result.exception, ConfigError)
    assert "--weights-only" in str(result.exception)


def test_analyze_runs_both_sections():
    kinds = {type(section) for section in default_sections()}
    assert {SpectrumSection, AsymmetrySection} <= kinds
