"""Query blocks in the hf backend (issue 27): the registered attention function computes
scores and softmax for blocks of query rows against every key, fires the pattern hooks once
per block with its query offset, and assembles the output from the same blocks.

Tolerances: patterns and hidden states against transformers' own eager attention keep the
hf backend's parity bound (1e-6 in float32, tests/test_hf_backend.py): a block is the same
rows of the same products and softmax, computed from a matmul of fewer rows (float32
rounding of a dot product of d_head terms). Analyzer tables against the one-block path:
1e-6 (rtol and atol), the bound of tests/test_query_blocks.py (float32 sums added in
another order).
"""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from attnlens.backends.hf.model import HFAttentionModel
from attnlens.hooks import QueryBlock, accepts_query_blocks
from attnlens.measures.heads.head_stats import HeadStats
from attnlens.measures.heads.positional import PositionalHeads
from attnlens.measures.sparse.sparse import SparseCoverage
from attnlens.model.query_blocks import QueryBlocks, WholeMatrixError
from attnlens.stream.runner import run_analyzers
from tests.hf_utils import max_diff, tiny_hf
from tests.test_hf_backend import eager
from tests.test_query_blocks import _model_batches, assert_tables_equal

TOL = 1e-6  # the hf backend's parity bound in float32 (tests/test_hf_backend.py)
LENGTH = 23  # longer than the sliding windows (4) of mistral, gemma2, gpt_oss
# llama: grouped keys; qwen3: q/k norms; mistral: sliding window; gemma2: soft-capping and
# alternating sliding-window layers; gpt_oss: sink logits and sliding windows; gpt_neox:
# partial rotary, fused projections; qwen2, phi3 (fused qkv), olmo2, starcoder2 (sliding
# window): the other families whose long inputs get masks built by rows.
FAMILIES = ["llama", "qwen3", "mistral", "gemma2", "gpt_oss", "gpt_neox", "qwen2", "phi3",
            "olmo2", "starcoder2"]


def wrap(model_type: str, **kwargs) -> HFAttentionModel:
    hf = tiny_hf(model_type, **kwargs)
    return HFAttentionModel(hf, {"architecture": type(hf).__name__})


def inputs(length: int = LENGTH, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 64, (2, length), generator=gen)
    mask = torch.ones_like(ids)
    mask[1, length - 4:] = 0
    return ids, mask


def blocked(model: HFAttentionModel, ids, mask, rows: int):
    """Every layer's pattern blocks (query block, rows) and the final hidden states."""
    found: dict[int, list[tuple[QueryBlock, torch.Tensor]]] = {}

    def keep(layer):
        @accepts_query_blocks
        def hook(x, hook):
            found.setdefault(layer, []).append((hook.query_block, x.clone()))
        return hook

    model.set_query_blocks(QueryBlocks(rows=rows))
    hooks = [(f"blocks.{layer}.attn.hook_pattern", keep(layer))
             for layer in range(model.n_layers)]
    try:
        with torch.no_grad(), model.hooks(hooks):
            hidden = model(ids, mask, return_type="hidden")
    finally:
        model.set_query_blocks(QueryBlocks())
    return found, hidden


@pytest.fixture
def row_masks(monkeypatch):
    """Every input counts as long for the mask: transformers' eager mask comes as a
    ``RowMask`` built by rows (for the families of ``ROW_MASK_MODEL_TYPES``); returns the
    number of row builds seen."""
    from attnlens.backends.hf import row_mask

    monkeypatch.setattr(row_mask, "ROW_MASK_BYTES", 0)
    built = {"rows": 0}
    original = row_mask.RowMask.rows

    def rows(self, start, stop):
        built["rows"] += 1
        return original(self, start, stop)

    monkeypatch.setattr(row_mask.RowMask, "rows", rows)
    return built


@pytest.mark.parametrize("mask_by_rows", [False, True], ids=["whole_mask", "row_mask"])
@pytest.mark.parametrize("model_type", FAMILIES)
def test_hf_blocks_are_rows_of_eager_patterns_and_give_eager_hidden_states(
        model_type, mask_by_rows, request):
    built = request.getfixturevalue("row_masks") if mask_by_rows else None
    model = wrap(model_type)
    ids, mask = inputs()
    found, hidden = blocked(model, ids, mask, rows=5)
    if built is not None:  # 5 blocks per layer, each building its rows of the mask
        assert built["rows"] >= 5 * model.n_layers
        built["rows"] = 0
    reference = eager(model, input_ids=ids, attention_mask=mask)
    for layer, expected in enumerate(reference.attentions):
        blocks = found[layer]
        assert [b.start for b, _ in blocks] == [0, 5, 10, 15, 20]
        assert blocks[-1][0] == QueryBlock(20, 23, 23) and blocks[-1][1].shape[-2] == 3
        pattern = torch.cat([x for _, x in blocks], -2)
        assert max_diff(pattern, expected) <= TOL, (model_type, layer)
    assert max_diff(hidden, reference.last_hidden_state) <= TOL


def test_row_mask_rows_are_the_rows_of_transformers_eager_mask(row_masks):
    """Padding, causal and a sliding window of 4: each block of rows, built on its own, is
    bit for bit those rows of ``eager_mask``'s whole mask (the same mask function on the same
    positions)."""
    from transformers import LlamaConfig
    from transformers.masking_utils import eager_mask, sliding_window_causal_mask_function

    from attnlens.backends.hf.row_mask import RowMask, attnlens_mask, mask_rows

    padding = torch.ones(2, 23, dtype=torch.bool)  # as create_causal_mask passes it
    padding[1, 17:] = False
    args = {"batch_size": 2, "q_length": 23, "kv_length": 23, "attention_mask": padding,
            "mask_function": sliding_window_causal_mask_function(4)}
    whole = eager_mask(**args)  # [batch, 1, query_pos, key_pos]
    rows = attnlens_mask(**args, config=LlamaConfig())
    assert isinstance(rows, RowMask) and rows.shape == (2, 1, 23, 23)
    for start in range(0, 23, 5):
        stop = min(start + 5, 23)
        assert torch.equal(mask_rows(rows, start, stop, 23), whole[:, :, start:stop])
    assert torch.equal(rows.dense(), whole)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_the_mask_without_sync_is_transformers_eager_mask_bit_for_bit(dtype):
    """``eager_mask_without_sync`` against transformers' own ``eager_mask``: causal with
    padding, a sliding window with an offset, bidirectional with padding, and the bidirectional
    mask without padding skipped (None) where allowed, in three dtypes."""
    from transformers.masking_utils import (
        bidirectional_mask_function,
        causal_mask_function,
        eager_mask,
        sliding_window_causal_mask_function,
    )

    from attnlens.backends.hf.row_mask import eager_mask_without_sync

    padding = torch.ones(2, 23, dtype=torch.bool)
    padding[1, 17:] = False
    cases = [
        {"q_length": 23, "mask_function": causal_mask_function, "attention_mask": padding},
        {"q_length": 6, "q_offset": 9, "attention_mask": padding,
         "mask_function": sliding_window_causal_mask_function(4)},
        {"q_length": 23, "mask_function": bidirectional_mask_function,
         "attention_mask": padding},
        {"q_length": 23, "mask_function": bidirectional_mask_function,
         "allow_is_bidirectional_skip": True},
    ]
    for case in cases:
        args = {"batch_size": 2, "kv_length": 23, "dtype": dtype, **case}
        expected, found = eager_mask(**args), eager_mask_without_sync(**args)
        if expected is None:
            assert found is None
            continue
        assert found.dtype == expected.dtype and torch.equal(found, expected), case


def test_row_masks_only_for_long_inputs_of_the_listed_families():
    from transformers import BertConfig, LlamaConfig

    from attnlens.backends.hf.row_mask import ROW_MASK_BYTES, ROW_MASK_MODEL_TYPES, row_mask_applies

    assert set(FAMILIES) >= ROW_MASK_MODEL_TYPES  # every listed family checked against eager

    long = int((ROW_MASK_BYTES // 4) ** 0.5) + 1  # a float32 mask just above the bound
    assert row_mask_applies(LlamaConfig(), 1, long, long, torch.float32)
    assert not row_mask_applies(LlamaConfig(), 1, long - 1, long - 1, torch.float32)
    assert not row_mask_applies(BertConfig(), 1, long, long, torch.float32)


def test_gemma2_blocks_keep_the_soft_cap_and_the_sliding_window():
    """Gemma 2's layer 0 has a window of 4 keys and every layer soft-caps its scores: the
    blocks' scores are capped (|s| <= 5 where not masked) and the window's keys beyond it
    get exactly 0 attention, as in the whole matrix."""
    model = wrap("gemma2")
    ids, mask = inputs()
    scores: list[torch.Tensor] = []

    @accepts_query_blocks
    def keep(x, hook):
        scores.append(x.clone())

    found, _ = blocked(model, ids, mask, rows=5)
    model.set_query_blocks(QueryBlocks(rows=5))
    with torch.no_grad(), model.hooks([("blocks.1.attn.hook_scores", keep)]):
        model(ids, mask, return_type="hidden")
    model.set_query_blocks(QueryBlocks())
    assert len(scores) == 5
    unmasked = torch.cat(scores, -2)
    unmasked = unmasked[unmasked > torch.finfo(torch.float32).min / 2]
    assert bool((unmasked.abs() <= 5.0).all())  # softcap = 5.0 (tests/hf_utils.py)
    layer0 = torch.cat([x for _, x in found[0]], -2)[0]  # [head, query_pos, key_pos]
    query = torch.arange(LENGTH)[:, None]
    too_far = query - torch.arange(LENGTH)[None] >= 4
    assert bool((layer0[:, too_far] == 0).all())
    assert bool((torch.cat([x for _, x in found[1]], -2)[0][:, too_far] > 0).all())


def test_hf_blocks_equal_the_one_block_path_in_float64():
    model = wrap("llama", dtype=torch.float64)
    ids, mask = inputs()
    found, hidden = blocked(model, ids, mask, rows=4)
    whole, whole_hidden = blocked(model, ids, mask, rows=10_000)
    for layer in range(model.n_layers):
        assert len(whole[layer]) == 1 and whole[layer][0][0].is_whole
        pattern = torch.cat([x for _, x in found[layer]], -2)
        assert pattern.dtype == torch.float64
        # float64 rounding of products of other shapes (the float64 parity bound)
        assert max_diff(pattern, whole[layer][0][1]) <= 1e-12
    assert max_diff(hidden, whole_hidden) <= 1e-12


def test_short_inputs_are_one_block_by_default():
    model = wrap("llama")
    ids, mask = inputs()
    seen: list[QueryBlock | None] = []

    @accepts_query_blocks
    def keep(x, hook):
        seen.append(hook.query_block)

    with torch.no_grad(), model.hooks([("blocks.0.attn.hook_pattern", keep)]):
        model(ids, mask, return_type="hidden")
    assert seen == [QueryBlock(0, LENGTH, LENGTH)]


def test_hf_blocks_offer_the_patterns_rows_recomputed():
    """While a layer's blocks fire, ``hook.pattern_rows`` gives any rows of its pattern (the
    spectrum's top-k reads it); outside, it is None."""
    model = wrap("gemma2")
    ids, mask = inputs()
    got = []

    @accepts_query_blocks
    def keep(x, hook):
        rows = hook.pattern_rows(hook.query_block.start, hook.query_block.stop)
        got.append((x.clone(), rows))

    model.set_query_blocks(QueryBlocks(rows=6))
    with torch.no_grad(), model.hooks([("blocks.1.attn.hook_pattern", keep)]):
        model(ids, mask, return_type="hidden")
    model.set_query_blocks(QueryBlocks())
    assert len(got) == 4
    for fired, recomputed in got:
        assert torch.equal(fired, recomputed)  # the same operations on the same values
    assert model.blocks[1].attn.hook_pattern.pattern_rows is None


def test_a_hf_hook_needing_the_whole_matrix_gets_it_below_the_limit_and_is_refused_above():
    model = wrap("llama")
    ids, mask = inputs(length=30)
    model.set_query_blocks(QueryBlocks(rows=4, whole_matrix_limit=30))
    with torch.no_grad():
        _, cache = model.run_with_cache(ids, mask, return_type="hidden",
                                        names_filter="blocks.0.attn.hook_pattern")
    assert cache["pattern", 0].shape == (2, 4, 30, 30)
    model.set_query_blocks(QueryBlocks(rows=4, whole_matrix_limit=29))
    with pytest.raises(WholeMatrixError, match=r"blocks\.0\.attn\.hook_pattern.*29"), \
            torch.no_grad():
        model.run_with_cache(ids, mask, return_type="hidden",
                             names_filter="blocks.0.attn.hook_pattern")


def test_a_pattern_hook_edit_in_a_block_changes_the_hf_output():
    """The output comes from the blocks' patterns: an edit made by a block hook counts."""
    model = wrap("llama")
    ids, mask = inputs()
    model.set_query_blocks(QueryBlocks(rows=5))

    @accepts_query_blocks
    def uniform(x, hook):
        return torch.full_like(x, 1.0 / x.shape[-1])

    with torch.no_grad():
        plain = model(ids, mask, return_type="hidden")
        with model.hooks([("blocks.0.attn.hook_pattern", uniform)]):
            edited = model(ids, mask, return_type="hidden")
    model.set_query_blocks(QueryBlocks())
    assert max_diff(plain, edited) > 1e-3


@pytest.mark.parametrize("model_type", ["llama", "gemma2"])
@pytest.mark.parametrize("rows", [4, 9])
def test_hf_run_analyzers_in_blocks_equals_the_whole_matrix_path(model_type, rows):
    model = wrap(model_type)
    batches = _model_batches(model)

    def run(blocks):
        model.set_query_blocks(blocks)
        found = [HeadStats(2, 4, {1}, {2}, {3}), PositionalHeads(2, 4),
                 SparseCoverage(2, 4, causal=True, windows=(1, 2))]
        run_analyzers(model, batches, found, show_progress=False)
        return found

    whole = run(QueryBlocks(rows=10_000))
    blocked_run = run(QueryBlocks(rows=rows))
    model.set_query_blocks(QueryBlocks())
    for mine, reference in zip(blocked_run, whole, strict=True):
        assert_tables_equal(mine.result(), reference.result())


# On a GPU (skipped without CUDA) -----------------------------------------------------------
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@cuda
@pytest.mark.parametrize("mask_by_rows", [False, True], ids=["whole_mask", "row_mask"])
def test_hf_blocks_synchronise_nothing_per_block_on_cuda(mask_by_rows, request):
    """The hf backend's blocks on the GPU: CUDA's count of synchronisations of a forward pass
    feeding block-reading analyzers (head statistics, positional heads, sparse coverage, the
    language-model sinks, sink keys and streaming error) is the same with blocks of 8 rows
    as with blocks of 4 (twice as many blocks), with transformers' whole mask and with
    masks built by rows, and the tables equal the CPU's whole-matrix path."""
    if mask_by_rows:
        request.getfixturevalue("row_masks")
    from attnlens.measures.lm_heads.sinks import SinkKeys, SinkScores
    from attnlens.measures.lm_heads.streaming import StreamingError
    from tests.sync_utils import count_cuda_syncs

    def analyzers(model):
        return [HeadStats(2, 4, {1}, {2}, {3}), PositionalHeads(2, 4),
                SparseCoverage(2, 4, causal=True, windows=(1, 2)),
                SinkScores.for_model(model), SinkKeys.for_model(model),
                StreamingError.for_model(model, sink_tokens=1, window=3)]

    cpu = wrap("llama")
    hf = tiny_hf("llama").cuda()  # the same seed: the same weights
    gpu = HFAttentionModel(hf, {"architecture": type(hf).__name__})
    batches = [b.to("cuda") for b in _model_batches(cpu, n=4, length=48)]
    run_analyzers(gpu, batches[:1], analyzers(gpu), show_progress=False)  # warm-up
    counts = {}
    for rows in (8, 4):
        gpu.set_query_blocks(QueryBlocks(rows=rows))
        with count_cuda_syncs() as found:
            run_analyzers(gpu, batches, analyzers(gpu), show_progress=False)
        counts[rows] = len(found)
    print("CUDA synchronisations, hf backend, blocks of 8 and of 4 rows:", counts)
    assert counts[4] <= counts[8], counts
    gpu.set_query_blocks(QueryBlocks(rows=5))
    on_gpu = analyzers(gpu)
    run_analyzers(gpu, batches, on_gpu, show_progress=False)
    gpu.set_query_blocks(QueryBlocks())
    on_cpu = analyzers(cpu)
    run_analyzers(cpu, _model_batches(cpu, n=4, length=48), on_cpu, show_progress=False)
    for mine, reference in zip(on_gpu, on_cpu, strict=True):
        for name, table in reference.result().items():
            if name == "sink_keys":  # near-uniform heads: the top keys are near-ties
                continue
            # fp32 kernels on two devices: a few ulps of weights <= 1, summed over rows
            pd.testing.assert_frame_equal(mine.result()[name].reset_index(drop=True),
                                          table.reset_index(drop=True), check_exact=False,
                                          rtol=1e-4, atol=1e-5, check_dtype=False)


@cuda
def test_hf_blocks_on_cuda_are_rows_of_the_whole_pattern():
    hf = tiny_hf("gemma2").cuda()
    model = HFAttentionModel(hf, {"architecture": type(hf).__name__})
    ids, mask = (t.cuda() for t in inputs())
    found, hidden = blocked(model, ids, mask, rows=5)
    whole, whole_hidden = blocked(model, ids, mask, rows=10_000)
    for layer in range(model.n_layers):
        pattern = torch.cat([x for _, x in found[layer]], -2)
        assert pattern.device.type == "cuda"
        # the same rows from products of other shapes (the parity bound)
        assert max_diff(pattern, whole[layer][0][1]) <= TOL
    assert max_diff(hidden, whole_hidden) <= TOL
