"""The linear-attention view's C kernel (attnlens/measures/linear/_linear_kernel.c, issue 29,
lin38).

The kernel computes every per-(sentence, head) measure in float64 from the float32 pattern,
queries, keys and values. Its reference is the analyzer's own torch path run in float64
(``compute_dtype = torch.float64``: the same float32 inputs, every product in float64): the
two differ only in the order float64 additions are made (sums of at most a few hundred
terms, ~1e-16 relative each) and in ``exp`` (the kernel's own, within 1 ulp of the C
library's), so rtol 1e-12 leaves three orders of magnitude; atol 1e-14 covers errors near 0
(a read-out exact up to rounding: a difference of two nearly equal float64 outputs). Against
the float32 torch path (the path the CPU ran before, still the GPU's) the module's float32
tolerance applies (tests/test_linear_attention.py's TOL, 1e-5: float32 products of length
<= 64 and their ratios).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import attnlens.measures.linear.linear_attention as linear
from attnlens.data.batch import Batch
from attnlens.measures.linear.linear_attention import LinearAttentionView
from tests.kernel_builds import (
    LEVEL_BUILDS,
    build_kernel,
    needs_builds,
    skip_unless_cpu_has,
)
from tests.test_linear_attention import _cache

SOURCE = linear.__file__.replace("linear_attention.py", "_linear_kernel.c")
STATE = ("sums", "by_length")

pytestmark = pytest.mark.skipif(linear._linear_kernel is None,
                                reason="the linear C kernel is not built (no C compiler)")


def _inputs(lengths=(23, 9, 17), heads=4, kv_heads=2, d=8, dv=6, causal=False, seed=3):
    """A padded batch of random queries, keys and values (grouped-query: ``heads`` reading
    ``kv_heads``) and their softmax pattern over the real (and, causal, earlier) keys."""
    gen = torch.Generator().manual_seed(seed)
    n, batch = max(lengths), len(lengths)
    mask = (torch.arange(n)[None, :] < torch.tensor(lengths)[:, None]).long()
    q = torch.randn(batch, n, heads, d, generator=gen)
    k = torch.randn(batch, n, kv_heads, d, generator=gen)
    v = torch.randn(batch, n, kv_heads, dv, generator=gen)
    keys = linear.per_query_head(k, heads)  # [batch, head, pos, d]
    hidden = ~mask.bool()[:, None, None, :]
    if causal:
        hidden = hidden | torch.ones(n, n, dtype=torch.bool).triu(1)
    p = torch.softmax((q.transpose(1, 2) @ keys.mT / d**0.5).masked_fill(hidden, -torch.inf), -1)
    ids = torch.arange(5, 5 + n).expand(batch, n)
    return Batch(input_ids=ids, attention_mask=mask), _cache(q, k, v, p), heads, d


def _fed(inputs, kernel=True, float64=False, causal=False) -> LinearAttentionView:
    batch, cache, heads, d = inputs
    view = LinearAttentionView(1, heads, d, causal=causal)
    if float64:
        view.compute_dtype = torch.float64
    saved = linear._linear_kernel
    try:
        if not kernel:
            linear._linear_kernel = None
        view.update(batch, cache)
    finally:
        linear._linear_kernel = saved
    return view


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", [{}, {"heads": 3, "kv_heads": 3, "d": 16, "dv": 16},
                                   {"heads": 2, "kv_heads": 1, "d": 40, "dv": 9}])
def test_the_kernel_agrees_with_the_float64_path_to_float64_rounding(causal, shape):
    """Padded batches (23, 9, 17 tokens), grouped-query and plain heads, d and dv below,
    at and above the kernel's vector widths (8, 32), encoder and causal."""
    inputs = _inputs(causal=causal, **shape)
    found = _fed(inputs, causal=causal)
    want = _fed(inputs, kernel=False, float64=True, causal=causal)
    for field in STATE:
        torch.testing.assert_close(getattr(found, field), getattr(want, field), rtol=1e-12,
                                   atol=1e-14, msg=field)


@pytest.mark.parametrize("causal", [False, True])
def test_the_kernel_agrees_with_the_float32_torch_path(causal):
    inputs = _inputs(causal=causal)
    found, before = _fed(inputs, causal=causal), _fed(inputs, kernel=False, causal=causal)
    for field in STATE:
        torch.testing.assert_close(getattr(found, field), getattr(before, field), rtol=1e-5,
                                   atol=1e-5, msg=field)


def test_known_answers_of_orthonormal_and_parallel_keys():
    """Head 0: orthonormal keys e_j read one-hot by their own query (q_i = k_i): no
    interference, n effective keys, the raw read-out sum_j (q_i.k_j) v_j = v_i exact; its
    linear attention is sum_j phi(e_i).phi(e_j) v_j / sum_j ..., by hand. Head 1: every key
    the same vector: interference 1, one effective key."""
    n, d = 5, 8
    eye = torch.eye(d)[:n]
    q = torch.stack([eye, eye], 1)[None]  # [batch, pos, head, d]
    k = torch.stack([eye, torch.ones(n, d)], 1)[None]
    v = torch.randn(1, n, 2, 3, generator=torch.Generator().manual_seed(1))
    p = torch.eye(n).expand(1, 2, n, n)  # query i reads key i
    ids = torch.arange(5, 5 + n)[None]
    view = LinearAttentionView(1, 2, d)
    view.update(Batch(input_ids=ids, attention_mask=torch.ones_like(ids)), _cache(q, k, v, p))
    measures = dict(zip(linear.MEASURES, view.sums[:, 0].tolist(), strict=True))
    assert measures["interference"][0] == 0.0  # products with exact zeros
    assert measures["interference"][1] == pytest.approx(1.0, rel=1e-15)  # 8 * (1 / sqrt 8)^2
    assert measures["effective_keys"][0] == pytest.approx(n, rel=1e-15)
    assert measures["effective_keys"][1] == pytest.approx(1.0, rel=1e-15)
    assert measures["raw_error"][0] == 0.0 and measures["raw_error_rescaled"][0] == 0.0
    phi = torch.where(eye > 0, eye + 1, torch.exp(eye)).double()  # elu(x) + 1: 2 or 1
    kernel = phi @ phi.T  # [query, key]: d + 3 on the diagonal, d off it
    lin = (kernel / kernel.sum(-1, keepdim=True)) @ v[0, :, 0].double()
    exact = v[0, :, 0].double()
    want = float((lin - exact).norm() / exact.norm())
    assert measures["linear_error"][0] == pytest.approx(want, rel=1e-14)


def test_padded_keys_and_rows_change_nothing():
    """Two sentences padded side by side give the bits of each alone (the kernel reads real
    rows and keys only; padded pattern entries are 0)."""
    batch, cache, heads, d = _inputs(lengths=(23, 9))
    both = LinearAttentionView(1, heads, d)
    both.update(batch, cache)
    alone = []
    for b, n in enumerate((23, 9)):
        view = LinearAttentionView(1, heads, d)
        ids = batch.input_ids[b : b + 1, :n]
        view.update(Batch(input_ids=ids, attention_mask=torch.ones_like(ids)),
                    _cache(*(cache[name, 0][b : b + 1, :n] for name in ("q", "k", "v")),
                           cache["pattern", 0][b : b + 1, :, :n, :n]))
        alone.append(view)
    assert torch.equal(both.sums, alone[0].sums + alone[1].sums)


def test_split_between_threads_gives_the_same_bits():
    from attnlens.stream import threads

    inputs = _inputs(lengths=(17, 30, 5, 11))
    results, split = [], threads.run_split
    for count in (1, 2, 3):
        try:
            linear.run_split = lambda work, n, _c=count: split(work, n, threads=_c)
            results.append(_fed(inputs))
        finally:
            linear.run_split = split
    for other in results[1:]:
        for field in STATE:
            assert torch.equal(getattr(results[0], field), getattr(other, field)), field


def test_wrong_sizes_are_refused():
    kernel = linear._linear_kernel
    f32 = np.float32
    good = dict(pattern=np.zeros((1, 2, 3, 3), f32), q=np.zeros((1, 3, 2, 4), f32),
                k=np.zeros((1, 3, 1, 4), f32), v=np.zeros((1, 3, 1, 5), f32),
                rows=np.ones((1, 3), np.uint8), picked=np.zeros(1, np.int64))
    out = np.zeros((1, 2, 5))

    def call(**change):
        args = {**good, **change}
        kernel.fold(*args.values(), 1, 1, 2, 3, 1, 4, 5, False, 0, 2, out)

    call()  # the good call runs
    with pytest.raises(ValueError, match="q holds"):
        call(q=np.zeros((1, 3, 1, 4), f32))
    with pytest.raises(ValueError, match="picked holds 0 bytes"):
        call(picked=np.zeros(0, np.int64))
    with pytest.raises(ValueError, match="picked holds a sentence outside"):
        call(picked=np.ones(1, np.int64))
    with pytest.raises(ValueError, match="bad shapes"):
        kernel.fold(*good.values(), 1, 1, 2, 3, 1, 4, 5, False, 0, 3, out)  # pairs past end


def test_minilm_kernel_agrees_with_both_torch_paths(minilm):
    """The embedded MiniLM on the embedded sample's first two padded batches of 8 sentences
    (six layers held together as the analyzer holds them)."""
    from attnlens.data.corpus import load_corpus
    from attnlens.stream.runner import run_analyzers

    model, tokenizer = minilm
    batches = load_corpus(text=None, treebank=None).batches(tokenizer, batch_size=8,
                                                            max_length=64)[:2]
    views = {}
    for name, kernel, dtype in (("kernel", True, torch.float32), ("torch", False, torch.float32),
                                ("float64", False, torch.float64)):
        view = LinearAttentionView.for_model(model)
        view.compute_dtype = dtype
        saved = linear._linear_kernel
        try:
            if not kernel:
                linear._linear_kernel = None
            (views[name],) = run_analyzers(model, batches, [view], show_progress=False)
        finally:
            linear._linear_kernel = saved
    for field in STATE:
        found = getattr(views["kernel"], field)
        torch.testing.assert_close(found, getattr(views["float64"], field), rtol=1e-12,
                                   atol=1e-14, msg=field)
        torch.testing.assert_close(found, getattr(views["torch"], field), rtol=1e-5, atol=1e-5,
                                   msg=field)


BUILDS = LEVEL_BUILDS


@needs_builds
@pytest.mark.parametrize("name", list(BUILDS))
@pytest.mark.parametrize("causal", [False, True])
def test_each_build_gives_the_installed_bits(tmp_path, name, causal):
    """Each x86-64 level built alone (``KERNEL_NO_CLONES``; the installed build holds all
    three and runs the CPU's): no contraction, no reassociation and the kernel's own exp,
    so the same bits."""
    from pathlib import Path

    flags, needs = BUILDS[name]
    skip_unless_cpu_has(needs)
    module = build_kernel(Path(SOURCE), tmp_path, flags)
    inputs = _inputs(lengths=(33, 12, 7), heads=2, kv_heads=2, d=36, dv=41, causal=causal)
    installed = _fed(inputs, causal=causal)
    saved = linear._linear_kernel
    try:
        linear._linear_kernel = module
        built = _fed(inputs, causal=causal)
    finally:
        linear._linear_kernel = saved
    for field in STATE:
        assert torch.equal(getattr(installed, field), getattr(built, field)), field


def test_the_kernel_reads_each_held_layer_where_it_lies_and_sums_them_together():
    """ops39: the kernel reads each held layer's inputs as the model made them, one call per
    layer (concatenating the held layers copied them once more, torch.cat), and the outputs
    are summed over sentences as before: the layers of a run side by side (bit for bit)."""
    from attnlens.stream.held_layers import HeldLayers

    layers = [_inputs(seed=seed) for seed in (3, 4, 5)]
    batch, _, heads, d = layers[0]
    cache = _cache_of_layers([cache for _, cache, _, _ in layers])
    budget = 2 * sum(cache[name, 0].numel() for name in ("pattern", "q", "k", "v"))
    view = LinearAttentionView(3, heads, d)
    view._held = HeldLayers(budget)  # layers 0 and 1 folded together, then layer 2
    read = []
    measures = view._kernel_measures
    view._kernel_measures = lambda pattern, *rest: read.append(pattern) or measures(pattern,
                                                                                    *rest)
    view.begin_batch(batch)
    for layer in range(3):
        view.update_layer(batch, layer, cache)
    view.end_batch(batch)
    assert [x.data_ptr() for x in read] == [cache["pattern", i].data_ptr() for i in range(3)]
    want = LinearAttentionView(3, heads, d)
    want.begin_batch(batch)
    for run in ([0, 1], [2]):  # the held inputs concatenated, then read by one call
        inputs = [torch.cat([cache[name, layer] for layer in run], dim)
                  for name, dim in (("pattern", 1), ("q", 2), ("k", 2), ("v", 2))]
        want._add(run, *want._kernel_measures(*inputs).unbind(-1))
    for field in STATE:
        assert torch.equal(getattr(view, field), getattr(want, field)), field


def _cache_of_layers(caches):
    """One cache of several one-layer caches (``_cache``'s), layer ``i`` from ``caches[i]``."""
    from attnlens.hooks import ActivationCache

    return ActivationCache({name.replace("blocks.0.", f"blocks.{i}."): cache[name]
                            for i, cache in enumerate(caches) for name in cache})


def test_a_sample_is_read_where_it_lies_with_the_bits_of_a_copy(monkeypatch):
    """pass40: with ``max_sentences`` the kernel reads the sampled sentences of the whole
    batch's tensors (``picked``), no ``index_select`` copy of them first, and gives the bits
    of the same sentences fed alone (the copy the analyzer made before)."""
    batch, cache, heads, d = _inputs(lengths=(23, 9, 17, 5, 12))
    ids = batch.input_ids.clone()
    batch = Batch(input_ids=ids, attention_mask=batch.attention_mask,
                  extra={"index": [0, 1, 2, 3, 4], "corpus_size": 5})
    copied = []
    monkeypatch.setattr(torch.Tensor, "index_select",
                        lambda self, *a, _f=torch.Tensor.index_select: (
                            copied.append(self.shape), _f(self, *a))[1])
    sampled = LinearAttentionView(1, heads, d, max_sentences=2)  # corpus indices 0 and 2
    sampled.update(batch, cache)
    assert copied == []
    monkeypatch.undo()
    rows = torch.tensor([0, 2])
    alone = LinearAttentionView(1, heads, d)
    alone.update(Batch(input_ids=ids[rows], attention_mask=batch.attention_mask[rows]),
                 _cache(*(cache[name, 0][rows] for name in ("q", "k", "v")),
                        cache["pattern", 0][rows]))
    for field in STATE:
        assert torch.equal(getattr(sampled, field), getattr(alone, field)), field
    assert sampled.sentences == alone.sentences == 2


def test_a_sample_read_in_place_folds_at_the_layers_a_copy_folded_at():
    """The held layers count the sample's elements (``HeldLayers.add``'s ``counted``), not
    the whole batch's they hold: the layers fold together as when a copy of the sample was
    held (a fold's layers are summed together, so other folds change the last bits)."""
    from attnlens.hooks import ActivationCache
    from attnlens.stream.held_layers import HeldLayers

    batch, cache, heads, d = _inputs(lengths=(23, 9, 17, 5, 12))
    layers = {f"blocks.{i}.attn.hook_{kind}": cache[kind, 0]
              for i in range(3) for kind in ("q", "k", "v", "pattern")}
    batch = Batch(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                  extra={"index": [0, 1, 2, 3, 4], "corpus_size": 5})
    rows = torch.tensor([0, 2])
    alone_batch = Batch(input_ids=batch.input_ids[rows], attention_mask=batch.attention_mask[rows])
    alone_cache = {name: x[rows] for name, x in layers.items()}
    per_layer = sum(x.numel() for x in alone_cache.values()) // 3  # the sample's, one layer
    folds = {}
    for name, view, fed in (("sampled", LinearAttentionView(3, heads, d, max_sentences=2),
                             (batch, layers)),
                            ("alone", LinearAttentionView(3, heads, d),
                             (alone_batch, alone_cache))):
        view._held = HeldLayers(2 * per_layer)  # two layers of the sample, then a fold
        add = view._add
        view._add = lambda found, *x, _add=add, _n=name: (
            folds.setdefault(_n, []).append(list(found)), _add(found, *x))[1]
        view.update(fed[0], ActivationCache(fed[1]))
        folds[name + " state"] = view.sums
    assert folds["sampled"] == folds["alone"] == [[0, 1], [2]]
    assert torch.equal(folds["sampled state"], folds["alone state"])
