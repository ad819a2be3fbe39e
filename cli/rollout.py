"""`attnlens rollout`: attention rollout or attention flow (Abnar & Zuidema 2020)."""

from __future__ import annotations

import re
from pathlib import Path

import typer
from attnlens.cli import options as opt
from rich.console import Console

console = Console(stderr=True)

_HUB_ID = re.compile(r"^[\w.-]+/[\w.-]+$")

ArgsArg = typer.Argument(
    None,
    help="[MODEL] TEXT...: an optional model (a folder, or a hub id in the local HF cache; "
    "default: the embedded all-MiniLM-L6-v2) followed by the sentences to analyse.",
    show_default=False,
    metavar="[MODEL] TEXT...",
)
MethodOpt = typer.Option("rollout", "--method", help="rollout or flow (max-flow; slow).")
ResidualOpt = typer.Option(
    0.5, "--residual", min=0.0, max=1.0,
    help="Weight r of the attention in r·A + (1-r)·I (the residual connection gets 1-r).",
)
FusionOpt = typer.Option("mean", "--head-fusion", help="Fuse heads by mean, max or min.")
SentencesOpt = typer.Option(
    50, "--sentences", min=1,
    help="Write matrices (table, figures) for the first N sentences; layer shares use all.",
)
FlowMaxOpt = typer.Option(
    40, "--flow-max-tokens", min=2, help="Skip longer sentences in attention flow.",
)
FiguresOpt = typer.Option(20, "--figures", min=0, help="Sentences drawn as figures.")


def split_model_and_texts(args: list[str]) -> tuple[str | None, list[str]]:
    """(MODEL, TEXT...) from the positional arguments.

    The first argument is the model when it is an existing folder or looks like a hub id
    (``owner/name``), or when it is one word followed by more text and found in the local
    Hugging Face cache; otherwise every argument is a text for the embedded model.
    """
    if not args:
        return None, []
    first = args[0]
    if Path(first).expanduser().is_dir() or _HUB_ID.match(first):
        return first, args[1:]
    if len(args) > 1 and not any(ch.isspace() for ch in first):
        from attnlens.errors import ModelLoadError
        from attnlens.loaders.checkpoint import resolve_checkpoint

        try:
            resolve_checkpoint(first)
        except ModelLoadError:
            return None, args
        return first, args[1:]
    return None, args


def rollout(
    args: list[str] | None = ArgsArg,
    text: opt.OptionalPath = opt.TextOpt,
    treebank: opt.OptionalPath = opt.TreebankOpt,
    out: Path = opt.OutOpt,
    method: str = MethodOpt,
    residual: float = ResidualOpt,
    head_fusion: str = FusionOpt,
    sentences: int = SentencesOpt,
    flow_max_tokens: int = FlowMaxOpt,
    figures: int = FiguresOpt,
    batch_size: int = opt.BatchSizeOpt,
    max_length: int = opt.MaxLengthOpt,
    device: str = opt.DeviceOpt,
    dtype: str = opt.DtypeOpt,
    allow_pickle: bool = opt.AllowPickleOpt,
    fmt: str = opt.FormatOpt,
    quiet: bool = opt.QuietOpt,
) -> None:
    """Which input tokens each position draws on after every layer: attention rollout
    (R_l = Ã_l R_(l-1), Ã_l = r·fuse(A_l) + (1-r)·I) or attention flow (max-flow).

    Sentences: TEXT arguments, --text FILE (one per line), --treebank FILE, or the embedded
    sample treebank. Writes rollout.csv (or flow.csv: sentence, layer, query, key,
    query_token, key_token, value; positions from 0, special tokens included),
    rollout_layers.csv and per-sentence figures.
    """
    from attnlens.analysis.rollout import check_rollout_options
    from attnlens.errors import ConfigError
    from attnlens.report.writer import check_output_dir

    check_rollout_options(residual, head_fusion)
    if method not in ("rollout", "flow"):
        raise ConfigError(f"unknown method {method!r}; use rollout or flow.")
    model, texts = split_model_and_texts(list(args or []))
    given = [name for name, v in (("TEXT", texts), ("--text", text), ("--treebank", treebank))
             if v]
    if len(given) > 1:
        raise ConfigError(f"give sentences one way, not {' and '.join(given)}.")
    formats = opt.figure_formats(fmt)
    corpus_name, read = _corpus(texts, text, treebank)
    if method == "flow":
        from attnlens.analysis.flow import maximum_flow_solver

        maximum_flow_solver()  # scipy missing: fail before loading the model
    check_output_dir(out)
    from attnlens.loaders import load

    model_obj, tokenizer = load(model, device=device, dtype=dtype, allow_pickle=allow_pickle)
    kind, source = read
    if kind == "texts":
        from attnlens.data.text import text_batches

        batches = text_batches(tokenizer, source, batch_size=batch_size, max_length=max_length)
    else:
        batches = source.batches(tokenizer, batch_size=batch_size, max_length=max_length)
    options = {"residual": residual, "fusion": head_fusion, "keep": sentences}
    output = _run(model_obj, tokenizer, batches, method, options, flow_max_tokens, figures,
                  out, formats, quiet)
    typer.echo(output.summary)
    console.print(f"{corpus_name}: wrote {len(output.tables)} tables and "
                  f"{len(output.figures)} figures to {out}/")


def _corpus(texts: list[str], text, treebank):
    """(corpus name, ("texts", lines) or ("corpus", Corpus)), read before the model loads."""
    from attnlens.data.text import read_text_file

    if texts:
        return f"{len(texts)} sentences from the command line", ("texts", texts)
    if text:
        lines = read_text_file(text)
        return f"{text} ({len(lines)} lines)", ("texts", lines)
    from attnlens.data.words import load_corpus

    corpus = load_corpus(treebank=str(treebank) if treebank else None)
    return corpus.name, ("corpus", corpus)


def _run(model, tokenizer, batches, method: str, options: dict, flow_max_tokens: int,
         figures: int, out: Path, formats: tuple[str, ...], quiet: bool):
    """One pass feeding rollout (and flow), then the tables and figures."""
    from attnlens.analysis.flow import FlowAnalyzer
    from attnlens.analysis.rollout import RolloutAnalyzer
    from attnlens.analysis.runner import run_analyzers
    from attnlens.report.rollout_section import write_flow, write_rollout

    rollout_an = RolloutAnalyzer.for_model(model, tokenizer, **options)
    analyzers = [rollout_an]
    if method == "flow":
        analyzers.append(FlowAnalyzer.for_model(model, tokenizer, max_tokens=flow_max_tokens,
                                                **options))
    run_analyzers(model, batches, analyzers, total=sum(b.size for b in batches),
                  show_progress=not quiet, description=method)
    causal = model.cfg.causal
    output = write_rollout(rollout_an, out, formats, causal,
                           max_figures=figures if method == "rollout" else 0)
    if method == "flow":
        write_flow(analyzers[1], out, formats, causal, output, max_figures=figures)
    return output


def register(app: typer.Typer) -> None:
    app.command("rollout")(rollout)
