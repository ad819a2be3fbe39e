"""`attnlens models`: every supported architecture; --verify measures parity live."""

from __future__ import annotations

from attnlens.cli.app import app
from typer.testing import CliRunner

from attnlens.errors import ConfigError
from attnlens.loaders import CONVERTERS, supported_architectures
from attnlens.loaders.verify import TINY_TOL


def test_models_lists_every_architecture_without_typed_in_numbers():
    result = CliRunner().invoke(app, ["models", "--markdown"])
    assert result.exit_code == 0, result.output
    lines = result.output.strip().splitlines()
    assert lines[0] == "| family | model_type | architectures | heads | export |"
    assert len(lines) == 2 + len(CONVERTERS)
    for architecture in supported_architectures():
        assert architecture in result.output
    assert all(conv.export is not None for conv in CONVERTERS.values())
    assert not any(hasattr(conv, "parity") for conv in CONVERTERS.values())


def test_models_table_renders():
    result = CliRunner().invoke(app, ["models"])
    assert result.exit_code == 0, result.output
    assert "Qwen2" in result.output and "GPT-2" in result.output


def test_verify_measures_each_architecture_of_the_chosen_families():
    result = CliRunner().invoke(app, ["models", "--verify", "--markdown",
                                      "--family", "roberta,qwen2"])
    assert result.exit_code == 0, result.output
    lines = result.output.strip().splitlines()
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    assert header == ["family", "model_type", "architecture", "head", "attention",
                      "hidden states", "logits", f"within {TINY_TOL:g}"]
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in lines[2:]]
    expected = [*CONVERTERS["roberta"].architectures, *CONVERTERS["qwen2"].architectures]
    assert [r[2] for r in rows] == expected
    for row in rows:
        measured = [float(v) for v in row[4:7] if v != "-"]
        assert all(0.0 <= v <= TINY_TOL for v in measured) and row[7] == "yes"
        assert (row[6] == "-") == (row[3] == "hidden states")  # logits only with a head


def test_unknown_family_is_refused():
    result = CliRunner().invoke(app, ["models", "--family", "xlnet"])
    assert isinstance(result.exception, ConfigError) and "xlnet" in str(result.exception)
