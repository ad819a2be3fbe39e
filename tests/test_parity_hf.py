"""Parity of the hf backend with eager attention over many model types (the sweep, in CI).

Each case is one row of `attnlens models --verify --all` (``loaders.verify_hf``): a tiny random
model of the type built from its config class's defaults by the generic shrink, run through
attnlens and with ``attn_implementation="eager"`` on the same padded batch. Every attention
probability and the final hidden states must agree within 1e-6 (the hf backend's fp32 target;
the same kernels run in the same order, so the sweep measures 0.0 for every type here). The
types span encoders, decoders (grouped-query, sliding-window, soft-capped, MoE, sinks),
encoder-decoders and vision encoders; the full sweep (every model type) is `make verify-models`.
"""

from __future__ import annotations

import pytest

from attnlens.loaders.verify_hf import TOLERANCE, verify_model_type

MODEL_TYPES = [
    # encoders
    "bert", "roberta", "xlm-roberta", "electra", "albert", "distilbert", "camembert",
    "modernbert", "nomic_bert", "eurobert", "mobilebert", "data2vec-text",
    # decoders
    "llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "gemma",
    "gemma2", "gemma3_text", "cohere", "cohere2", "phi", "phi3", "olmo", "olmo2", "olmoe",
    "granite", "gpt2", "gpt_bigcode", "gpt_neox", "opt", "starcoder2", "stablelm", "glm",
    "smollm3", "exaone4", "gpt_oss", "deepseek_v3", "helium", "apertus",
    # encoder-decoders
    "t5", "mt5", "bart", "plbart",
    # vision encoders
    "vit", "deit", "yolos",
]


def test_the_list_covers_at_least_40_types() -> None:
    assert len(set(MODEL_TYPES)) == len(MODEL_TYPES) >= 40


@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_hf_backend_equals_eager(model_type: str) -> None:
    row = verify_model_type(model_type)
    assert row.status == "verified", row.reason
    assert row.layers >= 2
    assert row.attention is not None and row.attention <= TOLERANCE
    assert row.hidden is not None and row.hidden <= TOLERANCE


@pytest.mark.parametrize(("model_type", "reason"), [
    ("bloom", "never called the attention interface"),  # attention written inline
    ("falcon", "fixed table by name"),  # picks its attention class from its own table
    ("segformer", "in a single-stack model"),  # pooled keys: not square self-attention
])
def test_models_outside_the_interface_are_refused_with_the_reason(model_type, reason) -> None:
    row = verify_model_type(model_type)
    assert row.status == "refused" and reason in row.reason
    assert row.attention is None


def test_the_command_prints_the_table_and_the_readme_takes_its_count(tmp_path) -> None:
    from attnlens.cli.app import app
    from typer.testing import CliRunner

    from attnlens.loaders.coverage_doc import update_readme

    result = CliRunner().invoke(app, ["models", "--verify", "--all", "--family",
                                      "llama,bloom", "--markdown"])
    assert result.exit_code == 0, result.output
    page = tmp_path / "coverage.md"
    page.write_text(result.output)
    assert "**1 of 2 model types verified**" in result.output
    assert "| llama | LlamaModel | hf | 0 | 0 | verified |" in result.output
    assert "| bloom | BloomModel | hf | - | - | refused: ConfigError: BloomModel never" in \
        result.output
    readme = tmp_path / "README.md"
    readme.write_text("x <!-- coverage -->old<!-- /coverage --> y\n")
    update_readme(readme, page)
    assert readme.read_text() == ("x <!-- coverage -->1 of the installed transformers' 2 model "
                                  "types verified<!-- /coverage --> y\n")
    bad = CliRunner().invoke(app, ["models", "--all"])  # main() prints it as one Error: line
    assert bad.exit_code == 1 and "--all goes with --verify" in str(bad.exception)
