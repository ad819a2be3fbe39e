"""Known answers: on a hand-built model the language-model head measures find exactly the
planted heads (``tests/lm_heads_toys.py``), and the causal check separates them from random
heads."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from attnlens.measures.lm_heads.ablation import (
    CausalMetric,
    ablation_mask,
    ablation_rows,
    control_sets,
    head_means,
    mean_ablated,
)
from attnlens.measures.lm_heads.copying import copying_table
from attnlens.measures.lm_heads.probes import ProbeScores, random_probes, repeat_loss
from attnlens.measures.lm_heads.retrieval import RetrievalScores, haystacks
from attnlens.measures.lm_heads.sinks import SinkKeys, SinkScores, sink_key_table
from attnlens.measures.lm_heads.streaming import StreamingError, streaming_table
from attnlens.measures.lm_heads.tables import lm_role_tests, role_heads
from attnlens.stats.bootstrap import Inference
from attnlens.stream.runner import run_analyzers
from tests.lm_heads_toys import (
    BOS,
    INDUCTION_HEAD,
    ORDINARY,
    PREV_HEAD,
    SINK_HEAD,
    random_batches,
    toy_model,
)

INFERENCE = Inference(bootstrap=200, seed=0)


@pytest.fixture(scope="module")
def model():
    return toy_model()


@pytest.fixture(scope="module")
def probe_batches():
    return random_probes(ORDINARY, 40, 10, seed=0, first=[BOS], closing=[], pad_id=BOS,
                         special={BOS}).batches(16)


@pytest.fixture(scope="module")
def measured(model, probe_batches):
    probes = ProbeScores.for_model(model, INFERENCE)
    sinks = SinkScores.for_model(model, INFERENCE)
    retrieval = RetrievalScores.for_model(model, INFERENCE)
    run_analyzers(model, probe_batches, [probes], show_progress=False)
    run_analyzers(model, random_batches(), [sinks], show_progress=False)
    stacks = haystacks(ORDINARY, 30, seed=1, first=[BOS], closing=[], pad_id=BOS,
                       special={BOS}, haystack=24, needle=4)
    run_analyzers(model, stacks.batches(16), [retrieval], show_progress=False)
    return probes, sinks, retrieval


def granted(tests: pd.DataFrame, role: str) -> set[tuple[int, int]]:
    rows = tests[(tests["role"] == role) & tests["passed"]]
    return {(int(a), int(b)) for a, b in zip(rows["layer"], rows["head"], strict=True)}


def test_probes_find_exactly_the_planted_heads(measured) -> None:
    probes, sinks, retrieval = measured
    tests = lm_role_tests(probes, sinks, retrieval, min_examples=100)
    assert tests["tested"].all()  # 40 probes of 10 queries: enough evidence
    assert granted(tests, "previous_token") == {PREV_HEAD}
    assert granted(tests, "induction") == {INDUCTION_HEAD}
    assert granted(tests, "duplicate_token") == set()
    assert granted(tests, "sink") == {SINK_HEAD}
    assert granted(tests, "retrieval") == {INDUCTION_HEAD}
    scores = probes.table().set_index(["layer", "head", "measure"])["value"]
    # off-target weights are below e^-30 each (SHARP); fp32 softmax rounding: ~1e-7
    assert scores[(*PREV_HEAD, "previous_token")] == pytest.approx(1.0, abs=1e-6)
    assert scores[(*INDUCTION_HEAD, "induction")] == pytest.approx(1.0, abs=1e-6)
    assert role_heads(tests)["induction"] == [INDUCTION_HEAD]


def test_a_head_attending_to_position_zero_is_a_sink_of_score_one(measured) -> None:
    _, sinks, _ = measured
    table = sinks.table().set_index(["layer", "head"])
    # the sink head's weight on position 0 is 1 - n e^-30: 1 within fp32 rounding
    assert table.loc[SINK_HEAD, "value"] == pytest.approx(1.0, abs=1e-6)
    assert table.loc[SINK_HEAD, "ci_low"] == pytest.approx(1.0, abs=1e-6)
    others = table.drop(index=[SINK_HEAD])
    assert (others["value"] < 0.3).all()


def test_the_induction_head_retrieves_the_needle(measured) -> None:
    _, _, retrieval = measured
    table = retrieval.table().set_index(["layer", "head"])["value"]
    assert table[INDUCTION_HEAD] == pytest.approx(1.0, abs=1e-6)
    assert table[PREV_HEAD] == 0.0


def test_previous_token_head_streams_and_induction_head_does_not(model) -> None:
    long = random_probes(ORDINARY, 8, 20, seed=2, first=[BOS], closing=[], pad_id=BOS,
                         special={BOS})  # R = 20 > window 4: the earlier copy is out of reach
    errors = StreamingError.for_model(model, sink_tokens=1, window=4)
    run_analyzers(model, long.batches(), [errors], show_progress=False)
    table = streaming_table({"probes": errors}, [4, 4], threshold=0.1)
    by_head = table.set_index(["layer", "head"])
    assert bool(by_head.loc[PREV_HEAD, "streaming"])
    assert by_head.loc[PREV_HEAD, "output_error"] < 1e-5
    assert not bool(by_head.loc[INDUCTION_HEAD, "streaming"])
    assert by_head.loc[INDUCTION_HEAD, "output_error"] > 0.5


def test_ablating_the_induction_head_breaks_the_repeat_loss(model, probe_batches) -> None:
    metric = CausalMetric("repeat_loss", lambda mask: repeat_loss(model, probe_batches, mask))
    (row,) = ablation_rows(model, {"induction": [INDUCTION_HEAD]}, [metric], controls=20,
                           seed=0)
    assert row["baseline"] < 0.01  # the planted head predicts the repeat (logit 10)
    assert row["ablated"] > 3.0  # about log(40): uniform logits
    assert row["random_high"] < 0.05  # random heads of layer 1 barely matter
    assert row["n_random"] == 20 and row["p"] == pytest.approx(1 / 21)


def test_mean_ablation_replaces_a_head_output_by_its_mean(model, probe_batches) -> None:
    means = head_means(model, probe_batches)
    seen = {}

    def keep(z, hook):
        seen["z"] = z.clone()

    batch = probe_batches[0]
    with mean_ablated(model, [INDUCTION_HEAD], means), \
            model.hooks(fwd_hooks=[("blocks.1.attn.hook_z", keep)]):
        model(**batch.model_inputs())
    z = seen["z"]  # [batch, pos, head, d_head_v], after the replacement
    torch.testing.assert_close(z[:, :, 0], means[1][0].float().expand_as(z[:, :, 0]))
    metric = CausalMetric("repeat_loss", lambda mask: repeat_loss(model, probe_batches, mask))
    (row,) = ablation_rows(model, {"induction": [INDUCTION_HEAD]}, [metric], controls=3,
                           seed=0, mode="mean", means=means)
    assert row["ablated"] > 1.0 > row["random_high"]


def test_zero_ablation_is_the_head_mask_of_the_gates(model, probe_batches) -> None:
    mask = ablation_mask(model, [INDUCTION_HEAD, (0, 2)])
    assert mask[1, 0] == 0 and mask[0, 2] == 0 and mask.sum() == mask.numel() - 2


def test_controls_come_from_the_role_layers_and_skip_the_role() -> None:
    draws = control_sets([(1, 0), (1, 2)], [4, 4], 50, seed=0)
    assert len(draws) == 50
    for heads in draws:
        assert len(set(heads)) == 2
        assert all(layer == 1 and head in (1, 3) for layer, head in heads)
    # a role filling its layer: controls come from the other layers
    draws = control_sets([(0, 0), (0, 1)], [2, 3], 5, seed=0)
    assert all(layer == 1 for heads in draws for layer, _ in heads)
    assert control_sets([(0, 0)], [1], 5, seed=0) == []  # no head outside the role


def test_copying_score_of_the_induction_head(model) -> None:
    table = copying_table(model)
    by_head = table[table["measure"] == "copying"].set_index(["layer", "head"])["value"]
    # W_O W_U W_E W_V of the induction head is LOGIT times the identity on the vocabulary
    assert by_head[INDUCTION_HEAD] == pytest.approx(1.0, abs=1e-9)
    ratio = table[table["measure"] == "copying_ratio"].set_index(["layer", "head"])["value"]
    assert ratio[INDUCTION_HEAD] == pytest.approx(1.0, abs=1e-9)
    assert set(table["detail"]) == {"OV circuit, unembedding form"}


def test_sink_keys_name_the_first_token(model) -> None:
    keys = SinkKeys.for_model(model)
    run_analyzers(model, random_batches(), [keys], show_progress=False)
    table = sink_key_table(keys, lambda i: f"t{i}")
    first = table[(table["layer"] == 0) & (table["position"] == "first")]
    assert first["token"].tolist() == ["t0"]
    # every (sentence, head) pair of layer 0 has position 0 among its 3 top keys
    assert int(first["n_top"].iloc[0]) == 40 * 4
    assert np.isclose(first["share_of_heads"].iloc[0], 1.0)


def test_sink_keys_count_a_token_once_per_sentence_and_head() -> None:
    from attnlens.data.batch import Batch
    from attnlens.hooks import ActivationCache

    ids = torch.tensor([[1, 5, 7, 5]])
    batch = Batch(input_ids=ids, attention_mask=torch.ones_like(ids))
    # every query: 0.4 on each copy of token 5 (positions 1 and 3), 0.15 on 0, 0.05 on 2
    row = torch.tensor([0.15, 0.4, 0.05, 0.4])
    pattern = row.expand(1, 1, 4, 4).clone()  # [batch, head, query_pos, key_pos]
    keys = SinkKeys([1], top=3)
    keys.update(batch, ActivationCache({"blocks.0.attn.hook_pattern": pattern}))
    table = sink_key_table(keys, lambda i: f"t{i}").set_index(["token", "position"])
    assert table.loc[("t5", "other"), "n_top"] == 1  # two positions, one sentence-head pair
    assert table.loc[("t5", "other"), "mean_received"] == pytest.approx(0.8)
    assert table.loc[("t5", "other"), "share_of_heads"] == 1.0
    assert table.loc[("t1", "first"), "mean_received"] == pytest.approx(0.15)
    assert len(table) == 2  # token 7 (0.05) is not among the top 3 keys


def test_no_probes_keeps_the_corpus_measures(model) -> None:
    from attnlens.measures.lm_heads.run import LmHeads
    from attnlens.measures.lm_heads.settings import LmHeadsSettings
    from tests.lm_heads_toys import toy_tokenizer

    lm = LmHeads(LmHeadsSettings(probes=False, window=4, sink_tokens=1, controls=2).check(),
                 INFERENCE)
    run_analyzers(model, random_batches(), lm.corpus_analyzers(model, toy_tokenizer()),
                  show_progress=False)
    result = lm.compute(model)
    assert set(result.tables["probe_scores"]["measure"]) == {"copying", "copying_ratio"}
    assert set(result.role_tests["role"]) == {"sink"}
    assert "probes_error" not in result.tables["streaming_heads"]
    assert set(result.tables["role_ablation"]["metric"]) == {"perplexity"}
    assert result.tables["role_ablation"]["role"].tolist() == ["sink"]


def test_a_model_without_token_maps_gets_no_copying_scores(model, monkeypatch) -> None:
    """Copying reads the model's token maps and per-head W_V, W_O: a model that cannot give
    them gets the other measures and a summary line saying why copying is missing."""
    from types import SimpleNamespace

    from attnlens.measures.lm_heads import run
    from attnlens.measures.lm_heads.copying import copying_unavailable
    from attnlens.measures.lm_heads.section import notes
    from attnlens.measures.lm_heads.settings import LmHeadsSettings
    from attnlens.model.token_maps import TokenMapsUnavailable
    from tests.lm_heads_toys import toy_tokenizer

    assert copying_unavailable(model) is None

    def no_maps():
        raise TokenMapsUnavailable("the model has no embed")

    other = SimpleNamespace(weight_problems=dict, token_maps=no_maps)
    assert copying_unavailable(other) == "the model has no embed"
    other = SimpleNamespace(weight_problems=lambda: {"OV": "no output projection"},
                            token_maps=no_maps)
    assert copying_unavailable(other) == "OV: no output projection"
    monkeypatch.setattr(run, "copying_unavailable", lambda m: "the model has no embed")
    lm = run.LmHeads(LmHeadsSettings(probes=False, window=4, sink_tokens=1, controls=2).check(),
                     INFERENCE)
    run_analyzers(model, random_batches(), lm.corpus_analyzers(model, toy_tokenizer()),
                  show_progress=False)
    result = lm.compute(model)
    assert result.tables["probe_scores"].empty
    assert "No copying scores: the model has no embed." in notes(result, lm)
    assert set(result.role_tests["role"]) == {"sink"}  # the corpus measures still run
