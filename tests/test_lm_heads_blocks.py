"""The language-model probes on query blocks (issue 27): previous-token, duplicate-token and
induction probes, retrieval, sinks, sink keys and the streaming error accumulate over blocks
of query rows, so they run above --whole-matrix-limit, and equal the whole-matrix result.

Tolerance: each block holds exactly those rows of the pattern; the per-sequence sums (at
most a few hundred float32 terms of size <= 1) and the squared errors (float64) add the
rows in another order, so tables agree within float32 rounding: rtol 1e-6, atol 1e-7 on
shares, means and errors (1e-6 relative of sums of <= 40 terms near 1: well above their
rounding of ~1e-7, far below any real difference).
"""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from attnlens.model.query_blocks import QueryBlocks
from attnlens.stream.runner import run_analyzers
from tests.lm_heads_toys import toy_model
from tests.sync_utils import count_host_reads
from tests.test_lm_heads_states import CASES

BLOCK_CASES = [case for case in CASES if case != "corpus_sample"]  # reads no pattern


def tables(analyzer) -> dict[str, pd.DataFrame]:
    return {name: t.sort_values(list(t.columns[:4])).reset_index(drop=True)
            for name, t in analyzer.result().items()}


def run(model, case: str, blocks: QueryBlocks):
    make, _, data = CASES[case]
    analyzer = make(model)
    model.set_query_blocks(blocks)
    try:
        run_analyzers(model, data(), [analyzer], show_progress=False)
    finally:
        model.set_query_blocks(QueryBlocks())
    return analyzer


@pytest.fixture(scope="module")
def model():
    return toy_model()


@pytest.mark.parametrize("rows", [1, 3, 7])
@pytest.mark.parametrize("case", BLOCK_CASES)
def test_lm_analyzers_fed_blocks_equal_whole_matrices(model, case, rows):
    whole = run(model, case, QueryBlocks(rows=10_000))
    blocked = run(model, case, QueryBlocks(rows=rows))
    assert blocked.reads_blocks
    mine, reference = tables(blocked), tables(whole)
    assert mine.keys() == reference.keys()
    for name in mine:
        pd.testing.assert_frame_equal(mine[name], reference[name], check_exact=False,
                                      rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("case", BLOCK_CASES)
def test_lm_analyzers_run_above_the_whole_matrix_limit(model, case):
    """Inputs longer than --whole-matrix-limit are read in blocks, not refused, and give the
    whole-matrix tables."""
    whole = run(model, case, QueryBlocks(rows=10_000))
    long = run(model, case, QueryBlocks(rows=4, whole_matrix_limit=2))
    for name, table in tables(long).items():
        pd.testing.assert_frame_equal(table, tables(whole)[name], check_exact=False,
                                      rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("case", BLOCK_CASES)
def test_lm_analyzers_read_nothing_back_to_the_host_per_block(model, case):
    make, _, data = CASES[case]
    analyzer = make(model)
    model.set_query_blocks(QueryBlocks(rows=3))
    try:
        with count_host_reads([analyzer]) as counts:
            run_analyzers(model, data(), [analyzer], show_progress=False)
    finally:
        model.set_query_blocks(QueryBlocks())
    assert dict(counts) == {}, "host reads per block or layer: " + str(counts)


@pytest.mark.parametrize("case", BLOCK_CASES)
def test_lm_analyzers_on_hf_blocks_equal_whole_matrices(case):
    """The same through the hf backend's blocks (a tiny random Llama, grouped keys)."""
    from attnlens.backends.hf.model import HFAttentionModel
    from tests.hf_utils import tiny_hf

    hf = tiny_hf("llama", vocab_size=128)
    model = HFAttentionModel(hf, {"architecture": type(hf).__name__})
    whole = run(model, case, QueryBlocks(rows=10_000))
    blocked = run(model, case, QueryBlocks(rows=3, whole_matrix_limit=2))
    for name, table in tables(blocked).items():
        pd.testing.assert_frame_equal(table, tables(whole)[name], check_exact=False,
                                      rtol=1e-6, atol=1e-7)


def test_restriction_rows_are_rows_of_the_whole_restriction():
    from attnlens.measures.lm_heads.streaming import restriction

    real = torch.ones(2, 11, dtype=torch.bool)
    real[1, 8:] = False
    for causal in (True, False):
        whole = restriction(real, 2, 3, causal)
        for start in range(0, 11, 4):
            rows = torch.arange(start, min(start + 4, 11))
            assert torch.equal(restriction(real, 2, 3, causal, rows), whole[:, rows])
