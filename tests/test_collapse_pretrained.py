"""Rank collapse on the real MiniLM: block variants, head paths, report section and CLI.

Stated results (float64 variants, built-in sample sentences; README section "collapse" has the
full-corpus figures): pure attention on MiniLM's weights is below 1e-13 at depth 6 while the
full model's geometric-mean relative residual stays above 0.5 at every depth, and more than
1000x above pure attention from depth 3 on; san+skip stays above 0.1.
"""

from __future__ import annotations

import copy

import pandas as pd
import pytest
import torch
from attnlens.cli.app import app
from typer.testing import CliRunner

from attnlens.data.text import sample_sentences, text_batches
from attnlens.errors import ConfigError
from attnlens.measures.collapse.paths import PathCollapse
from attnlens.measures.collapse.residual import depth_hook_names, relative_residual
from attnlens.measures.collapse.section import CollapseSection
from attnlens.measures.collapse.variant_collapse import VariantCollapse, cast_weights, run_variant
from attnlens.model.config import TransformerConfig
from attnlens.model.transformer import HookedTransformer
from attnlens.report.analyze import analyze, default_sections
from attnlens.stream.base import Batch
from attnlens.stream.runner import run_analyzers


@pytest.fixture(scope="module")
def batches(minilm):
    _, tokenizer = minilm
    return text_batches(tokenizer, sample_sentences(), batch_size=16, max_length=128)


@pytest.fixture(scope="module")
def small_batches(minilm):
    """Two batches of 3 sentences (cheap runs of the merge, section and CLI paths)."""
    _, tokenizer = minilm
    return text_batches(tokenizer, sample_sentences()[:6], batch_size=3, max_length=128)


@pytest.fixture(scope="module")
def measured(minilm, batches):
    model, _ = minilm
    variants = VariantCollapse.for_model(model, per_batch=2)
    paths = PathCollapse.for_model(model, n_paths=12)
    run_analyzers(model, batches, [variants, paths], show_progress=False)
    return variants, paths


def curve(table: pd.DataFrame, variant: str, norm: str = "composite") -> pd.Series:
    rows = table[(table["variant"] == variant) & (table["norm"] == norm)]
    return rows.set_index("depth").sort_index()["geo_mean"]


def test_full_model_stays_far_above_pure_attention(measured) -> None:
    variants, _ = measured
    assert variants.sentences == 2 * 4  # 2 of each batch (16, 16, 16, 2 sentences)
    table = variants.result()["collapse_variants"]
    assert list(table["variant"].unique()) == ["san", "san+skip", "san+mlp", "san+ln", "full"]
    for norm in ("composite", "frobenius"):
        full, san = curve(table, "full", norm), curve(table, "san", norm)
        assert list(full.index) == list(range(7))
        assert full.min() > 0.5
        # pure attention on MiniLM's weights: rank one by depth 6. float64 variants, so the
        # floor is ~2.2e-16 x sqrt(tokens) (measured 3.2e-16); float32 would stop near 1e-7
        assert san.iloc[-1] < 1e-13
        assert (full.loc[3:] > 1e3 * san.loc[3:]).all()
        # Same embeddings, so depth 0 is the same for every variant.
        # exact: the same embedding ops for every variant
        assert table[table["depth"] == 0].groupby("norm")["geo_mean"].nunique().eq(1).all()
    skip = curve(table, "san+skip")
    assert skip.min() > 0.1


def test_full_variant_reproduces_the_model(minilm, batches) -> None:
    model, _ = minilm
    batch = batches[0]
    inputs = batch.model_inputs()
    names = depth_hook_names(model.n_layers)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    with torch.no_grad():
        _, ref = model.run_with_cache(**inputs, names_filter=names)
        double = copy.deepcopy(model).double()  # a copy made by the test only, to compare
        _, ref64 = double.run_with_cache(**inputs, names_filter=names)
    got = run_variant(model, inputs, "full")  # the model's own weights and dtype
    got64 = run_variant(model, inputs, "full", cast_weights(model, torch.float64))
    for name, hidden, hidden64 in zip(names, got, got64, strict=True):
        assert torch.equal(ref[name], hidden)  # the same operations in the same order
        assert torch.equal(ref64[name], hidden64)
    # The loaded model is left as it was: its weights, dtype and hooks.
    assert model.dtype == torch.float32 and not model.blocks[0].attn.hook_pattern.has_hooks
    assert all(torch.equal(p, before[n]) for n, p in model.named_parameters())
    san = run_variant(model, inputs, "san")
    # float32 pure attention, depth 6: rank one down to fp32 noise, ~1.19e-7 x sqrt(d) ~ 2e-6
    # relative (measured 1.3e-7); MiniLM's full model stays above 0.5
    assert relative_residual(san[-1], batch.attention_mask).max() < 1e-3


def test_paths_collapse_with_length(minilm, measured) -> None:
    model, paths = measured[1].heads_per_layer, measured[1]
    assert model == [12] * 6 and paths.sentences == 50
    table = paths.result()["path_collapse"].set_index("path_length")
    assert list(table.index) == [1, 2, 3, 4, 5, 6] and (table["n"] == 12).all()
    geo = table["geo_mean"]
    assert (geo.diff().dropna() < 0).all()  # longer paths are closer to rank one
    assert geo.loc[6] < geo.loc[1] / 50  # measured: 0.36 -> 8e-4 with 32 paths
    assert (table["min"] <= geo).all() and (geo <= table["max"]).all()
    samples = paths.result()["path_samples"]
    assert len(samples) == 6 * 12 and samples["residual"].between(0, 1).all()


def test_path_merge_equals_one_pass(minilm, small_batches) -> None:
    model, _ = minilm
    whole, first, second = (PathCollapse.for_model(model, n_paths=4) for _ in range(3))
    run_analyzers(model, small_batches, [whole], show_progress=False)
    run_analyzers(model, small_batches[:1], [first], show_progress=False)
    run_analyzers(model, small_batches[1:], [second], show_progress=False)
    a = whole.result()["path_samples"]["residual"]
    b = first.merge(second).result()["path_samples"]["residual"]
    # exact: the same batches and shapes give the same float64 residuals (measured 0.0)
    assert torch.allclose(torch.tensor(a.values), torch.tensor(b.values), rtol=1e-12)
    with pytest.raises(ConfigError):
        whole.merge(PathCollapse.for_model(model, n_paths=5))


def test_analyze_runs_the_collapse_section(minilm, small_batches, tmp_path) -> None:
    assert any(isinstance(s, CollapseSection) for s in default_sections())
    model, tokenizer = minilm
    outputs = analyze(model, tokenizer, small_batches, tmp_path, sections=[CollapseSection()],
                      show_progress=False)
    (output,) = outputs
    assert set(output.tables) == {"collapse_variants", "collapse_fits", "path_collapse",
                                  "path_samples"}
    for name in ("collapse_variants", "path_collapse"):
        assert (tmp_path / "figures" / f"{name}.svg").read_text().startswith("<?xml")
        assert (tmp_path / "tables" / f"{name}.csv").is_file()
        assert (tmp_path / "tables" / f"{name}.md").is_file()
    assert "pure attention" in output.summary.lower()
    assert "Rank collapse" in (tmp_path / "index.html").read_text()


def test_cli_synthetic_and_its_errors(tmp_path) -> None:
    runner = CliRunner()
    out = tmp_path / "syn"
    result = runner.invoke(app, [
        "collapse", "--synthetic", "--depth", "6", "--seeds", "2", "--width", "16",
        "--heads", "2", "--tokens", "8", "--variants", "san,full", "--out", str(out), "-q",
    ])
    assert result.exit_code == 0, result.output
    curves = pd.read_csv(out / "synthetic_collapse.csv")
    assert set(curves["variant"]) == {"san", "full"} and curves["depth"].max() == 6
    assert (out / "synthetic_fit.svg").is_file() and (out / "synthetic_fits.md").is_file()
    for args, message in (
        (["--depth", "5"], "only apply to --synthetic"),
        (["--synthetic", "--text", __file__], "drop MODEL, --text"),
        (["--synthetic", "--paths", "3"], "--paths"),
        (["--synthetic", "--variants", "san,bogus"], "unknown variant"),
        (["--synthetic", "--width", "10", "--heads", "3"], "divisible"),
    ):
        result = runner.invoke(app, ["collapse", *args, "--out", str(tmp_path / "e")])
        assert isinstance(result.exception, ConfigError), result.output
        assert message in str(result.exception)


def test_cli_pretrained(tmp_path) -> None:
    text = tmp_path / "s.txt"
    text.write_text("The cat sat on the mat.\nA dog barked twice at the moon last night.\n")
    result = CliRunner().invoke(app, [
        "collapse", "--text", str(text), "--paths", "3", "--variants", "san,full",
        "--out", str(tmp_path / "pre"), "-q",
    ])
    assert result.exit_code == 0, result.output
    table = pd.read_csv(tmp_path / "pre" / "tables" / "collapse_variants.csv")
    assert set(table["variant"]) == {"san", "full"} and (table["n"] == 2).all()
    paths = pd.read_csv(tmp_path / "pre" / "tables" / "path_collapse.csv")
    assert list(paths["path_length"]) == [1, 2, 3, 4, 5, 6] and (paths["n"] == 3).all()


def test_variants_and_paths_on_a_pruned_pre_norm_causal_model() -> None:
    """Llama-like block (pre-RMSNorm, rotary, causal, gated MLP, LM head), pruned heads."""
    torch.manual_seed(0)
    cfg = TransformerConfig(
        d_model=16, n_layers=3, n_heads=4, d_mlp=32, vocab_size=40, positional="rotary",
        norm="rmsnorm", norm_position="pre", final_norm=True, causal=True, gated_mlp=True,
        head="lm", heads_per_layer=[4, 1, 2], qkv_bias=False,
    )
    model = HookedTransformer(cfg).eval()
    ids = torch.randint(0, 40, (3, 7))
    mask = torch.ones(3, 7, dtype=torch.long)
    mask[2, 4:] = 0
    batch = Batch(input_ids=ids, attention_mask=mask)
    variants = VariantCollapse.for_model(model)
    paths = PathCollapse.for_model(model, n_paths=50)
    run_analyzers(model, [batch], [variants, paths], show_progress=False)
    curves = variants.result()["collapse_variants"]
    assert len(curves) == 5 * 2 * 4 and curves[["mean", "min", "max"]].notna().all().all()
    assert (curves["n"] == 3).all()
    table = paths.result()["path_collapse"].set_index("path_length")
    # All paths exist in this small model: 7 of length 1, 4*1 + 4*2 + 1*2 = 14, 4*1*2 = 8.
    assert list(table["n"]) == [7, 14, 8]
    names = depth_hook_names(model.n_layers)
    with torch.no_grad():
        _, ref = model.run_with_cache(**batch.model_inputs(), names_filter=names)
    got = run_variant(model, batch.model_inputs(), "full")
    assert all(torch.equal(ref[n], h) for n, h in zip(names, got, strict=True))
