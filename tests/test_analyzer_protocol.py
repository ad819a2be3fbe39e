"""The analyzer protocol: state that travels, strict merges, layer-by-layer feeding."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from attnlens.data.batch import Batch
from attnlens.errors import ConfigError
from attnlens.hooks import ActivationCache
from attnlens.measures.heads.head_stats import HeadStats
from attnlens.model import HookedTransformer, TransformerConfig
from attnlens.stream.base import Analyzer
from attnlens.stream.feeder import LayerFeeder
from attnlens.stream.runner import run_analyzers

CLS, SEP = 1, 2


def _batch_and_cache(p: torch.Tensor, ids: torch.Tensor) -> tuple[Batch, ActivationCache]:
    mask = (ids != 0).long()
    batch = Batch(input_ids=ids, attention_mask=mask, special_mask=(ids == CLS) | (ids == SEP))
    return batch, ActivationCache({"blocks.0.attn.hook_pattern": p})


def _stats() -> HeadStats:
    return HeadStats(1, 4, {CLS}, {SEP}, {7})


def test_state_round_trips_through_safetensors_and_json(tmp_path) -> None:
    torch.manual_seed(0)
    ids = torch.tensor([[CLS, 5, 6, 7, SEP], [CLS, 8, 9, SEP, 0]])
    stats = _stats()
    stats.update(*_batch_and_cache(torch.softmax(torch.randn(2, 4, 5, 5), -1), ids))
    state = stats.state_dict()
    save_file({k: v for k, v in state["state"].items() if isinstance(v, torch.Tensor)},
              tmp_path / "s.safetensors")
    plain = {k: v for k, v in state["state"].items() if not isinstance(v, torch.Tensor)}
    meta = json.loads(json.dumps({"analyzer": state["analyzer"], "settings": state["settings"],
                                  "plain": plain}, default=sorted))
    restored = _stats()
    restored.load_state_dict({"analyzer": meta["analyzer"], "settings": meta["settings"],
                              "state": {**load_file(tmp_path / "s.safetensors"), **meta["plain"]}})
    assert torch.equal(restored.sums, stats.sums) and restored.rows == stats.rows
    assert restored.result()["head_stats"].equals(stats.result()["head_stats"])


def test_merge_refuses_other_settings_and_other_analyzers() -> None:
    with pytest.raises(ConfigError, match="punct_ids"):
        _stats().merge(HeadStats(1, 4, {CLS}, {SEP}, {8}))
    with pytest.raises(ConfigError, match="n_heads"):
        _stats().merge(HeadStats(1, 3, {CLS}, {SEP}, {7}))

    class Other(Analyzer):
        def hook_names(self, model):
            return []

        def result(self):
            return {}

    with pytest.raises(ConfigError, match="cannot combine"):
        _stats().merge(Other())


class _Recorder(Analyzer):
    """Records the layers it is fed and what the feeder holds at that moment."""

    layerwise = True

    def __init__(self) -> None:
        self.seen: list[int] = []
        self.held: list[list[str]] = []
        self.feeder = None

    def hook_names(self, model):
        return [f"blocks.{i}.attn.hook_pattern" for i in range(model.n_layers)]

    def update_layer(self, batch, layer, cache):
        assert list(cache) == [f"blocks.{layer}.attn.hook_pattern"]
        self.seen.append(layer)
        if self.feeder is not None:
            self.held.append(sorted(self.feeder.store))

    def result(self):
        return {}


def test_runner_feeds_layers_in_order_and_holds_one_layer_at_a_time() -> None:
    torch.manual_seed(0)
    cfg = TransformerConfig(d_model=16, n_heads=2, n_layers=3, d_mlp=32, vocab_size=20, n_ctx=8)
    model = HookedTransformer(cfg).eval()
    recorder = _Recorder()
    feeder = LayerFeeder(model, [recorder])
    recorder.feeder = feeder
    ids = torch.randint(3, 20, (2, 6))
    batch = Batch(input_ids=ids, attention_mask=torch.ones_like(ids))
    with torch.no_grad(), model.hooks([(n, feeder.save) for n in feeder.names]):
        for _ in range(2):
            feeder.begin(batch)
            model(**batch.model_inputs())
            feeder.end()
    assert recorder.seen == [0, 1, 2, 0, 1, 2]
    # while layer L is analysed, the store holds layer L's pattern only
    assert recorder.held[:3] == [[f"blocks.{i}.attn.hook_pattern"] for i in range(3)]
    assert feeder.store == {}
    run_analyzers(model, [batch], [_Recorder()], show_progress=False)  # the public entry
