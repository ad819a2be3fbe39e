"""`attnlens analyze` and `attnlens view` on saved checkpoints of families only the hf backend
runs (and Llama through it), and their patterns against Hugging Face's own eager attention."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import torch
from attnlens.cli.app import app
from typer.testing import CliRunner

import attnlens
from tests.hf_utils import TEXT, max_diff, save_checkpoint

# Every family issue 24 names: Llama 3, Qwen2.5/Qwen3, Gemma 2/3, Mistral, Phi-3, OLMo 2,
# Pythia (GPT-NeoX), OPT, StarCoder2, ModernBERT, XLM-R, ELECTRA.
FAMILIES = ["llama", "qwen2", "qwen3", "gemma2", "gemma3_text", "mistral", "phi3", "olmo2",
            "gpt_neox", "opt", "starcoder2", "modernbert", "xlm-roberta", "electra"]
runner = CliRunner()


@pytest.fixture(scope="module")
def text_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("hf-cli") / "text.txt"
    path.write_text("\n".join(TEXT) + "\n")
    return path


@pytest.mark.parametrize("model_type", FAMILIES)
def test_analyze_and_view_run_end_to_end(model_type: str, tmp_path: Path, text_file) -> None:
    folder = save_checkpoint(tmp_path / model_type, model_type)
    out = tmp_path / "report"
    result = runner.invoke(app, ["analyze", str(folder), "--text", str(text_file), "--out",
                                 str(out), "--backend", "hf", "-q"])
    assert result.exit_code == 0, result.output
    record = json.loads((out / "run.json").read_text())
    assert record["model"]["backend"] == "hf"
    assert record["model"]["model_type"] == model_type
    # --max-length left out: the record states the trained length used and its source
    from attnlens.loaders.trained_length import resolved_max_length

    trained = resolved_max_length(folder)  # config.json max_position_embeddings 64 (XLM-R: less)
    assert trained.tokens <= 64 and trained.source.startswith("config.json max_position")
    assert (record["options"]["max_length"], record["options"]["max_length_source"]) == (
        trained.tokens, trained.source)
    assert (out / "index.html").is_file()
    stats = (out / "tables" / "head_stats.csv").read_text()
    header = stats.splitlines()[0].split(",")  # kv_head after head for grouped-query models
    assert header[:2] == ["layer", "head"] and {"measure", "value"} <= set(header)
    assert "null_mean" in header  # held to the null model, on the hf backend too
    assert "run by the hf backend" in record["null"]["initialisation"]
    sections = {s["name"]: s for s in record["sections"]}
    collapse_notes = " ".join(sections["collapse"]["notes"])
    assert "Left out: the block variants" in collapse_notes  # said, not silently dropped
    scores = pd.read_csv(out / "tables" / "probe_scores.csv")
    copying = scores[scores["measure"] == "copying"]
    lm_notes = " ".join(sections["lm_heads"]["notes"])
    if model_type == "electra":  # 16-wide embeddings projected to the 32-wide stream
        assert copying.empty and "No copying scores: the token embedding is 16 wide" in lm_notes
    else:  # OV copying scores on the hf backend, for every head
        assert len(copying) == len(scores[scores["measure"] == "induction"]) > 0  # every head
        assert copying["value"].between(0, 1).all() and "No copying scores" not in lm_notes
    page = tmp_path / "view.html"
    result = runner.invoke(app, ["view", str(folder), TEXT[0], "--out", str(page),
                                 "--backend", "hf", "-q"])
    assert result.exit_code == 0, result.output
    assert page.stat().st_size > 1000


@pytest.mark.parametrize("model_type", FAMILIES)
def test_loaded_patterns_equal_hf_eager(model_type: str, tmp_path: Path) -> None:
    folder = save_checkpoint(tmp_path / model_type, model_type)
    model, tokenizer = attnlens.load(folder, backend="hf")
    inputs = tokenizer(TEXT, max_length=32)
    with torch.no_grad():
        _, cache = model.run_with_cache(**inputs, names_filter=lambda n: n.endswith("pattern"))
    from transformers import AutoModel

    eager = AutoModel.from_pretrained(folder, attn_implementation="eager").eval()
    accepted = {k: v for k, v in inputs.items() if k != "token_type_ids"
                or "token_type_ids" in eager.forward.__code__.co_varnames}
    with torch.no_grad():
        reference = eager(**accepted, output_attentions=True)
    for layer, expected in enumerate(reference.attentions):
        # the same kernels in the same order: measured 0.0; 1e-6 is the fp32 target
        assert max_diff(cache["pattern", layer], expected) <= 1e-6, layer


@pytest.mark.parametrize("model_type", ["llama", "t5", "bart"])
def test_both_backends_give_the_same_tables(model_type: str, tmp_path: Path) -> None:
    """A converter family through either backend: the same head statistics, spectra and
    weight circuits (pre-norm folding in Llama and T5, none in post-norm BART)."""
    from attnlens.data.text import text_batches
    from attnlens.measures.circuits.circuits import circuit_tables
    from attnlens.measures.heads.head_stats import HeadStats
    from attnlens.measures.spectrum.spectrum import SpectrumAnalyzer
    from attnlens.model.protocol import attention_types, has_several_attention_types
    from attnlens.stream.attention_view import AttentionView
    from attnlens.stream.runner import run_analyzers

    folder = save_checkpoint(tmp_path / model_type, model_type)
    results = []
    for backend in ("native", "hf"):
        model, tokenizer = attnlens.load(folder, backend=backend)
        analyzers = []
        for attention in attention_types(model):
            view = AttentionView(model, attention) if has_several_attention_types(model) \
                else model
            for analyzer in (HeadStats.for_model(view, tokenizer),
                             SpectrumAnalyzer.for_model(view)):
                analyzer.attention = None if view is model else attention
                analyzers.append(analyzer)
        run_analyzers(model, text_batches(tokenizer, TEXT, batch_size=2), analyzers,
                      show_progress=False)
        tables = [table for a in analyzers for table in a.result().values()]
        for attention in attention_types(model):
            view = AttentionView(model, attention) if has_several_attention_types(model) \
                else model
            tables += list(circuit_tables(view).values())
        results.append(tables)
    for native, hf in zip(*results, strict=True):
        numbers = native.select_dtypes("number").columns
        assert list(native.columns) == list(hf.columns)
        # patterns equal HF eager on both backends (native: <= 1e-5 attention, measured 0 on
        # Llama and T5): tables of means of them agree to 1e-6
        assert float((native[numbers] - hf[numbers]).abs().max().max()) <= 1e-6
