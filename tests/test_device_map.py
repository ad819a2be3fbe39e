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

from attnlens.data.batch import Batch
from attnlens.errors import ConfigError
from attnlens.loaders.device_map import dispatch, parse_max_memory, plan
from attnlens.measures.heads.head_stats import HeadStats
from attnlens.measures.spectrum.spectrum import SpectrumAnalyzer
from attnlens.stream.runner import run_analyzers
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


def test_max_memory_spec_is_checked_before_heavy_imports(tmp_path):
    from tests.test_cli_contracts import probe

    code, lines, heavy = probe(["analyze", "--device-map", "auto", "--max-memory", "cpu:1GiB"],
                               tmp_path)
    assert code == 1 and len(lines) == 1 and "DEVICE=AMOUNT" in lines[0] and heavy == []


def test_analyze_command_with_device_map_auto(tmp_path):
    """`attnlens analyze --device-map auto` end to end (on a CPU-only machine accelerate maps
    every block to CPU memory): the same tables as without it."""
    import json
    import os
    import subprocess
    import sys

    import pandas as pd
    from transformers import BertConfig, BertModel

    from tests.parity_utils import TINY, save_tiny
    from tests.pruning_toys import sentences, vocab_size, word_tokenizer

    save_tiny(BertModel, BertConfig(vocab_size=vocab_size(), **TINY), tmp_path / "model")
    word_tokenizer().hf.save_pretrained(str(tmp_path / "model"))
    text = tmp_path / "corpus.txt"
    text.write_text("\n".join(sentences(12)) + "\n", encoding="utf-8")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "ATTNLENS_FIGURE_WORKERS": "0"}
    tables = {}
    for name, extra in (("plain", []), ("mapped", ["--device-map", "auto",
                                                    "--max-memory", "cpu=2GiB"])):
        out = tmp_path / name
        done = subprocess.run([sys.executable, "-m", "attnlens.cli", "analyze",
                               str(tmp_path / "model"), "--text", str(text), "--out", str(out),
                               "-q", *extra], env=env, capture_output=True, text=True,
                              timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        tables[name] = pd.read_csv(out / "tables" / "spectrum_summary.csv")
    record = json.loads((tmp_path / "mapped" / "run.json").read_text(encoding="utf-8"))
    assert record["options"].get("device_map") == "auto", record["options"]
    # Same weights, same CPU kernels, same batches: identical values.
    pd.testing.assert_frame_equal(tables["plain"], tables["mapped"])
