"""`attnlens models`: every supported architecture with the parity it reached."""

from __future__ import annotations

from attnlens.cli.app import app
from typer.testing import CliRunner

from attnlens.loaders import CONVERTERS, supported_architectures


def test_models_lists_every_architecture_and_tolerance():
    result = CliRunner().invoke(app, ["models", "--markdown"])
    assert result.exit_code == 0, result.output
    lines = result.output.strip().splitlines()
    assert lines[0].startswith("| family | model_type | architectures | heads |")
    assert len(lines) == 2 + len(CONVERTERS)
    for architecture in supported_architectures():
        assert architecture in result.output
    for conv in CONVERTERS.values():
        # The recorded parity is a measured difference within the 1e-5 requirement (a number in
        # the table, not computed here; the parity tests bound the live differences).
        value = float(conv.parity.split()[0])
        assert 0.0 <= value <= 1e-5
        assert conv.export is not None


def test_models_table_renders():
    result = CliRunner().invoke(app, ["models"])
    assert result.exit_code == 0, result.output
    assert "Qwen2" in result.output and "GPT-2" in result.output
