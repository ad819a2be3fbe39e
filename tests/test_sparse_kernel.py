"""Sparse coverage's C kernel (attnlens/measures/sparse/_sparse_kernel.c, issue 29, sparse37).

The kernel folds a whole pattern's real rows in one walk per row, every sum in float64 from
the float32 pattern and values. Its reference is the analyzer's own float64 path
(``compute_dtype = torch.float64``: every per-sentence product, mass and norm in float64
from the same float32 inputs), so the two differ only in the order float64 additions are
made: ~1e-16 relative per sum of at most a few hundred terms; rtol 1e-12 leaves four orders
of magnitude for longer sums, atol 1e-14 covers output errors near 0 (a window keeping a
row almost whole: a difference of two nearly equal float64 outputs). Against the float32
torch path (the path the CPU ran before, still the GPU's) the tolerance of
tests/test_sparse32.py applies, and every ``window90*`` integer is the same.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import attnlens.measures.sparse.sparse as sparse
from attnlens.measures.sparse.sparse import SparseCoverage
from tests.kernel_builds import (
    LEVEL_BUILDS,
    build_kernel,
    needs_builds,
    skip_unless_cpu_has,
)
from tests.test_sparse import _batch, _cache
from tests.test_sparse32 import _padded_patterns, _tables_close

SOURCE = Path(sparse.__file__).with_name("_sparse_kernel.c")
STATE = ("by_distance", "nonglobal_by_distance", "masses", "errors")

pytestmark = pytest.mark.skipif(sparse._sparse_kernel is None,
                                reason="the sparse C kernel is not built (no C compiler)")


def _fed(lengths=(40, 23, 9), n_layers=2, kernel=True, float64=False, seed=3, **options):
    """The analyzer after one padded batch of random softmax patterns and grouped-query
    values (4 heads reading 2 key/value heads), by the kernel or the torch path."""
    torch.manual_seed(seed)
    n = max(lengths)
    ids, patterns = _padded_patterns(n, lengths, n_layers=n_layers)
    values = torch.randn(n_layers, len(lengths), n, 2, 6)
    analyzer = SparseCoverage(n_layers, 4, **options)
    if float64:
        analyzer.compute_dtype = torch.float64
    saved = sparse._sparse_kernel
    try:
        if not kernel:
            sparse._sparse_kernel = None
        analyzer.update(_batch(ids, list(range(len(lengths)))), _cache(patterns, values))
    finally:
        sparse._sparse_kernel = saved
    return analyzer


def test_the_kernel_agrees_with_the_float64_path_to_float64_rounding():
    """Sentences of 40, 23 and 9 tokens in one padded batch (windows 1..16 strict subsets in
    some, whole rows in others), two layers; also windows 0 and past every length, a
    smaller distance cap and more global tokens."""
    for options in ({}, {"windows": (0, 3, 30, 60), "max_distance": 12, "n_global": 4}):
        found = _fed(kernel=True, **options)
        want = _fed(kernel=False, float64=True, **options)
        for field in STATE:
            torch.testing.assert_close(getattr(found, field), getattr(want, field),
                                       rtol=1e-12, atol=1e-14, msg=field)
        _tables_close(found.result(), want.result(), rtol=1e-12, atol=1e-14)


def test_the_kernel_agrees_with_the_float32_torch_path():
    found, before = _fed(kernel=True), _fed(kernel=False)
    for field in STATE:
        torch.testing.assert_close(getattr(found, field), getattr(before, field), rtol=1e-5,
                                   atol=1e-7, msg=field)
    _tables_close(found.result(), before.result(), rtol=1e-5, atol=1e-7)


def test_known_answers_of_a_hand_built_row():
    """One sentence [CLS] a b c [SEP] (n = 5), one head, values ``v_j = e_j`` (so a set's
    product is its kept weights): row i attends 0.5 to itself, 0.3 to i+2 (or i-2), 0.2 to
    [CLS]. Windows (1, 2): window 1 keeps p_ii, window 2 keeps p_ii + 0.3 (and [CLS] where it
    is within 2). Each output error is ``||p - kept / mass||`` over the rows, by hand."""
    from tests.test_sparse import CLS, SEP

    n = 5
    ids = torch.tensor([[CLS, 1001, 1002, 1003, SEP]])
    P = torch.zeros(n, n)
    for i in range(n):
        other = i + 2 if i + 2 < n else i - 2
        P[i, i] += 0.5
        P[i, other] += 0.3
        P[i, 0] += 0.2
    values = torch.eye(n)[None, None, :, None, :]  # [layer, batch, key, kv_head, d = n]
    analyzer = SparseCoverage(1, 1, windows=(1, 2), n_global=0)
    analyzer.update(_batch(ids, [0]), _cache(P[None, None, None], values))
    want_errors = torch.zeros(2 * 2 + 2, dtype=torch.float64)
    P64 = P.double()
    dist = (torch.arange(n)[:, None] - torch.arange(n)[None, :]).abs()
    is_global = torch.tensor([True, False, False, False, True])  # [CLS], [SEP]
    sets = [dist <= 1, dist <= 2, (dist <= 1) | is_global, (dist <= 2) | is_global,
            is_global.expand(n, n)]
    for k, keep in enumerate(sets):
        kept = P64 * keep
        approx = kept / kept.sum(-1, keepdim=True)
        want_errors[k] = (P64 - approx).norm() / P64.norm()
    got = analyzer.errors[0, 0]
    torch.testing.assert_close(got[:5], want_errors[:5], rtol=1e-12, atol=1e-15)
    by_distance = torch.zeros(n, dtype=torch.float64)
    by_distance.index_add_(0, dist.flatten(), P64.flatten())
    torch.testing.assert_close(analyzer.by_distance[0, 0, :n], by_distance, rtol=0,
                               atol=1e-15)
    assert float(analyzer.masses[0, 0, 0]) == pytest.approx(float((P64 * is_global).sum()),
                                                            abs=1e-15)


def test_split_between_threads_gives_the_same_bits():
    from attnlens.stream import threads

    results, split = [], threads.run_split
    for count in (1, 2, 3):
        try:
            sparse.run_split = lambda work, n, _c=count: split(work, n, threads=_c)
            results.append(_fed(lengths=(17, 30, 5, 11)))
        finally:
            sparse.run_split = split
    for other in results[1:]:
        for field in STATE:
            assert torch.equal(getattr(results[0], field), getattr(other, field)), field


def test_wrong_sizes_are_refused():
    kernel = sparse._sparse_kernel
    f32, u8, f64 = np.float32, np.uint8, np.float64
    good = dict(pattern=np.zeros((1, 1, 3, 3), f32), values=np.zeros((1, 3, 1, 2), f32),
                rows=np.ones((1, 3), u8), is_global=np.zeros((1, 3), u8),
                bigbird=np.zeros((1, 3, 3), u8), windows=np.array([1], np.int32),
                picked=np.zeros(1, np.int64))
    outs = [np.zeros(s, f64) for s in ((1, 1, 4), (1, 1), (1, 1, 3), (1, 1, 3), (1, 1, 2))]

    def call(**change):
        args = {**good, **change}
        kernel.fold(*args.values(), 1, 1, 1, 3, 1, 2, 4, 0, 1, *outs)

    call()  # the good call runs
    with pytest.raises(ValueError, match="pattern holds"):
        call(pattern=np.zeros((1, 1, 3, 2), f32))
    with pytest.raises(ValueError, match="picked holds 0 bytes"):
        call(picked=np.zeros(0, np.int64))
    with pytest.raises(ValueError, match="picked holds a sentence outside"):
        call(picked=np.full(1, -1, np.int64))
    with pytest.raises(ValueError, match="windows must ascend"):
        call(windows=np.array([2, 1], np.int32))


BUILDS = LEVEL_BUILDS


@needs_builds
@pytest.mark.parametrize("name", list(BUILDS))
def test_each_build_gives_the_installed_bits(tmp_path, name):
    """Each x86-64 level built alone (``KERNEL_NO_CLONES``; the installed build holds all
    three and runs the CPU's): no contraction and no reassociation, so the same bits."""
    flags, needs = BUILDS[name]
    skip_unless_cpu_has(needs)
    module = build_kernel(SOURCE, tmp_path, flags)
    installed = _fed(lengths=(33, 12, 7))
    saved = sparse._sparse_kernel
    try:
        sparse._sparse_kernel = module
        built = _fed(lengths=(33, 12, 7))
    finally:
        sparse._sparse_kernel = saved
    for field in STATE:
        assert torch.equal(getattr(installed, field), getattr(built, field)), field


def test_the_held_layers_go_to_the_kernel_back_to_back_with_each_layers_bits():
    """ops39: the kernel reads the held layers once they are all there (the batch's end or
    the budget), one call per layer on its tensors where they lie, back to back (a call per
    layer as it came ran right after large torch operations, whose threads then spin beside
    the kernel's); the bits are those of a call per layer as it comes (a budget of 1)."""
    from attnlens.stream.held_layers import HeldLayers

    torch.manual_seed(3)
    ids, patterns = _padded_patterns(40, (40, 23, 9), n_layers=3)
    values = torch.randn(3, 3, 40, 2, 6)
    found, each = SparseCoverage(3, 4), SparseCoverage(3, 4)
    each._held = HeldLayers(1)  # folded as each layer comes
    read = []
    fold, update_block = found._kernel_fold, found.update_block

    def fed(*args):
        update_block(*args)
        assert not read  # no call while the layers come

    found._kernel_fold = lambda p, v, block: read.append(p) or fold(p, v, block)
    found.update_block = fed
    for analyzer in (found, each):
        analyzer.update(_batch(ids, [0, 1, 2]), _cache(patterns, values))
    assert [p.data_ptr() for p in read] == [patterns[i].data_ptr() for i in range(3)]
    for field in STATE:
        assert torch.equal(getattr(found, field), getattr(each, field)), field


def test_a_sample_is_read_where_it_lies_with_the_bits_of_a_copy(monkeypatch):
    """pass40: with ``max_sentences`` the kernel reads the sampled sentences of the whole
    batch's patterns and values (``picked``), no ``index_select`` copy of them first, and
    gives the bits of the same sentences (same corpus indices) fed alone."""
    torch.manual_seed(4)
    ids, patterns = _padded_patterns(40, (40, 23, 9, 31), n_layers=2)
    values = torch.randn(2, 4, 40, 2, 6)
    batch = _batch(ids, [0, 1, 2, 3])
    batch.extra["corpus_size"] = 4
    copied = []
    monkeypatch.setattr(torch.Tensor, "index_select",
                        lambda self, *a, _f=torch.Tensor.index_select: (
                            copied.append(self.shape), _f(self, *a))[1])
    sampled = SparseCoverage(2, 4, max_sentences=2)  # corpus indices 0 and 2
    sampled.update(batch, _cache(patterns, values))
    assert copied == []
    monkeypatch.undo()
    rows = torch.tensor([0, 2])
    alone = SparseCoverage(2, 4)
    alone.update(_batch(ids[rows], [0, 2]), _cache(patterns[:, rows], values[:, rows]))
    for field in STATE:
        assert torch.equal(getattr(sampled, field), getattr(alone, field)), field
    assert sampled.sentences == alone.sentences == 2
