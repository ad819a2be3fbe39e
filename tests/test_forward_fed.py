"""Forward passes that stop once the analyzers are fed (``run_analyzers(stop_when_fed=True)``,
as the language-model probes run) and the attention's in-place scaling and masking: the
states are bitwise those of the whole forward with the out-of-place formula (the same
operations on the same numbers), and the work after the last activation read is not done."""

from __future__ import annotations

import math

import pytest
import torch

from attnlens.hooks import ActivationCache
from attnlens.model.query_blocks import QueryBlocks
from attnlens.stream.base import Analyzer
from attnlens.stream.runner import run_analyzers
from tests.fixtures import tiny_batches, tiny_model
from tests.lm_heads_toys import toy_model
from tests.test_lm_heads_states import CASES


def states_equal(a: Analyzer, b: Analyzer) -> None:
    """Every field of the two states bitwise equal."""
    def same(x, y, where: str) -> None:
        if isinstance(x, dict):
            assert x.keys() == y.keys(), where
            for k in x:
                same(x[k], y[k], f"{where}.{k}")
        elif isinstance(x, (list, tuple)):
            assert len(x) == len(y), where
            for i, (u, w) in enumerate(zip(x, y, strict=True)):
                same(u, w, f"{where}[{i}]")
        elif isinstance(x, torch.Tensor):
            assert x.shape == y.shape and torch.equal(x, y), where
        else:
            assert x == y or (isinstance(x, float) and math.isnan(x) and math.isnan(y)), where

    same(a.state_dict()["state"], b.state_dict()["state"], "state")


def calls_of(module: torch.nn.Module) -> list[int]:
    """A list that grows by one each time ``module`` runs (a torch forward hook)."""
    calls: list[int] = []
    module.register_forward_hook(lambda *_: calls.append(1))
    return calls


@pytest.fixture(scope="module")
def model():
    return toy_model()


@pytest.mark.parametrize("case", list(CASES))
def test_lm_analyzers_fed_then_stopped_equal_the_whole_forward(model, case):
    """Each language-model analyzer: the same state bit for bit; the last layer's attention
    output (its values' mix and output projection) is never made when nothing reads past
    the last pattern."""
    stopped_equals_whole(model, case, None)


@pytest.mark.parametrize("case", ["probes", "streaming"])
def test_lm_analyzers_fed_blocks_then_stopped_equal_the_whole_forward(model, case):
    """The same with patterns in blocks of 3 query rows: the forward stops after the last
    block of the last layer, not before."""
    stopped_equals_whole(model, case, 3)


def stopped_equals_whole(model, case: str, rows: int | None) -> None:
    make, _, data = CASES[case]
    model.set_query_blocks(QueryBlocks(rows=rows))
    try:
        whole, stopped = make(model), make(model)
        run_analyzers(model, data(), [whole], show_progress=False)
        attn_out = calls_of(model.blocks[-1].hook_attn_out)
        run_analyzers(model, data(), [stopped], show_progress=False, stop_when_fed=True)
    finally:
        model.set_query_blocks(QueryBlocks())
        model.blocks[-1].hook_attn_out._forward_hooks.clear()
    states_equal(stopped, whole)
    names = whole.hook_names(model)
    if names and all(".attn.hook_" in n for n in names):
        assert attn_out == []


class _ReadsEarly(Analyzer):
    """A whole-batch analyzer reading layer 0's residual output only."""

    name = "reads_early"
    layerwise = False
    state_fields = ("sums",)

    def __init__(self) -> None:
        self.sums: list[torch.Tensor] = []

    def hook_names(self, model) -> list[str]:
        return ["blocks.0.hook_resid_post"]

    def settings(self) -> dict:
        return {}

    def update(self, batch, cache: ActivationCache) -> None:
        self.sums.append(cache["blocks.0.hook_resid_post"].double().sum((1, 2)))

    def result(self) -> dict:
        return {}


def test_a_forward_stops_after_the_last_activation_read_and_feeds_the_same():
    tiny = tiny_model()
    batches = tiny_batches([[5, 7, 3], [9, 2]], seed=1, vocab=50)
    whole, stopped = _ReadsEarly(), _ReadsEarly()
    run_analyzers(tiny, batches, [whole], show_progress=False)
    later = calls_of(tiny.blocks[1])
    run_analyzers(tiny, batches, [stopped], show_progress=False, stop_when_fed=True)
    assert later == []  # block 1 never ran
    states_equal(stopped, whole)
    run_analyzers(tiny, batches, [_ReadsEarly()], show_progress=False)
    assert len(later) == len(batches)  # without stop_when_fed: every block, every batch


@pytest.mark.parametrize("causal", [False, True])
def test_scores_scaled_and_masked_in_place_equal_the_out_of_place_formula(causal):
    """``hook_scores`` gets ``q k^T * scale + mask`` (padded batch: a ``[batch, 1, 1, key]``
    padding mask, with a causal ``[batch, 1, query, key]`` one when causal) bit for bit, and
    the pattern is its softmax. Heads of width 8: the scale 8 ** -0.5 is no power of two, so
    scaling another operand would round otherwise."""
    tiny = tiny_model(causal=causal, n_heads=2)
    batch = tiny_batches([[6, 3, 5]], seed=2, vocab=50)[0]
    got, q, k, p = {}, {}, {}, {}

    def keep(store):
        return lambda x, hook: store.__setitem__(hook.name, x.clone())

    hooks = [(f"blocks.{i}.attn.hook_{kind}", keep(store)) for i in range(2)
             for kind, store in (("scores", got), ("q", q), ("k", k), ("pattern", p))]
    with torch.no_grad(), tiny.hooks(fwd_hooks=hooks):
        tiny(**batch.model_inputs())
    from attnlens.model.attention import additive_attention_mask

    n = batch.input_ids.shape[1]
    mask = additive_attention_mask(batch.attention_mask, n, n, causal, torch.float32, "cpu")
    for i in range(2):
        attn = tiny.blocks[i].attn
        q_h = q[f"blocks.{i}.attn.hook_q"].transpose(1, 2)
        k_t = k[f"blocks.{i}.attn.hook_k"].transpose(1, 2).transpose(-1, -2)
        want = torch.matmul(q_h, k_t) * attn.scale + mask
        assert torch.equal(got[f"blocks.{i}.attn.hook_scores"], want)
        assert torch.equal(p[f"blocks.{i}.attn.hook_pattern"], torch.softmax(want, dim=-1))


def test_a_wider_mask_is_added_out_of_place():
    """float16 scores (no upcast) with a float32 mask: ``scores + mask`` promotes to float32,
    which ``add_`` cannot; the attention then adds out of place, as before."""
    from attnlens.hooks import QueryBlock
    from attnlens.model.attention import MultiHeadAttention, _adds_in_place

    attn = MultiHeadAttention(d_in=8, n_heads=2)
    q = torch.randn(1, 2, 3, 4, dtype=torch.float16)
    k_t = torch.randn(1, 2, 4, 3, dtype=torch.float16)
    v = torch.randn(1, 2, 3, 4, dtype=torch.float16)
    mask = torch.zeros(1, 1, 1, 3)
    assert not _adds_in_place(torch.zeros(1, 2, 3, 3, dtype=torch.float16), mask)
    assert _adds_in_place(torch.zeros(1, 2, 3, 3), mask)
    seen = {}
    attn.hook_scores.add_hook(lambda x, hook: seen.__setitem__("scores", x))
    attn._attend_block(q, k_t, v, mask, QueryBlock(0, 3, 3))
    assert seen["scores"].dtype == torch.float32
    assert torch.equal(seen["scores"], torch.matmul(q, k_t) * attn.scale + mask)


def test_minilm_probe_runs_stopped_equal_the_whole_forwards(minilm, monkeypatch):
    """``LmHeads.synthetic_runs`` on MiniLM (16 probes, their haystacks and long probe): the
    probe, retrieval and long-probe streaming states bit for bit those of whole forwards."""
    from attnlens.measures.lm_heads import run as lm_run
    from attnlens.measures.lm_heads.run import LmHeads
    from attnlens.measures.lm_heads.settings import LmHeadsSettings

    model, tokenizer = minilm

    def runs():
        lm = LmHeads(LmHeadsSettings(probe_sequences=16))
        lm.corpus_analyzers(model, tokenizer)
        probes, retrieval, long_errors, _, facts = lm.synthetic_runs(model)
        return [probes, retrieval, long_errors], facts

    stopped, facts = runs()
    real = lm_run.run_analyzers
    monkeypatch.setattr(lm_run, "run_analyzers", lambda *a, stop_when_fed=False, **k:
                        real(*a, **k))
    whole, whole_facts = runs()
    assert facts == whole_facts and facts["long_probes"] == 1
    for a, b in zip(stopped, whole, strict=True):
        states_equal(a, b)


class _StreamingAsBefore:
    """``StreamingError.update_block`` as it was before its restriction was kept per batch
    (a boolean mask made in every layer and multiplied in): the reference."""

    @staticmethod
    def update_block(self, batch, layer, block, cache) -> None:
        from attnlens.measures.linear.linear_attention import per_query_head
        from attnlens.measures.lm_heads.streaming import restriction
        from attnlens.measures.sparse.sparse import squared_row_error

        if self._skip:
            return
        p = block.p
        values = per_query_head(cache["v", layer].float(), p.shape[1]).contiguous()
        keep = restriction(self._real, self.sink_tokens, self.window, self.causal,
                           block.positions)[:, None]
        kept = p * keep
        full = p @ values
        weight = block.query_rows(self._real)[:, None, :, None].to(full.dtype)
        squared = squared_row_error(full, kept @ values, kept.sum(-1), weight).double()
        full_w = full * weight
        norms = (full_w * full_w).sum(dim=(-2, -1)).double()
        if block.start == 0:
            self._squared, self._norms = squared, norms
        else:
            self._squared, self._norms = self._squared + squared, self._norms + norms


@pytest.mark.parametrize("rows", [None, 3])
def test_streaming_restriction_kept_per_batch_equals_the_boolean_mask(model, rows):
    from attnlens.measures.lm_heads.streaming import StreamingError

    class Before(StreamingError):
        update_block = _StreamingAsBefore.update_block

    make_data = CASES["streaming"][2]
    model.set_query_blocks(QueryBlocks(rows=rows))
    try:
        now, before = (cls.for_model(model, sink_tokens=1, window=3)
                       for cls in (StreamingError, Before))
        run_analyzers(model, make_data(), [now], show_progress=False)
        run_analyzers(model, make_data(), [before], show_progress=False)
    finally:
        model.set_query_blocks(QueryBlocks())
    assert now.sentences > 0
    states_equal(now, before)
