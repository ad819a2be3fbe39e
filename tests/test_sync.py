"""No host read of tensor data (a GPU synchronisation each) inside analyzers' per-layer work.

The CPU check counts, with a TorchFunctionMode, every call that needs tensor values on the
host (``.item()``, ``.cpu()``, ``.tolist()``, ``bool``/``int`` of a tensor, ``nonzero``, ...)
made inside ``update_layer`` of every analyzer `attnlens analyze` runs: on a GPU each would
stall the device once per layer. Per-batch work (``begin_batch``/``end_batch``, whole-batch
analyzers) may read the host once per batch. tests/test_cuda.py counts real CUDA
synchronisations where a GPU is present.
"""

from __future__ import annotations

import pytest
import torch

from attnlens.data.corpus import load_corpus
from attnlens.report.analyze import default_sections
from attnlens.stream.runner import run_analyzers
from tests.sync_utils import count_host_reads


def analyzer_params():
    return [pytest.param(i, id=f"section{i}") for i in range(len(default_sections()))]


@pytest.fixture(autouse=True)
def torch_paths(monkeypatch):
    """The torch paths a GPU runs: the CPU's C kernels of pattern asymmetry, sparse coverage,
    the linear-attention view, word pooling (with the syntactic and rare-word heads) and head
    statistics hand their buffers to C with ``.numpy()`` (zero-copy views of CPU tensors, no
    synchronisation; they never run on a GPU), which this check would count as host reads."""
    import attnlens.data.words as words
    import attnlens.measures.asymmetry.pattern_asymmetry as asymmetry
    import attnlens.measures.heads.head_stats as head_stats
    import attnlens.measures.linear.linear_attention as linear
    import attnlens.measures.sparse.sparse as sparse

    monkeypatch.setattr(asymmetry, "_asymmetry_kernel", None)
    monkeypatch.setattr(sparse, "_sparse_kernel", None)
    monkeypatch.setattr(linear, "_linear_kernel", None)
    monkeypatch.setattr(words, "_words_kernel", None)
    monkeypatch.setattr(head_stats, "_stats_kernel", None)


@pytest.fixture(scope="module")
def batches(minilm):
    _, tokenizer = minilm
    corpus = load_corpus(text=None, treebank=None)
    return corpus.batches(tokenizer, batch_size=8, max_length=64)[:2]


@pytest.mark.parametrize("section", analyzer_params())
def test_update_layer_reads_nothing_back_to_the_host(minilm, batches, section):
    model, tokenizer = minilm
    analyzers = default_sections()[section].analyzers(model, tokenizer)
    with count_host_reads(analyzers) as counts:
        run_analyzers(model, batches, analyzers, show_progress=False)
    assert dict(counts) == {}, "host reads per layer (GPU synchronisations): " + str(counts)


@pytest.mark.parametrize("section", analyzer_params())
def test_query_blocks_read_nothing_back_to_the_host(minilm, batches, section):
    """The same with every pattern fed in query blocks of 5 rows (a long input's path): no
    host read per block or per layer (a whole-matrix analyzer gets its blocks put together
    at the layer's end, below the whole-matrix limit)."""
    from attnlens.model.query_blocks import QueryBlocks

    model, tokenizer = minilm
    analyzers = default_sections()[section].analyzers(model, tokenizer)
    before = model.query_blocks
    model.set_query_blocks(QueryBlocks(rows=5))
    try:
        with count_host_reads(analyzers) as counts:
            run_analyzers(model, batches, analyzers, show_progress=False)
    finally:
        model.set_query_blocks(before)
    assert dict(counts) == {}, "host reads per block or layer: " + str(counts)


def test_the_counter_sees_host_reads():
    class Reads:
        layerwise = True

        def update_layer(self, batch, layer, cache):
            x = torch.ones(3)
            return x.sum().item(), x.tolist(), bool(x[0] > 0), x.cpu()

    reader = Reads()
    with count_host_reads([reader]) as counts:
        reader.update_layer(None, 0, None)
    assert counts == {"Reads.item": 1, "Reads.tolist": 1, "Reads.__bool__": 1, "Reads.cpu": 1}
