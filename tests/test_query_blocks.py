"""Query blocks (issue 27): the hooked attention computes patterns a block of query rows at a
time, and every row-separable analyzer fed blocks equals the same analyzer fed whole
matrices, for block sizes that do and do not divide the length.

Tolerances: a block holds exactly the rows of the whole matrix (the same products and
softmax per row); what changes is the order in which per-sentence sums add the rows (block
by block), and, for word rows, the order in which a word's tokens are summed (a scatter
instead of a product). Both are float32 rounding of sums of at most a few hundred terms of
size <= 1: within 1e-6 relative (rtol) and 1e-6 absolute on shares, means and errors.
"""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from attnlens.data.corpus import load_corpus
from attnlens.data.rarity import WordRarity
from attnlens.data.words import WordAttentionContext
from attnlens.hooks import ActivationCache, QueryBlock, accepts_query_blocks
from attnlens.measures.heads.behaviour import HeadBehaviour
from attnlens.measures.heads.clustering import HeadClustering
from attnlens.measures.heads.head_stats import HeadStats
from attnlens.measures.heads.positional import PositionalHeads
from attnlens.measures.heads.rare_words import RareWordHeads
from attnlens.measures.heads.syntactic import SyntacticHeads
from attnlens.measures.rollout.rollout import RolloutAnalyzer
from attnlens.measures.sparse.sparse import SparseCoverage
from attnlens.model.query_blocks import QueryBlocks, WholeMatrixError
from attnlens.stats.bootstrap import Inference
from attnlens.stream.blocks import PatternBlock
from attnlens.stream.runner import run_analyzers
from tests.helpers import tiny_model

TOL = {"rtol": 1e-6, "atol": 1e-6}
RARITY = WordRarity.from_counts({"the": 50, "a": 40, "of": 30, "and": 30, "to": 20})


def feed_blocks(analyzer, batch, cache: ActivationCache, rows: int) -> None:
    """What the feeder does on a long input: each layer's pattern ``rows`` query rows at a
    time (``update_block``), then ``end_layer``; other names (values) come whole."""
    analyzer.begin_batch(batch)
    layers = sorted({int(n.split(".")[1]) for n in cache if n.endswith("hook_pattern")})
    for layer in layers:
        pattern = cache["pattern", layer]  # [batch, head, query_pos, key_pos]
        others = ActivationCache({n: cache[n] for n in cache
                                  if n.startswith(f"blocks.{layer}.") and
                                  not n.endswith("hook_pattern")})
        length = pattern.shape[-2]
        for start in range(0, length, rows):
            stop = min(start + rows, length)
            block = PatternBlock(pattern[:, :, start:stop], QueryBlock(start, stop, length),
                                 layer)
            analyzer.update_block(batch, layer, block, others)
        analyzer.end_layer(batch, layer)
    analyzer.end_batch(batch)


def assert_tables_equal(mine: dict, reference: dict) -> None:
    assert mine.keys() == reference.keys()
    for name, table in reference.items():
        pd.testing.assert_frame_equal(mine[name], table, obj=name, check_exact=False, **TOL)


@pytest.fixture(scope="module")
def word_data(minilm):
    """Sample-treebank batches tokenised by MiniLM (words split into several tokens) with
    random patterns and values for a 2-layer model of 3 heads (heads of every kind of row)."""
    _, tokenizer = minilm
    batches = load_corpus(text=None, treebank=None).batches(tokenizer, batch_size=8,
                                                            max_length=40)
    gen = torch.Generator().manual_seed(0)
    data = []
    for batch in batches:
        n, length = batch.input_ids.shape
        keep = batch.attention_mask.bool()[:, None, None, :]
        cache = {}
        for layer in range(2):
            scores = 3 * torch.randn(n, 3, length, length, generator=gen)
            cache[f"blocks.{layer}.attn.hook_pattern"] = torch.softmax(
                scores.masked_fill(~keep, -torch.inf), -1)
            cache[f"blocks.{layer}.attn.hook_v"] = torch.randn(n, length, 3, 4, generator=gen)
        data.append((batch, ActivationCache(cache)))
    return data


def row_analyzers(tokenizer=None):
    words = WordAttentionContext()
    inference = Inference(bootstrap=50)
    found = [
        HeadStats(2, 3, {101}, {102}, {1010, 1012}),
        PositionalHeads(2, 3, inference=inference),
        HeadBehaviour(2, 3, inference=inference),
        SyntacticHeads(2, 3, min_examples=5, words=words, inference=inference),
        RareWordHeads(2, 3, rarity=RARITY, words=words, inference=inference, min_words=5),
        SparseCoverage(2, 3, windows=(1, 2, 4)),
    ]
    return found


@pytest.mark.parametrize("rows", [1, 3, 4, 7, 16])
def test_row_separable_analyzers_fed_blocks_equal_whole_matrices(word_data, rows):
    whole, blocked = row_analyzers(), row_analyzers()
    for batch, cache in word_data:
        for analyzer in whole:
            analyzer.update(batch, cache)  # one block per layer: the whole matrix
        for analyzer in blocked:
            feed_blocks(analyzer, batch, cache, rows)
    for mine, reference in zip(blocked, whole, strict=True):
        assert_tables_equal(mine.result(), reference.result())


@pytest.mark.parametrize("kernel", [False, True])
def test_per_sentence_sums_of_a_long_sentence_do_not_depend_on_the_blocks(monkeypatch, kernel):
    """One sentence of 3,000 tokens: head statistics and behaviour sum thousands of rows
    (distances up to 3,000) per sentence; fed in blocks of 7 rows they equal the whole
    matrix. On the torch path the per-row values are the same floats in both forms; only
    their sum differs in order. Sums kept in float32 differed by 3e-4 (mean distance) here;
    in float64 the order costs about 1e-16 relative per addition, so 1e-9 absolute bounds it
    with room. With the head statistics' C kernel (CPU, whole patterns only) the whole
    matrix's to_punct and distance are float64 sums rounded once, the blocks' torch's
    float32 sums of 3,000 terms (a cascade: ~log2(3000) x 2^-24 ~ 7e-7 relative): 1e-6
    relative (measured 1.3e-8 on the mean distance)."""
    from attnlens.data.batch import Batch
    from attnlens.measures.heads import head_stats

    if not kernel:
        monkeypatch.setattr(head_stats, "_stats_kernel", None)
    elif head_stats._stats_kernel is None:
        pytest.skip("the head statistics C kernel is not built")
    tolerance = {"rtol": 1e-6, "atol": 1e-9} if kernel else {"rtol": 0, "atol": 1e-9}

    n = 3000
    gen = torch.Generator().manual_seed(0)
    pattern = torch.softmax(4 * torch.randn(1, 2, n, n, generator=gen), -1)
    ids = torch.full((1, n), 5)
    ids[0, 0], ids[0, -1] = 1, 2
    special = (ids == 1) | (ids == 2)
    batch = Batch(input_ids=ids, attention_mask=torch.ones_like(ids), special_mask=special,
                  extra={"index": [0]})
    cache = ActivationCache({"blocks.0.attn.hook_pattern": pattern})
    for make in (lambda: HeadStats(1, 2, {1}, {2}, {3}), lambda: HeadBehaviour(1, 2)):
        whole, blocked = make(), make()
        whole.update(batch, cache)
        feed_blocks(blocked, batch, cache, 7)
        for name, table in whole.result().items():
            pd.testing.assert_frame_equal(blocked.result()[name], table, obj=name,
                                          check_exact=False, **tolerance)


def test_words_cut_by_block_boundaries_carry_their_rows(word_data):
    """Words of the data span two blocks of 3 and of 4 rows (their rows were carried over),
    so the equality above covers the carry."""
    spans = [(batch.word_ids[b] == w).nonzero()[:, 0] for batch, _ in word_data
             for b in range(batch.size) for w in range(int(batch.word_ids[b].max()) + 1)]
    for rows in (3, 4):
        assert any(len(s) > 1 and s[0] // rows != s[-1] // rows for s in spans)


def test_word_rows_of_blocks_are_the_whole_word_matrix(word_data):
    batch, cache = word_data[0]
    pattern = cache["pattern", 0]
    length = pattern.shape[-2]
    whole = WordAttentionContext().get(batch, 0, pattern)
    context = WordAttentionContext()
    rows = torch.zeros_like(whole.weights)
    seen = torch.zeros(whole.weights.shape[0], whole.weights.shape[2], dtype=torch.long)
    for start in range(0, length, 5):
        stop = min(start + 5, length)
        part = context.rows(batch, 0, pattern[:, :, start:stop], QueryBlock(start, stop, length))
        for b in range(rows.shape[0]):
            for r in range(part.n):
                if part.done[b, r]:
                    rows[b, :, part.first + r] = part.weights[b, :, r]
                    seen[b, part.first + r] += 1
    assert torch.equal(seen, whole.valid.long())  # each real word completed exactly once
    torch.testing.assert_close(rows, whole.weights * whole.valid[:, None, :, None], **TOL)


# The model's block path -----------------------------------------------------------------
def causal_model():
    return tiny_model(causal=True, positional="rotary", n_token_types=0, embed_norm=False,
                      n_ctx=64, norm="rmsnorm", norm_position="pre")


@torch.no_grad()
def test_attention_blocks_are_rows_of_the_whole_pattern_and_give_the_same_output():
    model = causal_model()
    ids = torch.randint(1, 50, (2, 23))
    mask = torch.ones_like(ids)
    mask[1, 19:] = 0
    name = "blocks.1.attn.hook_pattern"
    whole = model.run_with_cache(ids, attention_mask=mask, names_filter=name)
    blocks: list[tuple[QueryBlock, torch.Tensor]] = []

    @accepts_query_blocks
    def keep(x, hook):
        blocks.append((hook.query_block, x.clone()))

    model.set_query_blocks(QueryBlocks(rows=5))
    with model.hooks([(name, keep)]):
        out = model(ids, attention_mask=mask)
    assert [b.start for b, _ in blocks] == [0, 5, 10, 15, 20]
    assert blocks[-1][0] == QueryBlock(20, 23, 23) and blocks[-1][1].shape[-2] == 3
    # the same rows, from products of other shapes: float32 rounding of the scores (|s| < 20)
    torch.testing.assert_close(torch.cat([x for _, x in blocks], -2), whole[1][name],
                               rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(out, whole[0], rtol=0, atol=1e-6)  # z from blocks


def _blocked_patterns(model, ids, mask, rows: int):
    """Every layer's pattern assembled from blocks of ``rows`` query rows, and the output."""
    names = [f"blocks.{layer}.attn.hook_pattern" for layer in range(model.cfg.n_layers)]
    parts: dict[str, list[torch.Tensor]] = {name: [] for name in names}

    def keep(name):
        @accepts_query_blocks
        def hook(x, hook):
            parts[name].append(x.clone())
        return hook

    model.set_query_blocks(QueryBlocks(rows=rows))
    with model.hooks([(name, keep(name)) for name in names]):
        out = model(ids, attention_mask=mask)
    model.set_query_blocks(QueryBlocks())
    return {name: torch.cat(p, -2) for name, p in parts.items()}, out


def test_attention_mask_rows_with_a_window_are_the_rows_of_the_windowed_dense_mask():
    """``AttentionMask.with_window(w).rows(a, b)`` is ``sliding_window_mask`` of the dense
    mask, rows a:b, bit for bit (the same operations on the same values)."""
    from attnlens.model.attention import sliding_window_mask
    from attnlens.model.masks import mask_from_parts

    padding = torch.ones(2, 23, dtype=torch.long)
    padding[1, 17:] = 0
    parts = mask_from_parts(padding, 23, 23, True, torch.float32, "cpu")
    dense = sliding_window_mask(parts.dense(), 23, 23, 4)  # [batch, 1, query_pos, key_pos]
    windowed = sliding_window_mask(parts, 23, 23, 4)
    assert windowed is not parts and windowed.window == 4 and parts.window is None
    for start in range(0, 23, 5):
        assert torch.equal(windowed.rows(start, min(start + 5, 23)), dense[..., start:start + 5, :])
    assert torch.equal(windowed.dense(), dense)
    assert windowed.for_sdpa() == (windowed.dense(), False)  # no causal kernel: the window
    assert sliding_window_mask(parts, 23, 23, 23) is parts  # the window covers every key


@torch.no_grad()
def test_blocks_of_a_sliding_window_model_keep_each_layers_window():
    """Layer 1 has a window of 4 keys (layer 0 none): blocks of 5 rows are the rows of the
    whole pattern, exactly 0 beyond the window, and the output is the whole path's."""
    model = tiny_model(causal=True, positional="rotary", n_token_types=0, embed_norm=False,
                       n_ctx=64, norm="rmsnorm", norm_position="pre", sliding_window=4,
                       sliding_window_layers=[1])
    ids = torch.randint(1, 50, (2, 23))
    mask = torch.ones_like(ids)
    mask[1, 19:] = 0
    names = [f"blocks.{layer}.attn.hook_pattern" for layer in range(2)]
    whole_out, cache = model.run_with_cache(ids, attention_mask=mask, names_filter=names)
    blocks, out = _blocked_patterns(model, ids, mask, rows=5)
    query = torch.arange(23)[:, None]
    too_far = query - torch.arange(23)[None] >= 4  # [query_pos, key_pos]
    real = mask.bool()[:, None, :, None] & too_far  # [batch, 1, query_pos, key_pos]
    # real query rows (a padding row whose window holds only padding is uniform, as in HF)
    assert (blocks[names[1]].masked_select(real) == 0).all()
    assert (blocks[names[0]][0][..., too_far] > 0).all()  # layer 0: no window
    for name in names:  # float32 rounding of scores from products of other shapes
        torch.testing.assert_close(blocks[name], cache[name], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(out, whole_out, rtol=0, atol=1e-6)


@torch.no_grad()
def test_blocks_of_a_float64_model_take_the_softmax_in_float64():
    """A float64 model: blocks hold float64 patterns equal to the whole matrix's rows
    (float64 rounding of the products, 1e-12 as the float64 parity tests)."""
    model = causal_model().double()
    ids = torch.randint(1, 50, (2, 23))
    mask = torch.ones_like(ids)
    mask[1, 19:] = 0
    name = "blocks.1.attn.hook_pattern"
    whole_out, cache = model.run_with_cache(ids, attention_mask=mask, names_filter=name)
    blocks, out = _blocked_patterns(model, ids, mask, rows=5)
    assert blocks[name].dtype == torch.float64
    torch.testing.assert_close(blocks[name], cache[name], rtol=0, atol=1e-12)
    torch.testing.assert_close(out, whole_out, rtol=0, atol=1e-12)


def test_a_hook_needing_the_whole_matrix_gets_it_below_the_limit_and_is_refused_above():
    model = causal_model()
    ids = torch.randint(1, 50, (1, 30))
    model.set_query_blocks(QueryBlocks(rows=4, whole_matrix_limit=30))
    _, cache = model.run_with_cache(ids, names_filter="blocks.0.attn.hook_pattern")
    assert cache["pattern", 0].shape == (1, 4, 30, 30)
    model.set_query_blocks(QueryBlocks(rows=4, whole_matrix_limit=29))
    with pytest.raises(WholeMatrixError, match=r"blocks\.0\.attn\.hook_pattern.*29"):
        model.run_with_cache(ids, names_filter="blocks.0.attn.hook_pattern")


def _model_batches(model, n=3, length=26):
    from attnlens.data.batch import Batch

    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(3, 50, (n, length), generator=gen)
    mask = torch.ones_like(ids)
    mask[1, length - 6:] = 0
    ids[mask == 0] = 0
    special = torch.zeros_like(ids, dtype=torch.bool)
    special[:, 0] = True
    return [Batch(input_ids=ids, attention_mask=mask, special_mask=special,
                  extra={"index": list(range(n))})]


@pytest.mark.parametrize("rows", [4, 9])
def test_run_analyzers_in_blocks_equals_the_whole_matrix_path(rows):
    model = causal_model()
    batches = _model_batches(model)

    def run(blocks):
        model.set_query_blocks(blocks)
        found = [HeadStats(2, 4, {1}, {2}, {3}), PositionalHeads(2, 4),
                 HeadBehaviour(2, 4), SparseCoverage(2, 4, causal=True, windows=(1, 2))]
        run_analyzers(model, batches, found, show_progress=False)
        return found

    whole = run(QueryBlocks(rows=10_000))
    blocked = run(QueryBlocks(rows=rows))
    for mine, reference in zip(blocked, whole, strict=True):
        assert_tables_equal(mine.result(), reference.result())


def test_analyses_needing_whole_matrices_are_refused_above_the_limit_by_name():
    model = causal_model()
    batches = _model_batches(model)
    model.set_query_blocks(QueryBlocks(rows=8, whole_matrix_limit=20))
    rollout = RolloutAnalyzer.for_model(model)
    with pytest.raises(WholeMatrixError, match=f"the {rollout.name} analysis.*26 tokens.*20"):
        run_analyzers(model, batches, [HeadStats(2, 4, {1}, {2}, {3}), rollout],
                      show_progress=False)


def test_head_clustering_leaves_long_inputs_out_when_asked_and_says_so():
    model = causal_model()
    batches = _model_batches(model)
    model.set_query_blocks(QueryBlocks(rows=8, whole_matrix_limit=20))
    clusters = HeadClustering(2, 4, skips_long_inputs=True)
    stats = HeadStats(2, 4, {1}, {2}, {3})
    run_analyzers(model, batches, [stats, clusters], show_progress=False)
    assert clusters.long_skipped == 3 and clusters.result() == {}
    assert "left out 3 sentences" in clusters.skipped_note()
    assert stats.rows > 0
    with pytest.raises(WholeMatrixError, match="clustering"):
        run_analyzers(model, batches, [HeadClustering(2, 4)], show_progress=False)


# The spectrum at length ---------------------------------------------------------------------
def _spectrum_data(lengths=(70, 70, 20, 9)):
    """One batch of sentences of these real lengths (right-padded), random patterns of a
    2-layer, 3-head model, and values."""
    from attnlens.data.batch import Batch

    gen = torch.Generator().manual_seed(3)
    n, length = len(lengths), max(lengths)
    mask = torch.zeros(n, length, dtype=torch.long)
    for b, real in enumerate(lengths):
        mask[b, :real] = 1
    batch = Batch(input_ids=torch.ones(n, length, dtype=torch.long), attention_mask=mask)
    keep = mask.bool()[:, None, None, :]
    cache = {}
    for layer in range(2):
        scores = 2 * torch.randn(n, 3, length, length, generator=gen)
        cache[f"blocks.{layer}.attn.hook_pattern"] = torch.softmax(
            scores.masked_fill(~keep, -torch.inf), -1)
        cache[f"blocks.{layer}.attn.hook_v"] = torch.randn(n, length, 3, 4, generator=gen)
    return batch, ActivationCache(cache)


def _feed_with_recompute(analyzer, batch, cache, rows):
    """``feed_blocks`` with each block's ``recompute`` (rows sliced from the cache, as the
    model recomputes them)."""
    analyzer.begin_batch(batch)
    for layer in range(2):
        pattern = cache["pattern", layer]
        others = ActivationCache({f"blocks.{layer}.attn.hook_v": cache["v", layer]})
        length = pattern.shape[-2]

        def recompute(start, stop, pattern=pattern):
            return pattern[:, :, start:stop].clone()

        for start in range(0, length, rows):
            stop = min(start + rows, length)
            block = PatternBlock(pattern[:, :, start:stop], QueryBlock(start, stop, length),
                                 layer, recompute)
            analyzer.update_block(batch, layer, block, others)
        analyzer.end_layer(batch, layer)
    analyzer.end_batch(batch)


@pytest.mark.parametrize("rows", [8, 13])
def test_spectrum_top_k_from_block_products_equals_the_dense_path(rows):
    from attnlens.measures.spectrum.spectrum import SpectrumAnalyzer

    batch, cache = _spectrum_data()

    def make():
        return SpectrumAnalyzer([3, 3], top_k=4, top_k_min_n=32, low_rank_cost=True)

    whole, blocked = make(), make()
    whole.update(batch, cache)
    _feed_with_recompute(blocked, batch, cache, rows)
    assert blocked.top_sentences == 2 and blocked.sentences == 2  # 70 top-k; 20 and 9 full
    # top-k: the same Gaussian start and float32 iterations as the dense path, products
    # summed block by block (float32 rounding, amplified by 4 power steps: 1e-5 relative);
    # full spectra of the short sentences are the same matrices (exact)
    for name, table in whole.result().items():
        pd.testing.assert_frame_equal(blocked.result()[name], table, obj=name,
                                      check_exact=False, rtol=1e-5, atol=1e-6)


def test_top_k_bounds_hold_for_block_products():
    """The bounds bracket the exact nuclear norm and top-k sum of each long pattern."""
    from attnlens.measures.spectrum.long_patterns import BlockSketch
    from attnlens.measures.spectrum.singular_values import top_singular_values_of
    from attnlens.stream.real_tokens import block_groups

    batch, cache = _spectrum_data((70, 64))
    pattern = cache["pattern", 0]
    (group_70,) = [g for g in block_groups(batch.attention_mask, batch.attention_mask)
                   if g.rank == 70]
    sketch = BlockSketch(group_70, 3, 70, 5, None, 0, torch.device("cpu"))
    for start in range(0, 70, 9):
        stop = min(start + 9, 70)
        sketch.add(PatternBlock(pattern[:, :, start:stop], QueryBlock(start, stop, 70), 0))
    top = top_singular_values_of(
        sketch.products(lambda a, b: pattern[:, :, a:b], 9), 5, sketch=sketch.first_product())
    s = torch.linalg.svdvals(pattern[0, :, :70, :70].double())  # [head, 70]
    nuclear, top5 = s.sum(-1), s[:, :5].sum(-1)
    slack = 1e-9  # float64 rounding of the bounds themselves
    assert (top.nuclear_lower[0] <= nuclear + slack).all()
    assert (nuclear <= top.nuclear_upper[0] + slack).all()
    assert (top.ky_fan_lower[0] <= top5 + slack).all()
    assert (top5 <= top.ky_fan_upper[0] + slack).all()


def test_full_spectra_need_whole_blocks_and_are_refused_above_the_limit():
    from attnlens.measures.spectrum.spectrum import SpectrumAnalyzer

    model = causal_model()
    batches = _model_batches(model)
    model.set_query_blocks(QueryBlocks(rows=8, whole_matrix_limit=20))
    with pytest.raises(WholeMatrixError, match=r"the spectrum analysis.*26 tokens"):
        run_analyzers(model, batches, [SpectrumAnalyzer([4, 4], low_rank_cost=False)],
                      show_progress=False)
    top_k = SpectrumAnalyzer([4, 4], low_rank_cost=False, top_k=3, top_k_min_n=16)
    run_analyzers(model, batches, [top_k], show_progress=False)  # 20 and 26 tokens: top-k
    assert top_k.top_sentences == 3 and top_k.result()["spectrum_top_k"]["value"].notna().all()
