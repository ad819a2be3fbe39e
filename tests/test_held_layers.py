"""Layers held and folded together as more heads (stream.held_layers) give the states of one
call per layer: the same per-head arithmetic, the same sums."""

from __future__ import annotations

import pytest
import torch

from attnlens.data.text import sample_sentences, text_batches
from attnlens.measures.linear.linear_attention import LinearAttentionView
from attnlens.measures.sparse.sparse import SparseCoverage
from attnlens.stream.held_layers import HeldLayers, add_to_layers
from attnlens.stream.runner import run_analyzers
from tests.fixtures import tiny_batches

ANALYZERS = {"linear": (LinearAttentionView, {"per_batch": 3}),
             "sparse": (SparseCoverage, {"per_batch": 3, "windows": (1, 2, 4)})}


def test_take_stacks_runs_of_equal_shapes_along_the_given_axes():
    held = HeldLayers(budget=100)
    a, b = torch.zeros(2, 3, 4), torch.ones(2, 3, 4)
    c = torch.full((2, 5, 4), 2.0)  # another head count: a run of its own
    assert not held.add(0, a, a[:, :1])
    assert not held.add(1, b, b[:, :1])
    assert held.add(2, c, c[:, :1])  # 24 + 6 + 24 + 6 + 40 + 8 elements >= 100
    runs = held.take(dims=(1, 1))
    assert [layers for layers, _ in runs] == [[0, 1], [2]]
    (first, first_small), (second, _) = (tensors for _, tensors in runs)
    assert torch.equal(first, torch.cat([a, b], 1)) and first_small.shape == (2, 2, 4)
    assert second is c  # one layer: no copy
    assert not held and held.elements == 0


def test_take_apart_gives_the_same_runs_with_each_layers_own_tensors():
    """ops39: the runs ``take`` concatenates, each layer's tensors as held (no copy)."""
    held = HeldLayers(budget=100)
    a, b, c = torch.zeros(2, 3, 4), torch.ones(2, 3, 4), torch.full((2, 5, 4), 2.0)
    for layer, x in enumerate((a, b, c)):
        held.add(layer, x, x[:, :1])
    runs = held.take_apart()
    assert [layers for layers, _ in runs] == [[0, 1], [2]]
    firsts = [[t for t, _ in items] for _, items in runs]
    assert [[id(t) for t in run] for run in firsts] == [[id(a), id(b)], [id(c)]]
    assert all(small.shape[1] == 1 for _, items in runs for _, small in items)
    assert not held and held.elements == 0


@pytest.mark.parametrize("layers", [[1, 2], [0, 2]])
def test_add_to_layers_adds_each_layer_over_the_heads_it_has(layers):
    target = torch.zeros(3, 4, 2)  # [layer, head, measure]
    x = torch.arange(12.0).reshape(2, 3, 2)  # two layers of 3 heads (a pruned model)
    add_to_layers(target, layers, x)
    want = torch.zeros(3, 4, 2)
    for i, layer in enumerate(layers):
        want[layer, :3] += x[i]
    assert torch.equal(target, want)


def one_layer_at_a_time(analyzer):
    analyzer._held = HeldLayers(budget=1)  # folds each layer as it comes (the path before)
    return analyzer


def assert_states_equal(a, b) -> None:
    sa, sb = a.state_dict()["state"], b.state_dict()["state"]
    assert sa.keys() == sb.keys()
    for key in sa:
        if isinstance(sa[key], torch.Tensor):
            # the same per-head products summed in the same order: equal (measured 0.0)
            assert torch.equal(sa[key], sb[key]), key
        else:
            assert sa[key] == sb[key], key


@pytest.mark.parametrize("kind", sorted(ANALYZERS))
def test_held_layers_equal_one_layer_at_a_time_on_grouped_query_heads(kind, tiny_gqa):
    cls, options = ANALYZERS[kind]
    batches = tiny_batches([[5, 9, 3, 12], [20, 7], [4, 4, 6]], seed=2, cls_id=1)
    held = cls.for_model(tiny_gqa, **options)
    alone = one_layer_at_a_time(cls.for_model(tiny_gqa, **options))
    run_analyzers(tiny_gqa, batches, [held, alone], show_progress=False)
    assert_states_equal(held, alone)


@pytest.mark.parametrize("kind", sorted(ANALYZERS))
def test_held_layers_equal_one_layer_at_a_time_on_minilm(kind, minilm):
    model, tokenizer = minilm
    batches = text_batches(tokenizer, sample_sentences()[:24], batch_size=8, max_length=128)
    cls, options = ANALYZERS[kind]
    held = cls.for_model(model, **options)
    alone = one_layer_at_a_time(cls.for_model(model, **options))
    run_analyzers(model, batches, [held, alone], show_progress=False)
    assert_states_equal(held, alone)
