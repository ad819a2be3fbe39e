"""The language-model head analyzers follow the analyzer protocol: their states round-trip
through files, two halves merge into one pass, and merges refuse other settings, models and
analyzers (as ``tests/test_analyzer_states.py`` checks for the others)."""

from __future__ import annotations

import json
from collections import Counter

import pandas as pd
import pytest
import torch

from attnlens.errors import ConfigError
from attnlens.measures.lm_heads.probes import ProbeScores, random_probes
from attnlens.measures.lm_heads.retrieval import RetrievalScores, haystacks
from attnlens.measures.lm_heads.run import CorpusSample
from attnlens.measures.lm_heads.sinks import SinkKeys, SinkScores
from attnlens.measures.lm_heads.streaming import StreamingError
from attnlens.stats.bootstrap import Inference
from attnlens.stream.base import Batch
from attnlens.stream.runner import run_analyzers
from attnlens.stream.state import load_state, save_state, split_state
from tests.lm_heads_toys import BOS, ORDINARY, random_batches, toy_model

SMALL = Inference(bootstrap=50)
OTHER = Inference(bootstrap=50, seed=1)


def probe_data():
    return random_probes(ORDINARY, 20, 6, 0, [BOS], [], BOS, {BOS}).batches(7)


def haystack_data():
    return haystacks(ORDINARY, 12, 0, [BOS], [], BOS, {BOS}, haystack=16, needle=3).batches(5)


def corpus_data():
    return random_batches(n=20, length=12, batch_size=7)


# name: (make, make with another setting, data)
CASES = {
    "probes": (lambda m: ProbeScores.for_model(m, SMALL),
               lambda m: ProbeScores.for_model(m, OTHER), probe_data),
    "retrieval": (lambda m: RetrievalScores.for_model(m, SMALL),
                  lambda m: RetrievalScores.for_model(m, OTHER), haystack_data),
    "sinks": (lambda m: SinkScores.for_model(m, SMALL),
              lambda m: SinkScores.for_model(m, OTHER), corpus_data),
    "sink_keys": (lambda m: SinkKeys.for_model(m), lambda m: SinkKeys.for_model(m, top=2),
                  corpus_data),
    "streaming": (lambda m: StreamingError.for_model(m, sink_tokens=1, window=3),
                  lambda m: StreamingError.for_model(m, sink_tokens=1, window=4), corpus_data),
    "corpus_sample": (lambda m: CorpusSample.for_model(m, 15),
                      lambda m: CorpusSample.for_model(m, 5), corpus_data),
}


def results_equal(a, b, exact: bool) -> None:
    ra, rb = a.result(), b.result()
    assert ra.keys() == rb.keys()
    for name in ra:
        if name == "lm_corpus_sample":  # the kept sentences, in corpus order
            pd.testing.assert_frame_equal(ra[name], rb[name])
            continue
        left = ra[name].sort_values(list(ra[name].columns[:4])).reset_index(drop=True)
        right = rb[name].sort_values(list(rb[name].columns[:4])).reset_index(drop=True)
        # halves add float64 (or float32 per-sequence) partial sums in another order
        pd.testing.assert_frame_equal(left, right, check_exact=exact, rtol=1e-6, atol=1e-9)


@pytest.fixture(scope="module")
def model():
    return toy_model()


@pytest.mark.parametrize("case", list(CASES))
def test_state_round_trips_through_files(case, model, tmp_path) -> None:
    make, _, data = CASES[case]
    analyzer = make(model)
    run_analyzers(model, data(), [analyzer], show_progress=False)
    tensors, skeleton = split_state(analyzer.state_dict())
    json.dumps(skeleton)  # everything but the tensors is plain JSON
    assert all(t.device.type == "cpu" for t in tensors.values())
    save_state(analyzer.state_dict(), tmp_path / "state")
    restored = make(model)
    restored.load_state_dict(load_state(tmp_path / "state"))
    results_equal(restored, analyzer, exact=True)


@pytest.mark.parametrize("case", list(CASES))
def test_merge_of_halves_equals_one_pass(case, model) -> None:
    make, _, data = CASES[case]
    batches = data()
    whole, first, second = make(model), make(model), make(model)
    run_analyzers(model, batches, [whole], show_progress=False)
    run_analyzers(model, batches[:1], [first], show_progress=False)
    run_analyzers(model, batches[1:], [second], show_progress=False)
    results_equal(first.merge(second), whole, exact=False)


@pytest.mark.parametrize("case", list(CASES))
def test_merge_refuses_other_settings_and_models(case, model) -> None:
    make, other, _ = CASES[case]
    with pytest.raises(ConfigError, match="other settings"):
        make(model).merge(other(model))
    changed = toy_model()
    with torch.no_grad():  # the fingerprint hashes each parameter's first values
        changed.embed.weight[0, 0] = 2.0
    with pytest.raises(ConfigError, match="model_id"):
        make(model).merge(make(changed))
    foreign = "sinks" if case != "sinks" else "probes"
    with pytest.raises(ConfigError, match="cannot combine"):
        make(model).merge(CASES[foreign][0](model))


def _sink_counts_one_layer_at_a_time(found, ids, first, lengths):
    """SinkKeys' counting on main before matrix30, one layer at a time (the reference)."""
    counts, received_by_key, pairs = Counter(), Counter(), Counter()
    for layer, values, positions in found:
        n, n_heads, top = values.shape
        real = positions < lengths[:, None, None]
        token = ids.gather(1, positions.flatten(1)).view_as(positions)
        code = token * 2 + (positions == first[:, None, None]).long()
        pair = torch.arange(n * n_heads).view(n, n_heads, 1).expand(-1, -1, top)
        width = int(code.max()) + 1
        keyed, inverse = torch.unique((pair * width + code)[real], return_inverse=True)
        received = torch.zeros(len(keyed), dtype=torch.float64).index_add_(
            0, inverse, values[real].double())
        codes, per_code = torch.unique(keyed % width, return_inverse=True)
        n_top = torch.bincount(per_code, minlength=len(codes))
        total = torch.zeros(len(codes), dtype=torch.float64).index_add_(0, per_code, received)
        for c, count, share in zip(codes.tolist(), n_top.tolist(), total.tolist(), strict=True):
            key = f"{layer}:{c // 2}:{'first' if c % 2 else 'other'}"
            counts[key] += count
            received_by_key[key] += share
        pairs[str(layer)] += n * n_heads
    return counts, received_by_key, pairs


HEADS = [3, 1, 2]  # layers of different head counts (a pruned model)


def _sink_key_batches(n: int = 3) -> list[tuple[Batch, list]]:
    """``n`` batches of short, left-padded sentences with repeated tokens, and each layer's
    top keys (ties: the attention rounded to one decimal)."""
    gen = torch.Generator().manual_seed(4)
    ids = torch.randint(3, 9, (4, 7), generator=gen)
    mask = torch.ones(4, 7, dtype=torch.long)
    mask[1, 5:] = 0
    mask[2, :3] = 0  # padded on the left: the first real token is at 3
    batches = []
    for _ in range(n):
        found = []
        for layer, heads in enumerate(HEADS):
            received = torch.rand(4, heads, 7, generator=gen).round(decimals=1)  # ties
            top = received.topk(3, dim=-1)
            found.append((layer, top.values, top.indices))
        batches.append((Batch(input_ids=ids, attention_mask=mask), found))
        ids = ids.roll(1, 1)
    return batches


def _feed_sink_keys(keys: SinkKeys, batches: list[tuple[Batch, list]]) -> None:
    for batch, found in batches:
        keys.begin_batch(batch)
        keys._found = list(found)
        keys.end_batch(batch)


def _reference_counters(batches: list[tuple[Batch, list]]) -> list[Counter]:
    want = [Counter(), Counter(), Counter()]
    for batch, found in batches:
        mask = batch.attention_mask
        lengths, first = mask.sum(1), mask.bool().to(torch.int8).argmax(1)
        for total, part in zip(want, _sink_counts_one_layer_at_a_time(
                found, batch.input_ids, first, lengths), strict=True):
            for key, value in part.items():
                total[key] += value
    return want


def _assert_counters(keys: SinkKeys, want: list[Counter]) -> None:
    """Keys in their order, integer counts and float sums the same bits."""
    assert list(keys.counts.items()) == list(want[0].items())
    assert list(keys.received.items()) == list(want[1].items())
    assert keys.pairs == want[2]


def test_sink_keys_counters_equal_the_one_layer_reference():
    """matrix30: SinkKeys' counters hold the keys, in their order, with the integer counts
    and float sums of the reference counting, with layers of different head counts (a
    pruned model), short, left-padded sentences and a token twice among a pair's top keys;
    later batches add to the earlier ones' counters."""
    batches = _sink_key_batches()
    keys = SinkKeys(HEADS, top=3)
    _feed_sink_keys(keys, batches)
    _assert_counters(keys, _reference_counters(batches))


def test_sink_keys_resume_from_a_state_saved_mid_run(tmp_path):
    """pass45 (counts held in arrays, Counters made when read): a run resumed from a state
    saved after its first batch, or from the reference's Counters after it (the form main's
    code saves), counts as the uninterrupted run, keys in the same order, the same bits; the
    saved state is that form (Counters of the reference's keys, in order)."""
    batches = _sink_key_batches()
    whole = SinkKeys(HEADS, top=3)
    _feed_sink_keys(whole, batches[:1])
    saved = whole.state_dict()
    _assert_counters(whole, _reference_counters(batches[:1]))
    assert list(saved["state"]["counts"]) == list(_reference_counters(batches[:1])[0])
    _feed_sink_keys(whole, batches[1:])  # read mid-run, then counting on
    want = _reference_counters(batches)
    _assert_counters(whole, want)
    save_state(saved, tmp_path / "state")
    resumed = SinkKeys(HEADS, top=3)
    resumed.load_state_dict(load_state(tmp_path / "state"))
    _feed_sink_keys(resumed, batches[1:])
    _assert_counters(resumed, want)
    counts, received, pairs = _reference_counters(batches[:1])
    from_main = SinkKeys(HEADS, top=3)
    from_main.load_state_dict({**saved, "state": {"counts": counts, "received": received,
                                                  "pairs": pairs}})
    _feed_sink_keys(from_main, batches[1:])
    _assert_counters(from_main, want)
