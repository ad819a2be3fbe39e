"""Command-line contracts: one-line `Error:` with exit 1 for every mistake, found before any
heavy import (torch, transformers, pandas, matplotlib) or model load."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

# Runs main(argv) in a fresh interpreter and reports its exit code and the heavy modules loaded.
PROBE = """
import json, sys
from attnlens.cli.app import main
try:
    main(json.loads(sys.argv[1]))
    code = 0
except SystemExit as exc:
    code = exc.code
heavy = [m for m in ("torch", "transformers", "pandas", "matplotlib") if m in sys.modules]
print(json.dumps({"code": code, "heavy": heavy}), file=sys.stderr)
"""


def probe(args: list[str], cwd: Path) -> tuple[int, list[str], list[str]]:
    """(exit code, stderr lines before the probe's report, heavy modules imported)."""
    result = subprocess.run([sys.executable, "-c", PROBE, json.dumps(args)], cwd=cwd,
                            capture_output=True, text=True, timeout=120)
    lines = result.stderr.strip().splitlines()
    report = json.loads(lines[-1])
    return report["code"], lines[:-1], report["heavy"]


def usage_cases(tmp: Path) -> list[tuple[list[str], str]]:
    """(arguments, text the one-line error must contain) for option-parsing mistakes."""
    return [
        (["analyze", "--batch-size", "0"], "'--batch-size'"),
        (["analyze", "--batch-size"], "'--batch-size' requires an argument"),
        (["analyze", "--batch-size", "x"], "'--batch-size'"),
        (["heads", "--margin", "3"], "'--margin'"),
        (["analyze", "--no-such-option"], "--no-such-option"),
        (["heads", "--max-length"], "see 'attnlens heads --help'"),
        (["eval", "stsb", "--pairs"], "see 'attnlens eval stsb --help'"),
        (["prune"], "give the evaluation data once: --pairs FILE"),
        (["eval", "stsb"], "Missing option '--pairs'"),
        (["spectrum", "a", "b"], "unexpected extra argument"),
        (["collapse", "--tokens", "1", "--synthetic"], "'--tokens'"),
        (["heads", "--query-block", "0"], "'--query-block'"),
        (["analyze", "--whole-matrix-limit", "-1"], "'--whole-matrix-limit'"),
        (["spectrum", "--top-k", "-1"], "'--top-k'"),
    ]


def path_cases(tmp: Path) -> list[tuple[list[str], str]]:
    """Option values and paths the runner checks before importing torch."""
    a_file = tmp / "a.txt"
    a_file.write_text("one sentence\n")
    full = tmp / "full"
    full.mkdir()
    (full / "keep.txt").write_text("mine\n")
    bad_probes = tmp / "probes.txt"
    bad_probes.write_text("0 5 6 5 7\n")
    return [
        (["analyze", "--text", str(tmp / "missing.txt")], "missing.txt does not exist"),
        (["analyze", "--text", str(tmp)], "is a folder"),
        (["analyze", "--text", str(a_file), "--treebank", str(a_file)], "either --text or"),
        (["analyze", "--parse"], "--parse parses a plain-text file"),
        (["analyze", "--format", "gif"], "unknown figure format gif"),
        (["analyze", "--out", str(a_file)], "is a file"),
        (["spectrum", "--device", "gpu"], "unknown device 'gpu'"),
        (["spectrum", "--dtype", "int8"], "unknown dtype 'int8'"),
        (["heads", "--backend", "torch"], "--backend 'torch' is not one of auto, native, hf"),
        (["analyze", "--device-map", "balanced"], "only 'auto' is supported"),
        (["analyze", "--max-memory", "cpu=1GiB"], "--max-memory needs --device-map auto"),
        (["asymmetry", str(tmp / "no-model")], "does not exist"),
        (["collapse", "--variants", "san,bogus"], "unknown variant(s) bogus"),
        (["analyze", "--null", "shuffled"], "--null must be one of random-init, none"),
        (["heads", "--null", "bogus"], "--null must be one of random-init, none"),
        (["collapse", "--depth", "3"], "only apply to --synthetic"),
        (["prune", "--data", str(tmp / "nope.csv")], "nope.csv does not exist"),
        (["prune", "--data", str(a_file), "--metric", "bleu"], "unknown --metric 'bleu'"),
        (["prune", "--data", str(a_file), "--order", "best"], "unknown order 'best'"),
        # the --export folder is checked before the converters (and torch) are imported
        (["prune", "--data", str(a_file), "--export", str(full)], "is not empty"),
        (["prune", "--data", str(a_file), "--export", "o", "--out", "o"], "separate folders"),
        (["eval", "stsb", "--pairs", str(tmp / "p.csv")], "p.csv does not exist"),
        # the language-model heads' options (docs/lm-heads.md)
        (["heads", "--probe-length", "0"], "--probe-length must be at least 1"),
        (["analyze", "--ablation", "half"], "--ablation must be one of zero, mean"),
        (["heads", "--probe-file", str(tmp / "nope.txt")], "nope.txt does not exist"),
        (["analyze", "--probe-file", str(bad_probes)], "does not repeat the first"),
        (["heads", "--no-probes", "--probe-file", str(bad_probes)], "contradict"),
        (["heads", "--sts-data", str(tmp / "sts.csv")], "sts.csv does not exist"),
    ]


@pytest.mark.parametrize("kind", ["usage", "path"])
def test_mistakes_are_one_line_errors_before_heavy_imports(kind: str, tmp_path: Path) -> None:
    cases = usage_cases(tmp_path) if kind == "usage" else path_cases(tmp_path)
    for args, expected in cases:
        code, lines, heavy = probe(args, tmp_path)
        assert code == 1, (args, lines)
        assert len(lines) == 1 and lines[0].startswith("Error: "), (args, lines)
        assert expected in lines[0], (args, lines)
        assert heavy == [], (args, heavy)
    assert not (tmp_path / "attnlens-report").exists()


def test_help_and_bare_command_exit_zero_without_heavy_imports(tmp_path: Path) -> None:
    for args in ([], ["--help"], ["analyze", "--help"], ["eval"]):
        code, _, heavy = probe(args, tmp_path)
        assert code == 0 and heavy == [], args


def test_every_command_uses_the_shared_runner() -> None:
    """Each command has the runner's options, spelled the same way."""
    import inspect

    from attnlens.cli.app import COMMAND_MODULES, app
    from typer.main import get_command

    group = get_command(app)
    shared = {"--quiet"}
    model_commands = {"analyze", "heads", "spectrum", "asymmetry", "collapse", "prune"}
    folder_commands = {"report", "compare"}  # read report folders, load no model
    for name in COMMAND_MODULES:
        cmd = group.commands[name]
        if name == "eval":
            cmd = cmd.commands["stsb"]
        if name == "models":
            continue
        options = {o for p in cmd.params for o in getattr(p, "opts", [])}
        assert shared <= options, name
        if name not in folder_commands:
            assert {"--device", "--dtype", "--allow-pickle", "--backend"} <= options, name
        if name in model_commands:
            assert "--out" in options and "--format" in options, name
        if name in model_commands - {"prune"}:
            assert {"--text", "--treebank", "--parse"} <= options, name
        assert "run" not in inspect.signature(cmd.callback).parameters


def test_usage_lines_name_the_arguments_as_typed() -> None:
    """Usage lines read as a user types the command (not Click's {folder} or
    [[MODEL] TEXT...]...), and `--help` prints them."""
    import click
    from attnlens.cli.app import app
    from typer.main import get_command

    group = get_command(app)
    expected = {
        "report": "[OPTIONS] DIR",
        "compare": "[OPTIONS] DIR_A DIR_B",
        "view": "[OPTIONS] [MODEL] TEXT",
        "rollout": "[OPTIONS] [MODEL] [TEXT]...",
    }
    for name, arguments in expected.items():
        cmd = group.commands[name]
        with click.Context(cmd, info_name=name) as ctx:
            assert " ".join(cmd.collect_usage_pieces(ctx)) == arguments, name
    for name in ("report", "compare"):  # what --help prints
        result = subprocess.run([sys.executable, "-m", "attnlens.cli", name, "--help"],
                                capture_output=True, text=True, timeout=120)
        line = next(t for t in result.stdout.splitlines() if "Usage:" in t)
        assert line.split() == ["Usage:", "attnlens", name, *expected[name].split()], line
