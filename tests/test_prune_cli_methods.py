"""`attnlens prune --method l0 --lambda ...` and `--order roles --roles DIR` from the command line.

A tiny random BERT (2 layers x 4 heads) and a small STS pairs file, run in-process (faster than a
subprocess): exit 0 and the tables each writes; a bad value gives one `Error:` line and exit 1.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd
import pytest

from attnlens.model.gates import parse_heads
from tests.parity_utils import TINY, save_tiny
from tests.pruning_toys import vocab_size, word_tokenizer, write_pairs


@pytest.fixture
def checkpoint(tmp_path) -> Path:
    from transformers import BertConfig, BertModel

    path = tmp_path / "tiny"
    save_tiny(BertModel, BertConfig(vocab_size=vocab_size(), **TINY), path)
    word_tokenizer().hf.save_pretrained(str(path))
    return path


@pytest.fixture
def pairs(tmp_path) -> Path:
    return write_pairs(tmp_path / "pairs.csv", 32)


def run_prune(monkeypatch, checkpoint: Path, pairs: Path, out: Path, *extra: str) -> int:
    """`attnlens prune` in this process; returns the exit code."""
    from attnlens.cli.app import main

    argv = ["attnlens", "prune", str(checkpoint), "--metric", "sts", "--pairs", str(pairs),
            "--batch-size", "8", "--out", str(out), "--quiet", *extra]
    monkeypatch.setattr(sys, "argv", argv)
    monkeypatch.delenv("ATTNLENS_DEBUG", raising=False)
    with pytest.raises(SystemExit) as exit_info:
        main()
    return exit_info.value.code


def test_l0_method_writes_its_tables_beside_the_curve(checkpoint, pairs, tmp_path, monkeypatch,
                                                      capsys):
    out = tmp_path / "run"
    code = run_prune(monkeypatch, checkpoint, pairs, out, "--method", "l0", "--lambda", "0,100",
                     "--l0-steps", "15", "--l0-lr", "0.5", "--l0-init", "1.0",
                     "--order", "importance", "--step", "0.25", "--max-fraction", "0.5")
    assert code == 0, capsys.readouterr().err
    summary = pd.read_csv(out / "l0_summary.csv", keep_default_na=False)
    assert summary["lambda"].tolist() == [0.0, 100.0]
    assert {"n_kept", "kept_per_layer", "metric", "change"} <= set(summary.columns)
    # lambda 100 closes every gate but the minimum of one head per layer
    assert int(summary["n_kept"].iloc[1]) == 2
    heads = pd.read_csv(out / "l0_heads.csv")
    assert len(heads) == 2 * 8 and set(heads["lambda"]) == {0.0, 100.0}
    assert heads.groupby("lambda")["kept"].sum().tolist() == summary["n_kept"].tolist()
    training = pd.read_csv(out / "l0_curve.csv")
    assert len(training) == 2 * 15 and training.columns[0] == "lambda"
    comparison = pd.read_csv(out / "l0_comparison.csv")
    assert "importance_at_same_heads" in comparison.columns and len(comparison) == 2
    assert (out / "l0_summary.md").is_file() and (out / "l0_heads.md").is_file()
    for chart in ("prune_l0", "l0_training", "prune_curve"):
        assert (out / f"{chart}.svg").read_text().startswith("<?xml")
    assert json.loads((out / "l0_settings.json").read_text())["l0"]["steps"] == 15
    curve = pd.read_csv(out / "prune_curve.csv", keep_default_na=False)
    assert set(curve["order"]) == {"importance"}
    assert "L0 lambda 100: 2 heads kept" in capsys.readouterr().err


def test_roles_order_prunes_the_heads_without_a_role_first(checkpoint, pairs, tmp_path,
                                                           monkeypatch, capsys):
    roles = tmp_path / "heads"
    roles.mkdir()
    pd.DataFrame({"layer": [0, 0, 1, 1], "head": [0, 1, 2, 3],
                  "roles": ["syntactic", "none", "positional", "none"],
                  "tested": [True, True, True, True]}).to_csv(roles / "head_roles.csv",
                                                              index=False)
    out = tmp_path / "run"
    code = run_prune(monkeypatch, checkpoint, pairs, out, "--order", "roles", "--roles",
                     str(roles), "--seeds", "2", "--step", "0.25", "--max-fraction", "0.75")
    assert code == 0, capsys.readouterr().err
    curve = pd.read_csv(out / "prune_curve.csv", keep_default_na=False)
    assert set(curve["order"]) == {"roles"} and set(curve["seed"]) == {0, 1}
    role_heads = {(0, 0), (1, 2)}
    for _, rows in curve.groupby("seed"):
        removed = [h for t in rows.sort_values("step")["heads_removed"] for h in parse_heads(t)]
        # 75 % of 8 heads: exactly the 6 heads without a tested role, the role heads protected
        assert len(removed) == 6 and not role_heads & set(removed)
    assert (out / "prune_curve.svg").read_text().startswith("<?xml")


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--method", "l0", "--lambda=-1"],
         "--lambda -1 is out of range; give a number of at least 0"),
        (["--method", "l0", "--lambda", "0.1,big"], "--lambda takes numbers"),
        (["--order", "roles"], "--order roles needs --roles"),
    ],
)
def test_bad_l0_and_roles_values_are_one_line_errors(checkpoint, pairs, tmp_path, monkeypatch,
                                                     capsys, extra, message):
    code = run_prune(monkeypatch, checkpoint, pairs, tmp_path / "o", *extra)
    assert code == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("Error: "), err
    assert message in err
    assert not (tmp_path / "o").exists()
