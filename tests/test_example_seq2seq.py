"""The encoder-decoder pruning example in reduced form, and `attnlens prune` on its model."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pandas as pd
import pytest

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "seq2seq_head_pruning.py"


@pytest.fixture(scope="module")
def example():
    spec = importlib.util.spec_from_file_location("seq2seq_head_pruning", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def reduced(example, tmp_path_factory):
    save = tmp_path_factory.mktemp("digits")
    tables = example.run(steps=80, n_eval=48, seeds=2, step=0.25, max_fraction=0.5, save=save,
                         verbose=False)
    return tables, save


def test_reduced_example_trains_and_prunes_each_type(reduced):
    tables, _ = reduced
    losses = tables["losses"]
    assert losses[-1] < losses[0] / 2  # it learns
    curve = tables["curve"]
    assert set(curve["order"]) == {"importance", "importance:encoder", "importance:decoder",
                                   "importance:cross", "random"}
    by_type = tables["by_attention"]
    for attention in ("encoder", "decoder", "cross"):
        scoped = by_type[by_type["order"] == f"importance:{attention}"]
        others = scoped[scoped["attention"] != attention]
        assert (others["removed"] == 0).all()  # a scoped order touches its type only
        own = scoped[scoped["attention"] == attention]
        assert own["removed"].max() == 4  # half of its 8 heads
        assert own["fraction_removed"].max() == 0.5
    first = tables["first"]
    assert set(first["attention"]) == {"encoder", "decoder", "cross"}
    assert first.groupby("order")["heads"].sum().eq(24).all()


def test_cli_prunes_the_saved_model_by_attention_type(reduced, tmp_path):
    from attnlens.cli.app import app
    from typer.testing import CliRunner

    _, save = reduced
    out = tmp_path / "prune"
    args = ["prune", str(save), "--data", str(save / "pairs.tsv"), "--step", "0.25",
            "--max-fraction", "0.25", "--seeds", "1", "--out", str(out), "--quiet"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    curve = pd.read_csv(out / "prune_curve.csv", keep_default_na=False)
    assert set(curve["order"]) == {"importance", "importance:encoder", "importance:decoder",
                                   "importance:cross", "random"}
    rows = pd.read_csv(out / "prune_rows.csv")
    assert list(rows["attention"]) == ["encoder"] * 2 + ["decoder"] * 2 + ["cross"] * 2
    by_type = pd.read_csv(out / "prune_by_attention.csv")
    assert set(by_type["attention"]) == {"encoder", "decoder", "cross"}
    assert (out / "prune_attention_first.csv").is_file()
    bad = CliRunner().invoke(app, [*args[:-3], "--order", "confidence", "--out",
                                   str(tmp_path / "bad")])
    assert bad.exit_code != 0 and "encoder-decoder" in str(bad.exception or bad.output)
