"""Sparse coverage in float32 against its float64 reference (issue 29, sparse32).

sparse32 changed how the analyzer rounds in float32, not what it measures: each output error
is one ``vector_norm`` of ``full - product / mass`` (was: squared, then summed), each
window's kept mass is read from the rows' mass at each distance (was: a masked row sum), and
the window+global product adds the global columns outside the window in one ``baddbmm``.
The reference is the same analyzer with ``compute_dtype = torch.float64`` (every
per-sentence product, mass and norm in float64 from the same float32 activations).

Measured on MiniLM over UD EWT dev (all 2,001 sentences, every sentence read, token-budget
batches of 1,024), the ``sparse_coverage`` values: this path against the float64 reference
at most 2.0e-8 absolute (the path before sparse32: 1.5e-8), this path against the old one
at most 1.5e-8; the largest relative differences to float64, 2.3e-4 (this path) and 3.0e-4
(old), are on output errors of ~5e-4 (the local head L0H2: a difference of two nearly equal
float32 outputs, whose rounding is absolute). Window curves at most 3.0e-9 absolute, head
measures 1.7e-9; the ``window90``, ``window90_exact`` and ``window90_global`` integers are
identical to the old path's and to float64's.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnlens.measures.sparse.sparse import SparseCoverage
from tests.conftest import shared_file
from tests.test_sparse import CLS, PAD, SEP, _batch, _cache


def _reference(**options) -> SparseCoverage:
    """The analyzer with every per-sentence quantity in float64."""
    analyzer = SparseCoverage(**options)
    analyzer.compute_dtype = torch.float64
    return analyzer


def _tables_close(found: dict, want: dict, rtol: float, atol: float) -> None:
    for name, table in want.items():
        got = found[name]
        assert list(got.columns) == list(table.columns), name
        for column in table.columns:
            if table[column].dtype.kind == "f":
                np.testing.assert_allclose(got[column].to_numpy(float),
                                           table[column].to_numpy(float), rtol=rtol,
                                           atol=atol, err_msg=f"{name}.{column}")
            else:
                assert got[column].tolist() == table[column].tolist(), f"{name}.{column}"


def _padded_patterns(n: int, lengths: tuple[int, ...], n_layers: int
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids ``[sentence, n]`` (CLS ... SEP, then padding) of the given lengths and random
    softmax patterns ``[layer, sentence, 4 heads, n, n]`` over their real keys."""
    ids = torch.full((len(lengths), n), PAD)
    for b, m in enumerate(lengths):
        ids[b, :m] = torch.randint(1000, 2000, (m,))
        ids[b, 0], ids[b, m - 1] = CLS, SEP
    mask = ids != PAD
    scores = 3 * torch.randn(n_layers, len(lengths), 4, n, n)
    return ids, torch.softmax(
        scores.masked_fill(~mask[None, :, None, None, :], -torch.inf), -1)


def test_float32_path_agrees_with_its_float64_reference_on_a_padded_batch(monkeypatch):
    """Random softmax patterns of 3 padded sentences (lengths 40, 23, 9: every window of
    1..16 is a strict subset somewhere, some sentences shorter than the widest windows),
    grouped-query values. Masses are float32 sums of at most 40 terms and errors ratios of
    float32 norms of 40 x 6 entries: both within ~40 x 6e-8 = 2.4e-6 relative of float64;
    rtol 1e-5 leaves room for other kernel sets, atol 1e-7 covers the errors near 0 of rows
    the windows almost keep whole. The torch path (the GPU's; the CPU's C kernel:
    tests/test_sparse_kernel.py)."""
    import attnlens.measures.sparse.sparse as sparse

    monkeypatch.setattr(sparse, "_sparse_kernel", None)
    torch.manual_seed(3)
    n = 40
    ids, patterns = _padded_patterns(n, (40, 23, 9), n_layers=2)
    batch = _batch(ids, [0, 1, 2])
    values = torch.randn(2, 3, n, 2, 6)  # [layer, batch, key_pos, kv_head, d_head]
    found, want = SparseCoverage(2, 4), _reference(n_layers=2, n_heads=4)
    for analyzer in (found, want):
        analyzer.update(batch, _cache(patterns, values))
    for field in ("by_distance", "nonglobal_by_distance", "masses", "errors"):
        torch.testing.assert_close(getattr(found, field), getattr(want, field), rtol=1e-5,
                                   atol=1e-7)
    _tables_close(found.result(), want.result(), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("path", ["kernel", "torch"])
def test_minilm_on_ewt_dev_agrees_with_the_float64_reference(minilm, monkeypatch, path):
    """The first 160 UD EWT dev sentences, every one read, token-budget batches as
    ``analyze`` makes them. Measured there: 7.0e-8 absolute on ``sparse_coverage`` (the
    output errors, averaged over fewer sentences than the 2.0e-8 of all 2,001, module
    docstring), 1.2e-8 on the window curves. The values are averages of float32 masses
    (sums of at most ~70 entries, relative ~4e-6 at worst) and of output errors whose
    float32 rounding is absolute, ~eps x ||P V|| per row over ||P V||: atol 1e-6 bounds both
    with a 14x margin over what was measured (rtol 1e-5 for the masses near 1); the
    ``window90*`` integers must be identical (a flip needs a window mass within ~1e-8 of
    0.9). Both the float32 torch path and the C kernel (sums in float64: well inside)."""
    import attnlens.measures.sparse.sparse as sparse

    if path == "torch":
        monkeypatch.setattr(sparse, "_sparse_kernel", None)
    elif sparse._sparse_kernel is None:
        pytest.skip("the sparse C kernel is not built")
    from attnlens.data.corpus import load_corpus
    from attnlens.data.text import REPORT_BATCH_TOKENS
    from attnlens.stream.runner import run_analyzers

    model, tokenizer = minilm
    corpus = load_corpus(treebank=str(shared_file("ud-ewt/en_ewt-ud-dev.conllu")),
                         max_sentences=160)
    batches = corpus.batches(tokenizer, 64, 128, REPORT_BATCH_TOKENS)
    found = SparseCoverage.for_model(model)
    want = _reference(**SparseCoverage.model_options(model))
    run_analyzers(model, batches, [found, want], show_progress=False)
    assert found.sentences == want.sentences == 160
    _tables_close(found.result(), want.result(), rtol=1e-5, atol=1e-6)


def test_chunks_of_heads_change_no_number(monkeypatch):
    """``_fold_rows`` runs its heads in chunks of ``CHUNK_ELEMENTS`` pattern entries: every
    result is per sentence and head, so one head at a time gives the same masses bit for bit
    as all heads at once (held layers, grouped-query values, padded sentences), and the same
    output errors to float32 rounding: their products are batched matrix products, which
    an AMD EPYC (AVX2, MKL's zen kernels) rounded otherwise for another number of heads
    (a Xeon did not). The torch path's property (the C kernel, where built, folds whole
    patterns without chunks)."""
    import attnlens.measures.sparse.sparse as sparse

    monkeypatch.setattr(sparse, "_sparse_kernel", None)
    torch.manual_seed(4)
    n = 21
    ids, patterns = _padded_patterns(n, (21, 12, 5), n_layers=3)
    values = torch.randn(3, 3, n, 2, 5)
    states = []
    for chunk in (10**9, 1):
        monkeypatch.setattr(sparse, "CHUNK_ELEMENTS", chunk)
        analyzer = SparseCoverage(3, 4, windows=(1, 2, 4, 8, 16))
        analyzer.update(_batch(ids, [0, 1, 2]), _cache(patterns, values))
        states.append(analyzer)
    for field in ("by_distance", "nonglobal_by_distance", "masses"):
        assert torch.equal(getattr(states[0], field), getattr(states[1], field)), field
    torch.testing.assert_close(states[1].errors, states[0].errors, rtol=1e-5, atol=1e-7)
