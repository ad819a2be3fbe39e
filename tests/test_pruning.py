"""Pruning loop, resume, structural pruning == masking, export to transformers, the CLI."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch

from attnlens.errors import ConfigError, DataError
from attnlens.loaders import load_model
from attnlens.loaders.export import export_hf
from attnlens.measures.pruning import PruneSettings, final_mask, prune, prune_heads
from attnlens.measures.pruning.loop import select_heads
from attnlens.measures.pruning.structural import pruned_parameter_count
from attnlens.metrics.sts_task import StsMetric
from attnlens.model.gates import full_mask
from tests.fixtures import run_cli
from tests.helpers import tiny_inputs, tiny_model
from tests.parity_utils import TINY, save_tiny
from tests.pruning_toys import vocab_size, word_tokenizer, write_pairs


@pytest.fixture
def pairs_csv(tmp_path) -> Path:
    return write_pairs(tmp_path / "pairs.csv", 32)


def sts_metrics(path: Path) -> tuple[StsMetric, StsMetric]:
    full = StsMetric.from_csv(path, word_tokenizer(), batch_size=8, max_length=16)
    return full.subset(range(16)), full.subset(range(16, 32))


def toy_model():
    return tiny_model(seed=2, vocab_size=vocab_size(), n_token_types=0)


def random_mask(model, seed: int, keep: float = 0.5) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    mask = (torch.rand(model.n_layers, model.cfg.n_heads, generator=gen) < keep).float()
    mask[:, 0] = 1.0  # at least one head per layer
    return mask


# Selecting heads ----------------------------------------------------------------------
def test_targets_are_cumulative_fractions_of_all_heads():
    assert PruneSettings(step=0.1, max_fraction=0.9).targets(72) == [
        7, 14, 22, 29, 36, 43, 50, 58, 65
    ]
    assert PruneSettings(step=0.25, max_fraction=0.6).targets(8) == [2, 4, 5]


def test_steps_that_round_to_the_same_head_count_are_merged(pairs_csv):
    model = toy_model()  # 8 heads: 10% steps give 1, 2, 2, 3, 4, 5, 6, 6, 7 heads
    importance, evaluation = sts_metrics(pairs_csv)
    curve = prune(model, importance, evaluation, PruneSettings(orders=["random"], seeds=1,
                                                               step=0.1, max_fraction=0.9)).curve
    assert curve["n_pruned"].tolist() == [0, 1, 2, 3, 4, 5, 6]  # 7 would empty a layer
    assert curve["step"].tolist() == list(range(7))


def test_select_heads_takes_lowest_scores_and_keeps_the_minimum_per_layer():
    scores = torch.tensor([[0.1, 0.2, 0.3], [0.9, 0.8, 0.05]], dtype=torch.float64)
    mask = torch.ones(2, 3)
    assert select_heads(scores, mask, 2, 1) == [(0, 0), (1, 2)]
    assert select_heads(scores, mask, 6, 1) == [(0, 0), (0, 1), (1, 1), (1, 2)]
    assert select_heads(scores, mask, 6, 0) == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]
    mask[0, 0] = 0.0  # already pruned heads are never chosen again
    assert select_heads(scores, mask, 1, 1) == [(1, 2)]
    ties = torch.zeros(2, 3, dtype=torch.float64)
    assert select_heads(ties, torch.ones(2, 3), 2, 0) == [(0, 0), (0, 1)]


# The loop ----------------------------------------------------------------------
def test_pruning_no_head_leaves_the_metric_unchanged(pairs_csv):
    model = toy_model()
    importance, evaluation = sts_metrics(pairs_csv)
    unmasked = evaluation.evaluate(model)
    # exact (==) here and below: a gate of 1.0 multiplies exactly, same ops, same shapes
    assert evaluation.evaluate(model, full_mask(model)) == unmasked
    result = prune(model, importance, evaluation, PruneSettings(orders=["importance"],
                                                                step=0.25, max_fraction=0.5))
    start = result.curve[result.curve["step"] == 0].iloc[0]
    assert start["metric"] == unmasked and start["change"] == 0.0 and start["n_pruned"] == 0
    assert start["params"] == sum(p.numel() for p in model.parameters())
    # and the structurally "pruned" model without pruned heads is the same model
    same = prune_heads(model, full_mask(model))
    assert evaluation.evaluate(same) == unmasked


def test_pruning_curve_records_every_step(pairs_csv):
    model = toy_model()
    importance, evaluation = sts_metrics(pairs_csv)
    settings = PruneSettings(orders=["importance", "random", "confidence"], step=0.25,
                             max_fraction=0.75, seeds=2)
    curve = prune(model, importance, evaluation, settings).curve
    assert [tuple(k) for k in curve[["order", "seed"]].drop_duplicates().values] == [
        ("importance", 0), ("random", 0), ("random", 1), ("confidence", 0)
    ]
    for _, rows in curve.groupby(["order", "seed"]):
        assert rows["step"].tolist() == [0, 1, 2, 3]
        assert rows["n_pruned"].tolist() == [0, 2, 4, 6]
        assert rows["fraction_pruned"].tolist() == [0.0, 0.25, 0.5, 0.75]
        removed = " ".join(rows["heads_removed"]).split()
        assert len(removed) == len(set(removed)) == 6  # each head removed once
        mask = full_mask(model)
        for row in rows.itertuples():
            for label in row.heads_removed.split():
                assert re.fullmatch(r"L\d+H\d+", label), label  # one notation: L2H8
                layer, head = map(int, label[1:].split("H"))
                mask[layer, head] = 0.0
            # exact: the loop evaluates the same mask with the same ops (measured 0.0)
            assert row.metric == pytest.approx(evaluation.evaluate(model, mask), abs=1e-12)
            assert row.params == sum(p.numel() for p in prune_heads(model, mask).parameters())
        assert (mask.sum(dim=1) >= 1).all()  # the default minimum of one head per layer


def _without_time(curve: pd.DataFrame) -> pd.DataFrame:
    return curve.drop(columns=["seconds"]).reset_index(drop=True)


@pytest.mark.parametrize("rescore", [False, True])
def test_resume_after_an_interruption_gives_the_same_table(pairs_csv, tmp_path, rescore):
    model = toy_model()
    importance, evaluation = sts_metrics(pairs_csv)
    settings = PruneSettings(orders=["importance", "random", "entropy"], step=0.25,
                             max_fraction=0.75, seeds=2, rescore=rescore)
    whole = prune(model, importance, evaluation, settings, tmp_path / "whole")

    class Interrupt(Exception):
        pass

    written = []

    def stop_after_six(row):
        written.append(row)
        if len(written) == 6:  # inside the second curve
            raise Interrupt

    out = tmp_path / "cut"
    with pytest.raises(Interrupt):
        prune(model, importance, evaluation, settings, out, on_step=stop_after_six)
    assert len(pd.read_csv(out / "prune_curve.csv")) == 6  # written step by step
    resumed = prune(model, importance, evaluation, settings, out, resume=True)
    # assert_frame_equal's float defaults (rtol 1e-5) below: exact, the same computations, and
    # CSV round trips of float64 repr are exact
    pd.testing.assert_frame_equal(_without_time(resumed.curve), _without_time(whole.curve))
    on_disk = pd.read_csv(out / "prune_curve.csv", keep_default_na=False)
    pd.testing.assert_frame_equal(_without_time(on_disk), _without_time(whole.curve),
                                  check_dtype=False)
    # resuming a finished run recomputes nothing and changes nothing
    again = prune(model, importance, evaluation, settings, out, resume=True,
                  on_step=lambda row: pytest.fail("a finished run was recomputed"))
    pd.testing.assert_frame_equal(again.curve, resumed.curve, check_dtype=False)


def test_a_run_written_in_the_old_notation_resumes_in_l2h8(pairs_csv, tmp_path):
    """Older versions wrote ``heads_removed`` as ``2.8`` (and the CLI read ``2-8``): resuming
    such a run reads them and ends with the table of an uninterrupted run, all in ``L2H8``."""
    model = toy_model()
    importance, evaluation = sts_metrics(pairs_csv)
    settings = PruneSettings(orders=["importance", "random"], step=0.25, max_fraction=0.75,
                             seeds=1)
    whole = prune(model, importance, evaluation, settings, tmp_path / "whole")
    assert all(re.fullmatch(r"(L\d+H\d+( |$))*", t) for t in whole.curve["heads_removed"])
    out = tmp_path / "old"
    prune(model, importance, evaluation, settings, out)
    path = out / "prune_curve.csv"
    curve = pd.read_csv(path, keep_default_na=False)
    old = [re.sub(r"L(\d+)H(\d+)", r"\1.\2" if i % 2 else r"\1-\2", t)
           for i, t in enumerate(curve["heads_removed"])]
    assert any("." in t for t in old) and any("-" in t for t in old)
    curve["heads_removed"] = old
    curve.iloc[:4].to_csv(path, index=False)  # interrupted after four rows, old notation
    resumed = prune(model, importance, evaluation, settings, out, resume=True)
    pd.testing.assert_frame_equal(_without_time(resumed.curve), _without_time(whole.curve))
    on_disk = pd.read_csv(path, keep_default_na=False)
    assert on_disk["heads_removed"].tolist() == whole.curve["heads_removed"].tolist()
    curve.loc[1, "heads_removed"] = "two.eight"  # a damaged cell: refused with its remedy
    curve.iloc[:4].to_csv(path, index=False)
    with pytest.raises(DataError, match=r"damaged.*--force"):
        prune(model, importance, evaluation, settings, out, resume=True)


def test_resume_refuses_different_settings(pairs_csv, tmp_path):
    model = toy_model()
    importance, evaluation = sts_metrics(pairs_csv)
    settings = PruneSettings(orders=["random"], step=0.5, seeds=1)
    prune(model, importance, evaluation, settings, tmp_path)
    settings.step = 0.25
    with pytest.raises(ConfigError, match="different settings"):
        prune(model, importance, evaluation, settings, tmp_path, resume=True)


def test_settings_are_validated():
    for bad in (PruneSettings(orders=["nope"]), PruneSettings(step=0.0),
                PruneSettings(max_fraction=1.5), PruneSettings(seeds=0)):
        with pytest.raises(ConfigError):
            bad.validate()


# Structural pruning ----------------------------------------------------------------------
@pytest.mark.parametrize("sdpa", [True, False])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_structural_pruning_equals_masking(seed, sdpa):
    model = tiny_model(seed=seed)
    model.set_use_sdpa(sdpa)
    mask = random_mask(model, seed)
    inputs = tiny_inputs()
    pruned = prune_heads(model, mask)
    assert pruned.heads_per_layer == [int(n) for n in mask.sum(dim=1)]
    with torch.no_grad():
        masked_out = model(**inputs, head_mask=mask)
        pruned_out = pruned(**inputs)
    # fewer heads shorten W_O's fp32 sums, so their order changes: |h| <= ~4 after LayerNorm,
    # sums of <= 16 terms over 2 layers: 1.19e-7 x 4 x sqrt(16) x 2 ~ 4e-6 -> 1e-5 (measured
    # <= 7.2e-7). The same bound for the other pruned-vs-masked comparisons below.
    torch.testing.assert_close(pruned_out, masked_out, rtol=0, atol=1e-5)
    assert sum(p.numel() for p in pruned.parameters()) == pruned_parameter_count(model, mask)
    assert sum(p.numel() for p in pruned.parameters()) < sum(p.numel() for p in model.parameters())
    # kept heads keep their weights, in order
    keep = mask[0].nonzero().flatten()
    torch.testing.assert_close(pruned.blocks[0].attn.W_Q, model.blocks[0].attn.W_Q[keep])  # copy
    # pruning a pruned model again composes (head mask of the pruned model's size)
    second = torch.ones(model.n_layers, max(pruned.heads_per_layer))
    second[1, 0] = 0.0
    twice = prune_heads(pruned, second)
    assert twice.heads_per_layer[1] == pruned.heads_per_layer[1] - 1
    with torch.no_grad():
        torch.testing.assert_close(twice(**inputs), pruned(**inputs, head_mask=second),
                                   rtol=0, atol=1e-5)


def test_grouped_query_attention_loses_only_whole_groups():
    model = tiny_model(seed=0, n_heads=4, n_kv_heads=2, positional="rotary", causal=True)
    inputs = tiny_inputs()
    whole = torch.tensor([[1.0, 1.0, 0.0, 0.0], [0.0, 0.0, 1.0, 1.0]])
    pruned = prune_heads(model, whole)
    assert [b.attn.n_kv_heads for b in pruned.blocks] == [1, 1]
    with torch.no_grad():
        torch.testing.assert_close(pruned(**inputs), model(**inputs, head_mask=whole),
                                   rtol=0, atol=1e-5)
    assert sum(p.numel() for p in pruned.parameters()) == pruned_parameter_count(model, whole)
    with pytest.raises(ConfigError, match="whole groups"):
        prune_heads(model, torch.tensor([[1.0, 0.0, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0]]))


def test_structural_pruning_refuses_empty_layers_and_soft_gates():
    model = tiny_model()
    with pytest.raises(ConfigError, match="every head of layer 1"):
        prune_heads(model, torch.tensor([[1.0, 0, 0, 0], [0, 0, 0, 0]]))
    with pytest.raises(ConfigError, match=r"gate 0\.5"):
        prune_heads(model, torch.tensor([[1.0, 0.5, 1, 1], [1, 1, 1, 1]]))


# Export --------------------------------------------------------------------------------
def test_exported_pruned_bert_reloads_in_transformers_with_the_same_outputs(tmp_path):
    from transformers import BertConfig, BertModel

    save_tiny(BertModel, BertConfig(vocab_size=vocab_size(), **TINY), tmp_path / "src")
    model = load_model(tmp_path / "src")
    mask = torch.tensor([[1.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 1.0]])
    pruned = prune_heads(model, mask)
    assert pruned.heads_per_layer == [2, 1]
    export_hf(pruned, tmp_path / "out")
    hf = BertModel.from_pretrained(str(tmp_path / "out"), attn_implementation="eager").eval()
    inputs = tiny_inputs(vocab=vocab_size())
    with torch.no_grad():
        ours = pruned(**inputs, return_type="hidden")
        theirs = hf(**inputs).last_hidden_state
        masked = model(**inputs, head_mask=mask, return_type="hidden")
    real = inputs["attention_mask"].bool()
    # transformers' BERT vs ours (other kernels and orders), |h| <= ~4: as TINY_TOL in
    # tests/parity_utils.py (measured <= 1.7e-6); masked vs pruned and the reload as above
    torch.testing.assert_close(theirs[real], ours[real], rtol=0, atol=1e-5)
    torch.testing.assert_close(masked[real], ours[real], rtol=0, atol=1e-5)
    back = load_model(tmp_path / "out")
    with torch.no_grad():
        again = back(**inputs, return_type="hidden")
    torch.testing.assert_close(again[real], ours[real], rtol=0, atol=1e-5)


# The command line ----------------------------------------------------------------------
@pytest.fixture
def tiny_checkpoint(tmp_path) -> Path:
    from transformers import BertConfig, BertModel

    path = tmp_path / "tiny"
    save_tiny(BertModel, BertConfig(vocab_size=vocab_size(), **TINY), path)
    word_tokenizer().hf.save_pretrained(str(path))
    return path


def test_cli_prunes_exports_and_resumes(tiny_checkpoint, pairs_csv, tmp_path, monkeypatch):
    out = tmp_path / "run"
    args = ["prune", str(tiny_checkpoint), "--metric", "sts", "--pairs", str(pairs_csv),
            "--order", "importance,random", "--seeds", "2", "--step", "0.25",
            "--max-fraction", "0.75", "--batch-size", "8", "--out", str(out),
            "--export", str(tmp_path / "exported"), "--quiet"]
    result = run_cli(*args, cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stderr
    curve = pd.read_csv(out / "prune_curve.csv", keep_default_na=False)
    assert len(curve) == 3 * 4 and set(curve["order"]) == {"importance", "random"}
    assert (out / "prune_curve.svg").read_text().startswith("<?xml")
    assert (out / "prune_curve.md").read_text().startswith("| order | seed | step |")
    assert json.loads((out / "run.json").read_text())["complete"] is True
    assert "16 examples for importance, 16 for evaluation" in result.stderr
    exported = load_model(tmp_path / "exported")
    assert exported.cfg.n_heads == 4  # padded back to a uniform head count for HF
    model = load_model(tiny_checkpoint)
    mask = final_mask(model, curve, "importance")
    inputs = tiny_inputs(vocab=vocab_size())
    with torch.no_grad():
        # padded zero heads vs gated heads: reordered fp32 sums, as above (measured 0.0)
        torch.testing.assert_close(exported(**inputs), model(**inputs, head_mask=mask),
                                   rtol=0, atol=1e-5)
    # --resume on the finished run keeps the table (in-process: faster than a subprocess)
    from attnlens.cli.app import main

    monkeypatch.setattr(sys, "argv", ["attnlens", *args[:-3], "--resume", "--quiet"])
    with pytest.raises(SystemExit) as exit_info:
        main()
    assert exit_info.value.code == 0
    again = pd.read_csv(out / "prune_curve.csv", keep_default_na=False)
    pd.testing.assert_frame_equal(again, curve)  # exact: the same file, nothing recomputed


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--order", "importance,magnitude"], "unknown order 'magnitude'"),
        # sentence pairs scored as MLM: refused from the options, before the model loads
        (["--metric", "mlm"], "--pairs holds sentence pairs, scored by --metric sts, not 'mlm'"),
        (["--step", "0"], "--step must be a fraction"),
        (["--eval-fraction", "1.5"], "evaluation fraction must be between 0 and 1"),
    ],
)
def test_cli_errors_are_one_line(tiny_checkpoint, pairs_csv, tmp_path, extra, message,
                                 monkeypatch, capsys):
    from attnlens.cli.app import main

    argv = ["attnlens", "prune", str(tiny_checkpoint), "--pairs", str(pairs_csv), "--out",
            str(tmp_path / "o"), *extra]
    monkeypatch.setattr(sys, "argv", argv)
    monkeypatch.delenv("ATTNLENS_DEBUG", raising=False)
    with pytest.raises(SystemExit) as exit_info:
        main()
    assert exit_info.value.code == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("Error: ")
    assert message in err


def test_mlm_on_a_model_without_its_head_is_one_line(tiny_checkpoint, tmp_path, monkeypatch,
                                                     capsys):
    """Text --data scored as MLM by a model without an MLM head: one line, after the model."""
    from attnlens.cli.app import main

    text = tmp_path / "lines.txt"
    text.write_text("a man plays a guitar\nthe cat sleeps on the sofa\n" * 4, encoding="utf-8")
    monkeypatch.setattr(sys, "argv", ["attnlens", "prune", str(tiny_checkpoint), "--data",
                                      str(text), "--metric", "mlm", "--out", str(tmp_path / "o")])
    monkeypatch.delenv("ATTNLENS_DEBUG", raising=False)
    with pytest.raises(SystemExit) as exit_info:
        main()
    assert exit_info.value.code == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--metric mlm needs a model with a mlm head" in err, err


def test_a_kill_between_the_two_tables_loses_no_scores(pairs_csv, tmp_path):
    """The scores file is written before the curve: cut after the scores of a step, the
    resumed run reuses them and both tables equal an uninterrupted run's."""
    import attnlens.measures.pruning.loop as loop

    model = toy_model()
    importance, evaluation = sts_metrics(pairs_csv)
    settings = PruneSettings(orders=["importance"], step=0.25, max_fraction=0.75, rescore=True)
    whole = prune(model, importance, evaluation, settings, tmp_path / "whole")
    written = []
    real_write_table = loop.write_table

    class Killed(Exception):
        pass

    def write_table(table, out_dir, name, formats):
        written.append(name)
        if len(written) == 6:  # the second table written after step 2
            raise Killed
        return real_write_table(table, out_dir, name, formats=formats)

    loop.write_table = write_table
    try:
        with pytest.raises(Killed):
            prune(model, importance, evaluation, settings, tmp_path / "cut")
    finally:
        loop.write_table = real_write_table
    resumed = prune(model, importance, evaluation, settings, tmp_path / "cut", resume=True)
    pd.testing.assert_frame_equal(_without_time(resumed.curve), _without_time(whole.curve))
    pd.testing.assert_frame_equal(resumed.scores, whole.scores)
