"""A structurally pruned model (``model.head_ids``): the language-model heads' tables, role
tests, sink rows and summary name every head by its original number and every key/value head
by its original group, while masks and ablations still address positions."""

from __future__ import annotations

import pytest
import torch

from attnlens.measures.lm_heads.run import LmHeads
from attnlens.measures.lm_heads.section import notes
from attnlens.measures.lm_heads.settings import LmHeadsSettings
from attnlens.measures.pruning import prune_heads
from attnlens.model.transformer import HookedTransformer
from attnlens.stats.bootstrap import Inference
from attnlens.stream.runner import run_analyzers
from tests.lm_heads_toys import random_batches, toy_config, toy_model, toy_tokenizer

INFERENCE = Inference(bootstrap=200, seed=0)
SETTINGS = dict(probe_sequences=40, probe_length=10, window=4, sink_tokens=1, controls=2)
HEAD_TABLES = ("probe_scores", "streaming_heads")


def _measure(model: HookedTransformer) -> tuple[LmHeads, object]:
    lm = LmHeads(LmHeadsSettings(**SETTINGS).check(), INFERENCE)
    analyzers = lm.corpus_analyzers(model, toy_tokenizer())
    run_analyzers(model, random_batches(), analyzers, show_progress=False)
    return lm, lm.compute(model)


def _pairs(table) -> set[tuple[int, int]]:
    return {(int(a), int(b)) for a, b in zip(table["layer"], table["head"], strict=True)}


@torch.no_grad()
def _sink_head_moved_to_h3() -> HookedTransformer:
    """The toy model with layer 0's heads 1 and 3 swapped: the sink head becomes L0H3 (a
    layer sums its heads, so the model computes the same function)."""
    model = toy_model()
    for param in model.blocks[0].attn.parameters():  # [head, ...]
        param[[1, 3]] = param[[3, 1]].clone()
    return model


@pytest.fixture(scope="module")
def pruned_and_full():
    full = _sink_head_moved_to_h3()
    # Remove L0H1 (now a random head) and L1H2: L0H3, the sink, is the 3rd head of layer 0.
    mask = torch.tensor([[1.0, 0, 1, 1], [1, 1, 0, 1]])
    pruned = prune_heads(full, mask)
    assert pruned.head_ids == [[0, 2, 3], [0, 1, 3]]
    return _measure(pruned), _measure(full)


def test_tables_name_heads_by_their_original_numbers(pruned_and_full) -> None:
    (_, result), _ = pruned_and_full
    kept = {(0, 0), (0, 2), (0, 3), (1, 0), (1, 1), (1, 3)}
    for name in HEAD_TABLES:
        table = result.tables[name]
        assert _pairs(table) == kept, name
        assert (table["kv_head"] == table["head"]).all(), name  # MHA: one head per group
    assert _pairs(result.role_tests) == kept
    assert _pairs(result.sink_rows) == kept


def test_roles_and_summary_follow_the_numbers(pruned_and_full) -> None:
    (lm, result), (_, full) = pruned_and_full
    tests = result.role_tests
    passed = tests[tests["passed"].astype(bool)]
    found = {role: _pairs(passed[passed["role"] == role]) for role in set(passed["role"])}
    assert found["sink"] == {(0, 3)}
    assert found["previous_token"] == {(0, 0)} and found["induction"] == {(1, 0)}
    assert any("L0H3" in line for line in notes(result, lm) if line.startswith("Sink heads"))
    # Layer 0 reads the same embeddings in both models: the sink head's score is the same.
    sinks = [r.sink_rows.set_index(["layer", "head"])["value"] for r in (result, full)]
    # fp32 softmax of the same scores; only the heads beside it differ: float32 rounding
    assert abs(sinks[0][(0, 3)] - sinks[1][(0, 3)]) < 1e-6
    # the ablations addressed positions: the induction head (L1H0) still breaks the repeat
    ablation = result.tables["role_ablation"].set_index(["role", "metric"])
    row = ablation.loc[("induction", "second_repeat_loss")]
    assert row["ablated"] > row["random_high"]


@torch.no_grad()
def test_grouped_query_heads_keep_their_group_numbers() -> None:
    torch.manual_seed(0)
    model = HookedTransformer(toy_config(n_heads=4, n_kv_heads=2)).eval()
    for param in model.parameters():
        param.normal_(0.0, 0.5)
    # Layer 1 loses its first group (query heads 0 and 1, key/value head 0).
    pruned = prune_heads(model, torch.tensor([[1.0, 1, 1, 1], [0, 0, 1, 1]]))
    _, result = _measure(pruned)
    for name in HEAD_TABLES:
        table = result.tables[name]
        layer1 = table[table["layer"] == 1]
        assert set(layer1["head"]) == {2, 3}, name
        assert set(layer1["kv_head"]) == {1}, name
        assert (table["kv_head"] == table["head"] // 2).all(), name
