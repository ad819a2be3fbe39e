"""One validator for every number a user gives (attnlens/numeric.py), run by the command runner
on every int and float option of every command before anything else.

The walk over the app is the mechanism's test: a new numeric option is covered without a new
row. Before the validator, ``--max-length 99999999999999999999`` reached the tokenizer's Rust
code, ``--budget-mb inf`` an ``int()``, ``--l0-temperature nan`` the gates.
"""

from __future__ import annotations

import math
import signal
import sys

import pytest

from attnlens.errors import ConfigError
from attnlens.loaders.checkpoint import NO_LOAD_ENV
from attnlens.numeric import INT_MAX, Limit, check_number, parse_numbers, range_text

# Arguments a command needs before Click hands its options to the runner (files need not exist:
# numbers are checked first).
REQUIRED = {"prune": ["--data", "d.csv"], "eval stsb": ["--pairs", "p.csv"], "view": ["Hi."],
            "report": ["rep"], "compare": ["a", "b"]}


def _numeric_options() -> list[tuple[str, str, bool]]:
    """(command path, --option, integer) of every int or float option of every command."""
    import typer
    from attnlens.cli.app import app

    found = []

    def walk(command, path: list[str]) -> None:
        if hasattr(command, "commands"):
            for name, sub in command.commands.items():
                walk(sub, [*path, name])
            return
        for param in command.params:
            annotation = getattr(getattr(param, "type_descriptor", None), "annotation", None)
            kinds = set(getattr(annotation, "__args__", ())) or {annotation}
            number = next((k for k in (int, float) if k in kinds), None)
            if number is not None and param.opts[0].startswith("--"):
                found.append((" ".join(path), param.opts[0], number is int))

    walk(typer.main.get_command(app), [])
    return found


OPTIONS = _numeric_options()


def test_the_walk_finds_the_numeric_options():
    names = {(command, option) for command, option, _ in OPTIONS}
    assert len(OPTIONS) >= 50
    assert {("spectrum", "--max-length"), ("view", "--budget-mb"), ("prune", "--l0-lr"),
            ("heads", "--bootstrap"), ("eval stsb", "--batch-size")} <= names


@pytest.mark.parametrize(("command", "option", "integer"), OPTIONS,
                         ids=[f"{c}{o}" for c, o, _ in OPTIONS])
def test_every_numeric_option_refuses_overflow_and_infinity(command, option, integer, tmp_path,
                                                            monkeypatch, capsys):
    """An integer past int64 and an infinite float: one ``Error:`` line naming the option,
    before anything is read (the load guard is set) and with nothing written."""
    from attnlens.cli.app import main

    value = "9" * 20 if integer else "inf"
    argv = [*command.split(), *REQUIRED.get(command, []), option, value]
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(NO_LOAD_ENV, "1")
    monkeypatch.setattr(sys, "argv", ["attnlens", *argv])
    handlers = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    try:
        with pytest.raises(SystemExit) as done:
            main()
    finally:
        signal.signal(signal.SIGINT, handlers[0])
        signal.signal(signal.SIGTERM, handlers[1])
    err = capsys.readouterr().err.strip()
    assert done.value.code == 1, err
    assert len(err.splitlines()) == 1 and err.startswith("Error: "), err
    assert option in err and NO_LOAD_ENV not in err, err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("value", "message"), [
    (float("nan"), "is not a finite number"),
    (float("inf"), "is not a finite number"),
    (-math.inf, "is not a finite number"),
    (2**31, "is out of range"),
    (10**40, "is out of range"),
])
def test_check_number_refuses_what_python_numbers_allow(value, message):
    with pytest.raises(ConfigError, match=f"--opt .* {message}"):
        check_number("--opt", value)


def test_check_number_ranges_and_open_ends():
    assert check_number("--x", 5, low=1) == 5
    assert check_number("--x", None) is None and check_number("--x", True) is True
    with pytest.raises(ConfigError, match=r"--x 0 is out of range; give a whole number from 1"):
        check_number("--x", 0, low=1)
    with pytest.raises(ConfigError, match=r"give a number in \(0, 100\]"):
        check_number("--l0-temperature", 0.0)  # its OPTION_LIMITS entry: above 0
    with pytest.raises(ConfigError, match="is not a whole number"):
        check_number("--x", 2.5, integer=True)
    assert check_number("--x", INT_MAX) == INT_MAX
    # the declared range narrows the option's own limit, never widens it
    assert Limit(0, 10).narrowed(2, 20) == Limit(2, 10)
    assert range_text(Limit(0.5, 1e6), integer=False) == "a number from 0.5 to 1000000"


def test_parse_numbers_lists():
    assert parse_numbers("--windows", "1, 2,4", integer=True, low=0, example="1,2") == (1, 2, 4)
    with pytest.raises(ConfigError, match="--windows takes whole numbers like 1,2, not '1e20'"):
        parse_numbers("--windows", "1e20", integer=True, example="1,2")
    with pytest.raises(ConfigError, match="--windows 100000000000000000000 is out of range"):
        parse_numbers("--windows", "100000000000000000000", integer=True, example="1,2")
    with pytest.raises(ConfigError, match="takes 2 numbers"):
        parse_numbers("--l0-stretch", "1", integer=False, count=2, example="-0.1,1.1")
    with pytest.raises(ConfigError, match="--lambda nan is not a finite number"):
        parse_numbers("--lambda", "0.1,nan", integer=False, low=0, example="0.1")


@pytest.mark.parametrize("field", ["temperature", "learning_rate", "init_log_alpha"])
def test_l0_settings_refuse_nan_through_the_api(field):
    """The library path too: NaN gates came from a NaN temperature, rate or initial value."""
    from attnlens.measures.pruning.l0 import L0Settings

    with pytest.raises(ConfigError, match="is not a finite number"):
        L0Settings(**{field: float("nan")}).validate()
