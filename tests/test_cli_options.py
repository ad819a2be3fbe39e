"""One notation and one set of option names (issue 28 item 6): heads written L2H8, the corpus
cap --max-sentences, sentence pairs --pairs, --max-length = the model's trained length, help
that fits 80 columns with every option described and grouped in panels. In-process (Click's
test runner): no subprocess, no model loaded unless a test says so."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated

import pytest
import typer
from attnlens.cli import runner as cli_runner
from attnlens.cli.options import Quiet, hidden_alias
from attnlens.cli.runner import CommandRun
from typer.testing import CliRunner

from attnlens.errors import ConfigError

PANELS = {"Corpus", "Model", "Output", "Method", "Input", "Page"}


def _commands() -> list[tuple[list[str], object]]:
    from attnlens.cli.app import app

    found = []

    def walk(command, path: list[str]) -> None:
        if hasattr(command, "commands"):
            for name, sub in command.commands.items():
                walk(sub, [*path, name])
            return
        found.append((path, command))

    walk(typer.main.get_command(app), [])
    return found


COMMANDS = _commands()
IDS = [" ".join(path) for path, _ in COMMANDS]


def _options(command) -> list:
    return [p for p in command.params if type(p).__name__.endswith("Option")]


def _help(path: list[str]) -> str:
    from attnlens.cli.app import app

    result = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize(("path", "command"), COMMANDS, ids=IDS)
def test_help_fits_80_columns_with_every_option_whole_and_described(path, command) -> None:
    """`prune --help` cut `--importance-d…` at 80 columns and left --min-heads-per-layer
    undescribed; every command's help now shows each option's name whole at the start of its
    row, with a description, and no line wider than 80 columns."""
    text = _help(path)
    assert "…" not in text, text
    assert max(len(line) for line in text.splitlines()) <= 80
    for option in _options(command):
        if option.hidden:
            continue
        name = next(o for o in option.opts if o.startswith("--"))
        assert option.help, f"{IDS[COMMANDS.index((path, command))]} {name} has no description"
        # The row of the option: the panel's border, the required marker, then the name.
        assert re.search(rf"│\s+(\*\s+)?{re.escape(name)}(,|\s)", text), (name, text)


@pytest.mark.parametrize(("path", "command"), COMMANDS, ids=IDS)
def test_options_are_grouped_in_panels(path, command) -> None:
    """A command with more than a few options groups them (Corpus / Model / Output / Method,
    a large Method split into "Method: ..." panels); only --help is left in the general
    Options panel."""
    options = [o for o in _options(command) if not o.hidden and o.name != "help"]
    if path == ["models"]:  # three options of its own, no shared groups
        return
    panels = {getattr(o, "rich_help_panel", None) for o in options}
    panels = {"Method" if str(p).startswith("Method: ") else p for p in panels}
    assert panels <= PANELS, (path, panels)


def test_every_command_reading_a_corpus_caps_it_with_max_sentences() -> None:
    corpus_commands = [(p, c) for p, c in COMMANDS
                       if any("--text" in o.opts for o in _options(c))]
    assert {"analyze", "heads", "spectrum", "asymmetry", "collapse", "rollout", "sparse",
            "linear"} <= {" ".join(p) for p, _ in corpus_commands}
    for path, command in corpus_commands:
        opts = {o for option in _options(command) if not option.hidden for o in option.opts}
        assert "--max-sentences" in opts, path
        assert "--sentences" not in opts, path  # rollout's old name is a hidden alias


def test_sentence_pairs_are_pairs_everywhere() -> None:
    by_name = {" ".join(p): c for p, c in COMMANDS}
    for name in ("prune", "eval stsb"):
        assert any("--pairs" in o.opts and not o.hidden for o in _options(by_name[name])), name


def test_max_length_defaults_to_the_trained_length_everywhere() -> None:
    """--max-length was 128, 256 or 512 by command; now no command fixes a number: the
    default is the model's trained length, and the help says so."""
    for path, command in COMMANDS:
        for option in _options(command):
            if "--max-length" in option.opts:
                assert option.default is None, path
                assert "trained" in option.help, path


def test_default_max_length_reads_the_checkpoint(tmp_path: Path, minilm) -> None:
    from attnlens.loaders.trained_length import FALLBACK_LENGTH, default_max_length

    model, _ = minilm
    assert default_max_length(model.cfg.source.get("path")) == 256  # sentence_bert_config
    assert default_max_length(tmp_path) == FALLBACK_LENGTH == 512  # states no length
    assert default_max_length(None) == FALLBACK_LENGTH
    from attnlens.loaders.trained_length import resolved_max_length

    found = resolved_max_length(model.cfg.source.get("path"))
    assert (found.tokens, found.source) == (256, "sentence_bert_config.json max_seq_length")
    assert resolved_max_length(tmp_path).source.startswith("fallback")


def test_the_runner_sets_max_length_from_the_model(monkeypatch) -> None:
    """A command given no --max-length truncates at the model's trained length."""
    runner = cli_runner
    class Source:
        cfg = type("Cfg", (), {"source": {"path": None}})()

    loaded = (Source(), "tokenizer")
    monkeypatch.setattr(runner.ModelOptions, "load", lambda self: loaded)
    run = runner.CommandRun()
    assert run.load_model() == loaded and run.max_length == 512
    # the run record states the value used and where it came from, not null
    assert run.resolved_options() == {
        "max_length": 512, "max_length_source": "fallback: the checkpoint states no trained "
                                                "length"}
    run = runner.CommandRun(max_length=40)
    run.load_model()
    assert run.max_length == 40
    assert run.resolved_options() == {"max_length": 40, "max_length_source": "--max-length"}


def test_max_sentences_reads_the_first_sentences(tmp_path: Path) -> None:
    from attnlens.data.corpus import load_corpus

    text = tmp_path / "t.txt"
    text.write_text("one two\nthree four\nfive six\n", encoding="utf-8")
    assert load_corpus(text=text, max_sentences=2).texts == ["one two", "three four"]
    assert load_corpus(text=text, max_sentences=9).texts == ["one two", "three four",
                                                              "five six"]
    sample = load_corpus(max_sentences=3)
    assert len(sample) == 3 and sample.sentences == load_corpus().sentences[:3]


# Hidden aliases --------------------------------------------------------------------------------
def _alias_app(seen: dict):
    app = typer.Typer()

    def probe(run: CommandRun, matrix_sentences: int = typer.Option(
            50, "--matrix-sentences", help="Sentences."), quiet: Quiet = False,
            alias_sentences: Annotated[int | None, hidden_alias("--sentences")] = None) -> None:
        seen["value"] = matrix_sentences

    cli_runner.command(app, "alias-probe", aliases={"alias_sentences": "matrix_sentences"})(probe)

    @app.command("other")
    def other() -> None:  # a second command, so that the probe is a subcommand
        """Nothing."""

    return app


def test_an_old_option_name_warns_and_means_the_same() -> None:
    seen: dict = {}
    app = _alias_app(seen)
    result = CliRunner().invoke(app, ["alias-probe", "--sentences", "7"])
    assert result.exit_code == 0, result.output
    assert seen["value"] == 7
    assert "--sentences is an old name; use --matrix-sentences" in result.output
    result = CliRunner().invoke(app, ["alias-probe", "--matrix-sentences", "8"])
    assert seen["value"] == 8 and "old name" not in result.output
    help_text = CliRunner().invoke(app, ["alias-probe", "--help"]).output
    assert "--matrix-sentences" in help_text and "--sentences " not in help_text


def test_an_old_name_beside_the_new_one_is_refused() -> None:
    result = CliRunner().invoke(_alias_app({}), ["alias-probe", "--sentences", "7",
                                                 "--matrix-sentences", "8"])
    assert isinstance(result.exception, ConfigError)
    assert "give --matrix-sentences only" in str(result.exception)


def test_rollout_keeps_sentences_as_a_hidden_alias() -> None:
    by_name = {" ".join(p): c for p, c in COMMANDS}
    hidden = [o for o in _options(by_name["rollout"]) if o.hidden]
    assert [o.opts for o in hidden] == [["--sentences"]]


# prune: --pairs, and --data holding pairs -------------------------------------------------------
def test_prune_takes_pairs_or_data_once(tmp_path: Path) -> None:
    from attnlens.measures.pruning.job import data_option_of as _data_option

    pairs, text = tmp_path / "p.csv", tmp_path / "t.txt"
    assert _data_option("auto", pairs, None) == ("sts", pairs, "--pairs")
    assert _data_option("sts", pairs, None) == ("sts", pairs, "--pairs")
    assert _data_option("mlm", None, text) == ("mlm", text, "--data")
    with pytest.raises(ConfigError, match="give the evaluation data once"):
        _data_option("auto", pairs, text)
    with pytest.raises(ConfigError, match="give the evaluation data once"):
        _data_option("auto", None, None)
    with pytest.raises(ConfigError, match="scored by --metric sts, not 'mlm'"):
        _data_option("mlm", pairs, None)


def test_prune_data_with_pairs_warns(capsys) -> None:
    from attnlens.measures.pruning.job import warn_pairs_as_data as _warn_pairs_as_data

    _warn_pairs_as_data("sts", "--data")
    assert "--data with sentence pairs is the old spelling; use --pairs" in capsys.readouterr().err
    _warn_pairs_as_data("sts", "--pairs")
    _warn_pairs_as_data("mlm", "--data")
    assert capsys.readouterr().err == ""


def test_prune_pairs_refuses_a_treebank_before_the_model(tmp_path: Path, monkeypatch) -> None:
    from attnlens.cli.app import app

    from attnlens.loaders.checkpoint import NO_LOAD_ENV

    treebank = tmp_path / "t.conllu"
    treebank.write_text("1\tHi\thi\tINTJ\t_\t_\t0\troot\t_\t_\n\n", encoding="utf-8")
    monkeypatch.setenv(NO_LOAD_ENV, "1")
    result = CliRunner().invoke(app, ["prune", "--pairs", str(treebank),
                                      "--out", str(tmp_path / "out")])
    assert result.exit_code != 0
    assert "--pairs" in str(result.exception) and "CoNLL-U" in str(result.exception)


# Notation ---------------------------------------------------------------------------------------
def test_heads_are_written_l2h8_and_read_in_three_notations() -> None:
    from attnlens.head_names import head_name, parse_head, parse_heads
    from attnlens.measures.findings import Finding, Head

    assert head_name(2, 8) == "L2H8"
    assert str(Head(0, 2)) == "L0H2"
    assert Finding("heads", ["Head ", Head(2, 8), " is syntactic."]).text() == \
        "Head L2H8 is syntactic."
    for text in ("L2H8", "l2h8", "2.8", "2-8", " 2.8 "):
        assert parse_head(text) == (2, 8), text
    assert parse_heads("L0H1, 2.8 3-4") == [(0, 1), (2, 8), (3, 4)]
    for bad in ("2", "L2", "2:8", "H8L2", "2.8.1", "-1.2"):
        with pytest.raises(ConfigError, match=r"write heads as L2H8, 2\.8 or 2-8"):
            parse_head(bad, "--heads")


@pytest.mark.parametrize("value", ["L2H8,L2H3", "2.8,2.3", "2-8,2-3", "L2H8,2.3"])
def test_view_heads_accepts_every_notation(value) -> None:
    from attnlens.viewer.inputs import parse_heads as _heads

    assert _heads(value, None) == ([8, 3], 2)


def test_page_and_compare_texts_write_l2h8() -> None:
    """The page's and the compare page's notes on head names, and the head cards' titles."""
    root = Path(__file__).resolve().parents[1] / "attnlens" / "report"
    for module in ("html.py", "compare_page.py"):
        source = (root / module).read_text(encoding="utf-8")
        assert "layer-head" not in source and "L2H8 (layer 2, head 8)" in source, module
    for script in ("report.js", "tables.js"):
        source = (root / "static" / script).read_text(encoding="utf-8")
        assert not re.search(r"[Hh]ead \$\{\w+\}-\$\{\w+\}", source), script
