"""CUDA: forward, hooks, analyzers, `analyze` and `prune` on a GPU (skipped without one).

Run on a GPU machine:  pytest -q tests/test_cuda.py
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from attnlens.data.batch import Batch
from attnlens.measures.heads.head_stats import HeadStats
from attnlens.measures.spectrum.spectrum import SpectrumAnalyzer
from attnlens.stream.runner import run_analyzers
from tests.fixtures import run_cli
from tests.helpers import tiny_inputs, tiny_model

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU")


def patterns(model, inputs) -> list[torch.Tensor]:
    names = [f"blocks.{i}.attn.hook_pattern" for i in range(model.n_layers)]
    with torch.no_grad():
        out, cache = model.run_with_cache(**inputs, names_filter=names)
    return [out, *(cache[n] for n in names)]


def test_forward_and_hooks_on_cuda_match_the_cpu():
    model = tiny_model(seed=1)
    inputs = tiny_inputs()
    cpu = patterns(model, inputs)
    gpu_inputs = {k: v.cuda() for k, v in inputs.items()}
    gpu = patterns(model.cuda(), gpu_inputs)
    for a, b in zip(cpu, gpu, strict=True):
        assert b.is_cuda
        # fp32 on both (TF32 off by default for matmul): rounding of sums of ~32 terms.
        torch.testing.assert_close(b.cpu(), a, rtol=0, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_forward_on_cuda(dtype):
    model = tiny_model(seed=1)
    inputs = tiny_inputs()
    reference = patterns(model, inputs)
    half = patterns(model.cuda().to(dtype), {k: v.cuda() for k, v in inputs.items()})
    for a, b in zip(reference, half, strict=True):
        assert b.dtype == dtype
        # bf16 keeps 8 bits (eps 7.8e-3), fp16 11 bits; a tiny model's activations are O(1).
        torch.testing.assert_close(b.float().cpu(), a, rtol=0, atol=0.1)
    for p in half[1:]:  # attention rows still sum to 1 within the dtype's rounding
        assert ((p.float().sum(-1) - 1).abs() < 2e-2).all()


def batches_for(model, n: int = 3) -> list[Batch]:
    gen = torch.Generator().manual_seed(0)
    out = []
    for _ in range(n):
        ids = torch.randint(5, 50, (4, 9), generator=gen)
        mask = torch.ones_like(ids)
        mask[1, 6:] = 0
        mask[3, 4:] = 0
        out.append(Batch(input_ids=ids * mask, attention_mask=mask,
                         special_mask=torch.zeros_like(mask, dtype=torch.bool)))
    return out


def test_analyzers_on_cuda_match_the_cpu():
    model = tiny_model(seed=3)
    results = {}
    for device in ("cpu", "cuda"):
        m = model.to(device)
        analyzers = [SpectrumAnalyzer.for_model(m), HeadStats(m.n_layers, m.cfg.n_heads,
                                                              {1}, {2}, {7})]
        run_analyzers(m, batches_for(m), analyzers, show_progress=False)
        results[device] = {k: v for a in analyzers for k, v in a.result().items()}
    for name, table in results["cpu"].items():
        # float32 patterns from other kernels (~1e-7), then float64 statistics.
        np.testing.assert_allclose(results["cuda"][name]["value"], table["value"], atol=1e-5,
                                   err_msg=name)


def test_no_synchronisation_per_layer_on_cuda():
    """CUDA's own count of synchronisations while each `analyze` analyzer runs on the sample
    treebank: the same for a 2-layer and a 4-layer model (nothing per layer)."""
    from attnlens.data.corpus import load_corpus
    from attnlens.report.analyze import default_sections
    from tests.pruning_toys import vocab_size, word_tokenizer
    from tests.sync_utils import count_cuda_syncs

    tokenizer = word_tokenizer()
    batches = load_corpus(text=None, treebank=None).batches(tokenizer, batch_size=8)[:2]
    counts = {}
    for layers in (2, 4):
        model = tiny_model(seed=0, n_layers=layers, vocab_size=vocab_size(), n_ctx=128,
                           n_token_types=0).cuda()
        run_analyzers(model, batches[:1], [], show_progress=False)  # warm-up
        with count_cuda_syncs() as base:
            run_analyzers(model, batches, [], show_progress=False)
        for section in default_sections():
            for analyzer in section.analyzers(model, tokenizer):
                with count_cuda_syncs() as found:
                    run_analyzers(model, batches, [analyzer], show_progress=False)
                counts.setdefault(type(analyzer).__name__, {})[layers] = len(found) - len(base)
    print("CUDA synchronisations per analyzer (2 and 4 layers, 2 batches):", counts)
    growing = {k: v for k, v in counts.items() if v[4] > v[2]}
    assert not growing, f"synchronisations growing with depth (2 vs 4 layers): {growing}"


def test_no_synchronisation_per_query_block_on_cuda():
    """Patterns fed in query blocks on the GPU: CUDA's count of synchronisations of every
    `analyze` analyzer is the same with blocks of 8 rows as with blocks of 4 (twice as many
    blocks), so nothing synchronises per block; and a block-reading analyzer's tables equal
    the whole-matrix path's."""
    from attnlens.data.corpus import load_corpus
    from attnlens.model.query_blocks import QueryBlocks
    from attnlens.report.analyze import default_sections
    from tests.pruning_toys import vocab_size, word_tokenizer
    from tests.sync_utils import count_cuda_syncs

    tokenizer = word_tokenizer()
    batches = load_corpus(text=None, treebank=None).batches(tokenizer, batch_size=8)[:2]
    model = tiny_model(seed=0, n_layers=2, vocab_size=vocab_size(), n_ctx=128,
                       n_token_types=0).cuda()
    run_analyzers(model, batches[:1], [], show_progress=False)  # warm-up
    counts = {}
    for section in default_sections():
        for rows in (8, 4):
            model.set_query_blocks(QueryBlocks(rows=rows))
            analyzers = section.analyzers(model, tokenizer)
            with count_cuda_syncs() as found:
                run_analyzers(model, batches, analyzers, show_progress=False)
            for analyzer in analyzers:
                counts.setdefault(type(analyzer).__name__, {})[rows] = len(found)
    model.set_query_blocks(QueryBlocks())
    print("CUDA synchronisations per section (blocks of 8 and of 4 rows):", counts)
    growing = {k: v for k, v in counts.items() if v[4] > v[8]}
    assert not growing, f"synchronisations growing with the number of blocks: {growing}"
    tables = {}
    for rows in (10_000, 5):
        model.set_query_blocks(QueryBlocks(rows=rows))
        stats = HeadStats.for_model(model, tokenizer)
        run_analyzers(model, batches, [stats], show_progress=False)
        tables[rows] = stats.result()["head_stats"]
    model.set_query_blocks(QueryBlocks())
    # the same rows from products of other shapes, summed block by block (float32 rounding)
    np.testing.assert_allclose(tables[5]["value"], tables[10_000]["value"], rtol=1e-5,
                               atol=1e-6)


# --- the commands on a GPU ---------------------------------------------------------------------
NO_FIGURE_WORKERS = {"ATTNLENS_FIGURE_WORKERS": "0"}


@pytest.fixture(scope="module")
def toy(tmp_path_factory) -> tuple[Path, Path, Path]:
    """A tiny BERT checkpoint with a word tokenizer, a text corpus and an STS pairs file."""
    from transformers import BertConfig, BertModel

    from tests.parity_utils import TINY, save_tiny
    from tests.pruning_toys import sentences, vocab_size, word_tokenizer, write_pairs

    folder = tmp_path_factory.mktemp("cuda-toy")
    save_tiny(BertModel, BertConfig(vocab_size=vocab_size(), **TINY), folder / "model")
    word_tokenizer().hf.save_pretrained(str(folder / "model"))
    text = folder / "corpus.txt"
    text.write_text("\n".join(sentences(24)) + "\n", encoding="utf-8")
    return folder / "model", text, write_pairs(folder / "pairs.csv", 32)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_analyze_command_on_cuda(toy, tmp_path, dtype):
    model, text, _ = toy
    outs = {}
    for device in ("cpu", "cuda"):
        out = tmp_path / device
        done = run_cli("analyze", str(model), "--text", str(text), "--out", str(out), "-q",
                       "--device", device, "--dtype", dtype if device == "cuda" else "float32",
                       env=NO_FIGURE_WORKERS)
        assert done.returncode == 0, done.stderr[-3000:]
        outs[device] = out
    spectrum = [pd.read_csv(outs[d] / "tables" / "spectrum_summary.csv")["value"]
                for d in ("cpu", "cuda")]
    # float32 on both devices: kernels round differently (~1e-6); bfloat16 patterns keep
    # 8 bits, so spectrum shares move by up to a few 1e-2.
    np.testing.assert_allclose(spectrum[1], spectrum[0], atol=1e-4 if dtype == "float32" else 0.1)


def test_prune_command_on_cuda(toy, tmp_path):
    model, _, pairs = toy
    curves = {}
    for device in ("cpu", "cuda"):
        out = tmp_path / device
        done = run_cli("prune", str(model), "--metric", "sts", "--pairs", str(pairs), "--order",
                       "importance,random", "--seeds", "1", "--step", "0.25", "--max-fraction",
                       "0.5", "--batch-size", "8", "--out", str(out), "-q", "--device", device,
                       env=NO_FIGURE_WORKERS)
        assert done.returncode == 0, done.stderr[-3000:]
        curves[device] = pd.read_csv(out / "prune_curve.csv", keep_default_na=False)
    cpu, gpu = curves["cpu"], curves["cuda"]
    assert list(cpu["heads_removed"]) == list(gpu["heads_removed"])  # same heads chosen
    # Spearman correlation of float32 embeddings from other kernels.
    np.testing.assert_allclose(gpu["metric"], cpu["metric"], atol=1e-4)


def test_device_map_splits_a_model_across_the_gpu_and_cpu_memory():
    pytest.importorskip("accelerate")
    from attnlens.loaders.device_map import dispatch, plan

    model, reference = tiny_model(seed=4, n_layers=4), tiny_model(seed=4, n_layers=4)
    block = sum(p.numel() * p.element_size() for p in model.blocks[0].parameters())
    total = sum(p.numel() * p.element_size() for p in model.parameters())
    device_map = plan(model, {0: total - block, "cpu": 10**9})  # all but about one block
    assert {0, "cpu"} <= set(device_map.values()), device_map
    split = dispatch(model, device_map, allow_disk=False)
    inputs = tiny_inputs()
    names = lambda n: n.endswith("hook_pattern")  # noqa: E731
    with torch.no_grad():
        out, cache = split.run_with_cache(**{k: v.to(split.device) for k, v in inputs.items()},
                                          names_filter=names)
        ref, ref_cache = reference.run_with_cache(**inputs, names_filter=names)
    # Blocks on the GPU and on the CPU: fp32 kernels of both devices, ~1e-7 each.
    torch.testing.assert_close(out.cpu(), ref, rtol=0, atol=1e-5)
    for name in ref_cache:
        torch.testing.assert_close(cache[name].cpu(), ref_cache[name], rtol=0, atol=1e-5)
