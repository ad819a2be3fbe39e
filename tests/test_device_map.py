"""--device-map auto: a model split across devices gives the unsplit model's numbers.

A CPU-only machine has two accelerate "devices": CPU memory and disk. A ``max_memory`` too
small for the whole model forces a real split: the first blocks stay in memory, the rest are
written to disk and read back for their block's forward. The forward, the hook points and
the activation analyzers must then give exactly what the unsplit model gives.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnlens.analysis.head_stats import HeadStats
from attnlens.analysis.runner import run_analyzers
from attnlens.analysis.spectrum import SpectrumAnalyzer
from attnlens.data.batch import Batch
from attnlens.errors import ConfigError
from attnlens.loaders.device_map import dispatch, parse_max_memory, plan
from tests.helpers import tiny_inputs, tiny_model

pytest.importorskip("accelerate")


def parameter_bytes(module: torch.nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in module.parameters())


def split_model(tmp_path, seed: int = 1):
    model = tiny_model(seed=seed, n_layers=4)
    reference = tiny_model(seed=seed, n_layers=4)  # the same weights, never dispatched
    # Room for the embeddings and about two blocks: the rest must go to disk.
    budget = parameter_bytes(model) - 2 * parameter_bytes(model.blocks[0])
    device_map = plan(model, {"cpu": budget, "disk": 10**9})
    assert "disk" in device_map.values() and "cpu" in device_map.values()
    return dispatch(model, device_map, offload_dir=str(tmp_path / "offload")), reference


def test_split_forward_and_hooks_equal_the_unsplit_model(tmp_path):
    split, reference = split_model(tmp_path)
    inputs = tiny_inputs()
    names = lambda n: n.endswith(("hook_pattern", "hook_resid_post"))  # noqa: E731
    with torch.no_grad():
        out, cache = split.run_with_cache(**inputs, names_filter=names)
        ref_out, ref_cache = reference.run_with_cache(**inputs, names_filter=names)
    assert torch.equal(out, ref_out)  # same weights, same kernels, same device: same bits
    assert list(cache) == list(ref_cache)
    for name in cache:
        assert torch.equal(cache[name], ref_cache[name]), name


def test_activation_analyzers_on_a_split_model(tmp_path):
    split, reference = split_model(tmp_path, seed=2)
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 50, (4, 10), generator=gen)
    mask = torch.ones_like(ids)
    mask[2, 7:] = 0
    batches = [Batch(input_ids=ids * mask, attention_mask=mask,
                     special_mask=torch.zeros_like(mask, dtype=torch.bool))]
    tables = []
    for model in (split, reference):
        analyzers = [SpectrumAnalyzer.for_model(model),
                     HeadStats(model.n_layers, model.cfg.n_heads, {1}, {2}, {7})]
        run_analyzers(model, batches, analyzers, show_progress=False)
        tables.append({k: v for a in analyzers for k, v in a.result().items()})
    for name, table in tables[1].items():
        np.testing.assert_array_equal(tables[0][name]["value"], table["value"], err_msg=name)


def test_max_memory_spec_and_refusals():
    assert parse_max_memory("0=20GiB, 1=20GiB,cpu=60GiB") == {0: "20GiB", 1: "20GiB",
                                                              "cpu": "60GiB"}
    assert parse_max_memory(None) is None
    with pytest.raises(ConfigError, match="DEVICE=AMOUNT"):
        parse_max_memory("cpu:60GiB")
    model = tiny_model(n_layers=4)
    too_small = {"cpu": parameter_bytes(model.blocks[0]), "disk": 10**9}
    with pytest.raises(ConfigError, match="does not fit"):
        dispatch(model, "auto", too_small, allow_disk=False)
