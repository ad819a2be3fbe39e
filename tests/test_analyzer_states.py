"""State that travels, for every analyzer converted to the v2 protocol.

For each: the state round-trips through files (safetensors + JSON), a merge refuses another
analyzer, other settings or another model, and the merge of two halves equals one pass.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest
import torch

from attnlens.data.batch import Batch
from attnlens.errors import ConfigError
from attnlens.measures.asymmetry.pattern_asymmetry import PatternAsymmetry
from attnlens.measures.collapse.paths import PathCollapse
from attnlens.measures.collapse.residual import ResidualCollapse
from attnlens.measures.collapse.variant_collapse import VariantCollapse
from attnlens.measures.heads.examples import HeadExamples
from attnlens.measures.heads.head_stats import MEASURES, HeadStats
from attnlens.measures.linear.linear_attention import LinearAttentionView
from attnlens.measures.rollout.flow import FlowAnalyzer
from attnlens.measures.rollout.rollout import RolloutAnalyzer
from attnlens.measures.sparse.sparse import SparseCoverage
from attnlens.model import HookedTransformer
from attnlens.stream.base import Analyzer, model_fingerprint
from attnlens.stream.runner import run_analyzers
from attnlens.stream.state import load_state, save_state, split_state
from tests.fixtures import plain_tiny_model, tiny_batches


def tiny_model(seed: int = 0, **overrides) -> HookedTransformer:
    return plain_tiny_model(seed, **{"n_layers": 3, **overrides})


def batches() -> list[Batch]:
    """Three batches; corpus indices as Corpus.batches gives them (BigBird's random keys are
    seeded by them)."""
    return tiny_batches([[5, 7, 7], [3, 9], [8, 8, 4, 6]], seed=1, vocab=50, low=3, cls_id=1,
                        index=True)


# Each case builds an analyzer for a model; "other" changes one setting.
CASES = {
    "pattern_asymmetry": (lambda m: PatternAsymmetry.for_model(m),
                          lambda m: PatternAsymmetry.for_model(m, factor=3.0)),
    "pattern_asymmetry_pre_norm": (lambda m: PatternAsymmetry.for_model(m),
                                   lambda m: PatternAsymmetry.for_model(m, baseline=False)),
    "residual_collapse": (lambda m: ResidualCollapse.for_model(m),
                          lambda m: ResidualCollapse.for_model(m, variant="san")),
    "variant_collapse": (lambda m: VariantCollapse.for_model(m, variants="san,full"),
                         lambda m: VariantCollapse.for_model(m, variants="san")),
    "path_collapse": (lambda m: PathCollapse.for_model(m, n_paths=5),
                      lambda m: PathCollapse.for_model(m, n_paths=6)),
    "head_stats": (lambda m: HeadStats(m.n_layers, 4, {1}, {2}, {7}, m.heads_per_layer),
                   lambda m: HeadStats(m.n_layers, 4, {1}, {2}, {8}, m.heads_per_layer)),
    "head_examples": (lambda m: HeadExamples(m.n_layers, 4, {1}, {2}, {7}, MEASURES,
                                             m.heads_per_layer, k=2),
                      lambda m: HeadExamples(m.n_layers, 4, {1}, {2}, {7}, MEASURES,
                                             m.heads_per_layer, k=3)),
    "rollout": (lambda m: RolloutAnalyzer.for_model(m),
                lambda m: RolloutAnalyzer.for_model(m, residual=0.3)),
    # max_tokens 8: the 9-token sentence is skipped (listed), the others kept whole
    "flow": (lambda m: FlowAnalyzer.for_model(m, max_tokens=8),
             lambda m: FlowAnalyzer.for_model(m, max_tokens=8, fusion="max")),
    "sparse": (lambda m: SparseCoverage.for_model(m, windows=(1, 2)),
               lambda m: SparseCoverage.for_model(m, windows=(1, 2), seed=1)),
    "linear_attention": (lambda m: LinearAttentionView.for_model(m),
                         lambda m: LinearAttentionView.for_model(m, max_sentences=5)),
}
MODELS = {"pattern_asymmetry_pre_norm": {"norm_position": "pre", "final_norm": True}}


def model_for(case: str, seed: int = 0) -> HookedTransformer:
    return tiny_model(seed, **MODELS.get(case, {}))


def assert_results_equal(a: Analyzer, b: Analyzer, exact: bool = True) -> None:
    ra, rb = a.result(), b.result()
    assert ra.keys() == rb.keys()
    for name in ra:
        if exact:
            pd.testing.assert_frame_equal(ra[name], rb[name], check_exact=True)
        else:
            # Halves add float64 partial sums in another order: a few ulps of each value.
            pd.testing.assert_frame_equal(ra[name], rb[name], check_exact=False, rtol=1e-12,
                                          atol=1e-15)


@pytest.mark.parametrize("case", list(CASES))
def test_state_round_trips_through_files(case: str, tmp_path) -> None:
    make, _ = CASES[case]
    model = model_for(case)
    analyzer = make(model)
    run_analyzers(model, batches(), [analyzer], show_progress=False)
    state = analyzer.state_dict()
    tensors, skeleton = split_state(state)
    json.dumps(skeleton)  # everything but the tensors is plain JSON
    assert all(t.device.type == "cpu" for t in tensors.values())
    save_state(state, tmp_path / "state")
    restored = make(model)
    restored.load_state_dict(load_state(tmp_path / "state"))
    assert_results_equal(restored, analyzer)


@pytest.mark.parametrize("case", list(CASES))
def test_merge_of_halves_equals_one_pass(case: str) -> None:
    make, _ = CASES[case]
    model = model_for(case)
    data = batches()
    whole, first, second = make(model), make(model), make(model)
    run_analyzers(model, data, [whole], show_progress=False)
    run_analyzers(model, data[:2], [first], show_progress=False)
    run_analyzers(model, data[2:], [second], show_progress=False)
    assert_results_equal(first.merge(second), whole, exact=False)


@pytest.mark.parametrize("case", list(CASES))
def test_merge_refuses_other_settings_models_and_analyzers(case: str) -> None:
    make, other = CASES[case]
    model = model_for(case)
    with pytest.raises(ConfigError, match="other settings"):
        make(model).merge(other(model))
    if case not in ("head_stats", "head_examples"):  # built without a model: no model id
        with pytest.raises(ConfigError, match="model_id"):
            make(model).merge(make(model_for(case, seed=1)))
    foreign = next(c for c in CASES if CASES[c][0](model).name != make(model).name)
    with pytest.raises(ConfigError, match="cannot combine"):
        make(model).merge(CASES[foreign][0](model_for(foreign)))


def test_fingerprint_tells_models_apart_and_is_stable() -> None:
    a, b = tiny_model(0), tiny_model(0)
    assert model_fingerprint(a) == model_fingerprint(b)  # same weights, another object
    assert model_fingerprint(a) != model_fingerprint(tiny_model(1))
    assert model_fingerprint(a) != model_fingerprint(tiny_model(0).double())


def assert_plain_data(analyzer: Analyzer) -> None:
    for name, value in vars(analyzer).items():
        assert not isinstance(value, torch.nn.Module), name
        assert not callable(value), name


def test_variant_collapse_keeps_no_model() -> None:
    """No model, module or closure in an analyzer's attributes: only plain data."""
    model = model_for("variant_collapse")
    for make, _ in CASES.values():
        assert_plain_data(make(model))


class TinyTokenizer:
    """attnlens' Tokenizer surface the table-writing analyzers read: ``hf`` and decode_tokens."""

    hf = [None] * 50  # len(hf): the vocabulary size

    def decode_tokens(self, ids) -> list[str]:
        return [f"tok{i}" for i in ids]


@pytest.mark.parametrize("analyzer_class", [RolloutAnalyzer, FlowAnalyzer])
def test_token_strings_are_held_as_plain_data(analyzer_class) -> None:
    """Built with a tokenizer, rollout and flow hold the vocabulary's strings, not the
    tokenizer's bound method, and their tables name the tokens."""
    model = tiny_model()
    analyzer = analyzer_class.for_model(model, TinyTokenizer(), keep=None)
    assert_plain_data(analyzer)
    run_analyzers(model, batches(), [analyzer], show_progress=False)
    first = analyzer.kept_sentences()[0]
    ids = batches()[0].input_ids[0, :5].tolist()
    assert first["tokens"] == [f"tok{i}" for i in ids]
    tables = analyzer.result()
    if "flow" in tables:
        assert set(tables["flow"]["key_token"]) <= {f"tok{i}" for i in range(50)}


class _MixedState(Analyzer):
    """An analyzer whose state holds tensors, tensor lists and host data."""

    name = "mixed"
    state_fields = ("total", "rows", "sentences", "words")
    host_fields = ("words",)

    def __init__(self) -> None:
        self.total = torch.zeros(2)
        self.rows = [torch.ones(3), torch.ones(1)]  # per batch
        self.sentences = [4, 7]  # corpus indices
        self.words = {"4": ["a", "b"], "7": ["c"]}

    def hook_names(self, model):
        return []

    def result(self):
        return {}


def test_move_state_moves_tensors_and_leaves_host_data_alone() -> None:
    analyzer = _MixedState()
    sentences, words = analyzer.sentences, analyzer.words
    analyzer.move_state("meta")
    assert analyzer.total.device.type == "meta"
    assert [r.device.type for r in analyzer.rows] == ["meta", "meta"]
    # host data is not walked (the same objects, not copies rebuilt every batch)
    assert analyzer.sentences is sentences and analyzer.words is words
