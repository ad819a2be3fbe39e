"""`attnlens models --verify --all` as a user runs it: the terminal table, bad options as one
`Error:` line before any model is built, and exit status 1 when attnlens differs from eager.

The sweep itself (one row per model type) is tested in test_parity_hf.py; these run it on one
or two model types only.
"""

from __future__ import annotations

import pytest
from attnlens.cli.app import app, main
from typer.testing import CliRunner

from attnlens.loaders import verify_hf

runner = CliRunner()


def run_main(capsys, *args: str) -> tuple[int, str, str]:
    """``attnlens ARGS`` through the entry point: (exit status, stdout, stderr)."""
    with pytest.raises(SystemExit) as info:
        main(list(args))
    out, err = capsys.readouterr()
    return info.value.code, out, err


def test_the_terminal_table_has_the_count_and_a_row_per_type() -> None:
    result = runner.invoke(app, ["models", "--verify", "--all", "--family", "llama,bloom"],
                           env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    assert "1 of 2 model types verified" in result.output
    rows = {line.split("│")[1].strip(): line for line in result.output.splitlines()
            if line.count("│") >= 7}
    assert set(rows) == {"llama", "bloom"}
    header = next(line for line in result.output.splitlines() if "model_type" in line)
    assert [c.strip() for c in header.split("┃")[1:-1]] == [
        "model_type", "architecture", "backend", "attention", "hidden states", "status"]
    assert [c.strip() for c in rows["llama"].split("│")[1:-1]] == [
        "llama", "LlamaModel", "hf", "0", "0", "verified"]
    assert "refused: ConfigError: BloomModel never called the attention interface" in \
        rows["bloom"]


@pytest.mark.parametrize(("args", "message"), [
    (["--verify", "--all", "--family", "llama,nosuch_type"],
     "Error: unknown --family nosuch_type: not a model_type of the installed transformers."),
    (["--all"], "Error: --all goes with --verify: attnlens models --verify --all."),
])
def test_bad_options_are_one_line_before_any_model_is_built(capsys, monkeypatch, args,
                                                            message) -> None:
    def no_sweep(*_args, **_kwargs):
        raise AssertionError("the sweep ran")

    monkeypatch.setattr(verify_hf, "sweep", no_sweep)
    code, out, err = run_main(capsys, "models", *args)
    assert (code, out, err) == (1, "", message + "\n")


@pytest.mark.parametrize("markdown", [False, True], ids=["table", "markdown"])
def test_a_type_that_differs_from_eager_fails_the_command(capsys, monkeypatch,
                                                          markdown) -> None:
    """A tolerance below 0 makes llama's exact 0 a difference: the table is printed whole
    (so `make verify-models` leaves its .tmp page to read), then the command exits 1."""
    monkeypatch.setattr(verify_hf, "TOLERANCE", -1.0)
    monkeypatch.setenv("COLUMNS", "250")
    args = ["models", "--verify", "--all", "--family", "llama,bloom"]
    code, out, err = run_main(capsys, *args, *(["--markdown"] if markdown else []))
    assert code == 1 and "Traceback" not in err
    # the last stderr line (the table's progress bar may come before it)
    assert err.splitlines()[-1] == ("Error: the hf backend differs from eager attention for "
                                    "llama (figures in the table above); report it.")
    assert "differs: max difference 0 > -1" in out
    assert "bloom" in out  # every row, not only up to the first failure
