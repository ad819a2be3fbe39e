"""Analyzer checkpoints: exact round trips, and a pass cut at any batch resumes to the same
tables as an uninterrupted one."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pandas as pd
import pytest
import torch

from attnlens.data.batch import Batch
from attnlens.errors import ConfigError
from attnlens.measures.heads.head_stats import HeadStats
from attnlens.model import HookedTransformer, TransformerConfig
from attnlens.runs.checkpointing import AnalysisCheckpoint, decode_states, encode_states
from attnlens.runs.outputs import CHECKPOINT_DIR
from attnlens.stream.base import Analyzer
from attnlens.stream.runner import run_analyzers


class Tally(Analyzer):
    """A whole-batch analyzer whose state uses every kind of plain data the protocol allows."""

    name = "tally"
    state_fields = ("counts", "by_pair", "lengths", "total", "seen", "last")

    def __init__(self, n_layers: int) -> None:
        self.n_layers = n_layers
        self.counts: Counter = Counter()
        self.by_pair: dict = {}
        self.lengths: list = []
        self.total = torch.zeros(n_layers, dtype=torch.float64)
        self.seen = 0
        self.last = ""

    def hook_names(self, model):
        return [f"blocks.{i}.attn.hook_pattern" for i in range(self.n_layers)]

    def settings(self):
        return {"n_layers": self.n_layers}

    def update(self, batch, cache):
        for layer in range(self.n_layers):
            p = cache["pattern", layer]  # [batch, head, query_pos, key_pos]
            self.total[layer] += p.double().square().sum()
            winner = int(p.sum(dim=(0, 2)).argmax(-1)[0])
            self.counts[(layer, winner)] += 1
            self.by_pair[layer] = self.by_pair.get(layer, 0.0) + float(p.max())
        self.lengths.append(int(batch.input_ids.shape[1]))
        self.seen += int(batch.input_ids.shape[0])
        self.last = f"batch of {batch.input_ids.shape[0]}"

    def result(self):
        rows = [{"layer": k[0], "head": k[1], "n": v} for k, v in sorted(self.counts.items())]
        return {"tally": pd.DataFrame(rows),
                "total": pd.DataFrame({"total": self.total.numpy(), "seen": self.seen,
                                       "lengths": str(self.lengths), "last": self.last,
                                       "pairs": str(sorted(self.by_pair.items()))})}


def test_states_round_trip_exactly():
    state = {
        "analyzer": "X", "settings": {"ids": {3, 1}, "name": "n"},
        "state": {
            "f32": torch.randn(3, 4), "f64": torch.randn(2, dtype=torch.float64),
            "i64": torch.arange(5), "flag": torch.tensor([True, False]),
            "counter": Counter({(0, 1): 3, (2, 3): 1}), "int_keys": {0: 1.5, 7: float("nan")},
            "nested": {"a": [1, (2, 3), {"b": torch.ones(2)}]}, "tuple": (1, "x"),
            "array": np.arange(4.0), "scalar": np.float64(0.1), "inf": float("inf"),
            "none": None, "marker_key": {"__attnlens__": 1},
        },
    }
    data, tensors = encode_states([state])
    json.loads(data)  # plain JSON
    (back,) = decode_states(data, tensors)
    s, b = state["state"], back["state"]
    for key in ("f32", "f64", "i64", "flag"):
        assert b[key].dtype == s[key].dtype and torch.equal(b[key], s[key])
    assert b["counter"] == s["counter"] and isinstance(b["counter"], Counter)
    assert b["int_keys"][0] == 1.5 and np.isnan(b["int_keys"][7]) and list(b["int_keys"]) == [0, 7]
    assert b["nested"]["a"][1] == (2, 3) and torch.equal(b["nested"]["a"][2]["b"], torch.ones(2))
    assert b["tuple"] == (1, "x") and np.array_equal(b["array"], s["array"])
    assert b["scalar"] == s["scalar"] and type(b["scalar"]) is np.float64
    assert b["inf"] == float("inf") and b["none"] is None and b["marker_key"] == {"__attnlens__": 1}
    assert back["settings"] == state["settings"]


def test_values_that_are_not_plain_data_are_refused():
    with pytest.raises(ConfigError, match=r"cannot save the state of X.*function"):
        encode_states([{"analyzer": "X", "state": {"f": lambda: 0}}])


CLS, SEP = 1, 2


def _setup():
    torch.manual_seed(0)
    cfg = TransformerConfig(d_model=16, n_heads=2, n_layers=3, d_mlp=32, vocab_size=20, n_ctx=12)
    model = HookedTransformer(cfg).eval()
    batches = []
    for i, (size, length) in enumerate([(3, 7), (2, 9), (4, 5), (1, 11), (3, 6), (2, 8)]):
        ids = torch.randint(3, 20, (size, length))
        ids[:, 0], ids[:, -1] = CLS, SEP
        batches.append(Batch(input_ids=ids, attention_mask=torch.ones_like(ids),
                             special_mask=(ids == CLS) | (ids == SEP),
                             extra={"index": list(range(3 * i, 3 * i + size))}))
    return model, batches


def _analyzers():
    return [HeadStats(3, 2, {CLS}, {SEP}, {7}), Tally(3)]


def _tables(analyzers) -> dict[str, pd.DataFrame]:
    return {k: v for a in analyzers for k, v in a.result().items()}


class Cut(Exception):
    pass


def _run_cut(model, batches, folder, every, cut_after, resume=False):
    """Run with checkpoints and stop (like kill -9: no clean-up) after ``cut_after`` batches."""
    analyzers = _analyzers()
    checkpoint = AnalysisCheckpoint(folder, every=every, resume=resume)

    def stream():
        for n, batch in enumerate(checkpoint.wrap(batches, analyzers)):
            if n == cut_after:
                raise Cut
            yield batch

    with pytest.raises(Cut):
        run_analyzers(model, stream(), analyzers, show_progress=False)


@pytest.mark.parametrize(("every", "cut_after"), [(1, 1), (4, 3), (5, 5), (3, 2)])
def test_a_cut_pass_resumes_to_the_same_tables(tmp_path, every, cut_after):
    model, batches = _setup()
    whole = _analyzers()
    run_analyzers(model, batches, whole, show_progress=False)
    _run_cut(model, batches, tmp_path, every, cut_after)
    latest = json.loads((tmp_path / CHECKPOINT_DIR / "latest.json").read_text())
    assert latest["batches_done"] <= cut_after
    assert len(list((tmp_path / CHECKPOINT_DIR).glob("step-*"))) == 2  # older steps deleted
    resumed = _analyzers()
    checkpoint = AnalysisCheckpoint(tmp_path, every=every, resume=True)
    run_analyzers(model, checkpoint.wrap(batches, resumed), resumed, show_progress=False)
    expected, got = _tables(whole), _tables(resumed)
    assert expected.keys() == got.keys()
    for name in expected:  # bit-identical: same batches, same order, states restored exactly
        pd.testing.assert_frame_equal(got[name], expected[name], check_exact=True)


def test_a_cut_during_a_second_resume_still_resumes(tmp_path):
    model, batches = _setup()
    whole = _analyzers()
    run_analyzers(model, batches, whole, show_progress=False)
    _run_cut(model, batches, tmp_path, every=1, cut_after=2)
    _run_cut(model, batches, tmp_path, every=1, cut_after=2, resume=True)  # 2 more batches
    assert json.loads((tmp_path / CHECKPOINT_DIR / "latest.json").read_text())[
        "batches_done"] == 4
    resumed = _analyzers()
    checkpoint = AnalysisCheckpoint(tmp_path, every=1, resume=True)
    run_analyzers(model, checkpoint.wrap(batches, resumed), resumed, show_progress=False)
    for name, table in _tables(whole).items():
        pd.testing.assert_frame_equal(_tables(resumed)[name], table, check_exact=True)


def test_resume_refuses_another_batch_order_or_other_analyzers(tmp_path):
    model, batches = _setup()
    _run_cut(model, batches, tmp_path, every=1, cut_after=3)
    with pytest.raises(ConfigError, match="other batches"):
        list(AnalysisCheckpoint(tmp_path, resume=True).wrap(batches[::-1], _analyzers()))
    with pytest.raises(ConfigError, match="holds \\['HeadStats', 'Tally'\\]"):
        list(AnalysisCheckpoint(tmp_path, resume=True).wrap(batches, [Tally(3)]))
    with pytest.raises(ConfigError, match="n_heads"):  # settings checked by load_state_dict
        list(AnalysisCheckpoint(tmp_path, resume=True).wrap(
            batches, [HeadStats(3, 3, {CLS}, {SEP}, {7}), Tally(3)]))


def test_analyzers_without_declared_state_cannot_be_checkpointed(tmp_path):
    class Undeclared(Analyzer):
        def hook_names(self, model):
            return []

        def result(self):
            return {}

    _model, batches = _setup()
    with pytest.raises(ConfigError, match="Undeclared cannot be checkpointed"):
        list(AnalysisCheckpoint(tmp_path, every=2).wrap(batches, [Undeclared()]))
