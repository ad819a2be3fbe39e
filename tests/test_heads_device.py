"""Head-role analyzers on a CUDA device: the same tables as on the CPU, and no host-device
synchronisation inside ``update_layer`` (skipped where no CUDA device exists)."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from attnlens.data.rarity import WordRarity
from attnlens.data.words import WordAttentionContext
from attnlens.measures.heads.behaviour import HeadBehaviour
from attnlens.measures.heads.clustering import HeadClustering
from attnlens.measures.heads.positional import PositionalHeads
from attnlens.measures.heads.rare_words import RareWordHeads
from attnlens.measures.heads.syntactic import SyntacticHeads
from attnlens.model import HookedTransformer, TransformerConfig
from attnlens.stream.runner import run_analyzers
from tests.heads_planted import make_batch, planted_treebank

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def _analyzers(model):
    words = WordAttentionContext()
    rarity = WordRarity.from_counts({f"w{i}": 100 - 7 * i for i in range(11)})
    return [
        SyntacticHeads.for_model(model, min_examples=5, words=words),
        PositionalHeads.for_model(model),
        RareWordHeads.for_model(model, rarity=rarity, words=words),
        HeadBehaviour.for_model(model),
        HeadClustering.for_model(model),
    ]


def _tables(device: str, sync_check: bool):
    torch.manual_seed(0)
    cfg = TransformerConfig(d_model=32, n_heads=4, n_layers=3, d_mlp=64, vocab_size=1200,
                            n_ctx=16)
    model = HookedTransformer(cfg).eval().to(device)
    sentences, _ = planted_treebank(40, 10, 0.3, 0.6)
    batches = [make_batch(sentences[i : i + 8], i) for i in range(0, 40, 8)]
    analyzers = _analyzers(model)
    if sync_check:
        for analyzer in analyzers:
            update = analyzer.update_layer

            def checked(batch, layer, cache, update=update):
                torch.cuda.set_sync_debug_mode("error")  # any implicit sync raises
                try:
                    update(batch, layer, cache)
                finally:
                    torch.cuda.set_sync_debug_mode("default")

            analyzer.update_layer = checked
    run_analyzers(model, batches, analyzers, show_progress=False)
    tables = {}
    for analyzer in analyzers:
        tables.update(analyzer.result())
    return tables


def test_cuda_tables_match_the_cpu_and_update_layer_never_synchronises():
    on_gpu = _tables("cuda", sync_check=True)
    on_cpu = _tables("cpu", sync_check=False)
    for name, table in on_cpu.items():
        # fp32 attention from other kernels: maxima may flip only on exact ties, which these
        # random patterns do not have; float sums agree to fp32 rounding over <= 1e4 terms
        pd.testing.assert_frame_equal(on_gpu[name], table, obj=name, rtol=1e-4, atol=1e-6)
