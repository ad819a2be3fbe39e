"""`attnlens heads`: positional, syntactic and rare-word heads, with Clark's statistics."""

from __future__ import annotations

from pathlib import Path

import typer
from attnlens.cli import options as opt
from rich.console import Console

console = Console(stderr=True)

ParseOpt = typer.Option(
    False, "--parse", help="Dependency-parse the --text file with spaCy (optional extra)."
)
PositionalThresholdOpt = typer.Option(
    0.9, "--positional-threshold", min=0.0, max=1.0,
    help="Share of tokens one offset must win for a positional head.",
)
MinExamplesOpt = typer.Option(
    20, "--min-examples", min=1, help="Arcs a relation needs to be reported."
)
MarginOpt = typer.Option(
    0.10, "--margin", min=0.0, max=1.0,
    help="Accuracy above the fixed-offset baseline for a syntactic head.",
)
RareThresholdOpt = typer.Option(
    0.5, "--rare-threshold", min=0.0, max=1.0,
    help="Share of words attending most to the rarest word for a rare-word head.",
)
RarityCorpusOpt = typer.Option(
    None, "--rarity-corpus",
    help="Text file whose word counts define rarity (default: wordfreq English).",
    show_default=False,
)
BaseRelationsOpt = typer.Option(
    False, "--base-relations", help="Merge subtypes (nmod:poss -> nmod)."
)


def heads(
    model: opt.OptionalStr = opt.ModelArg,
    treebank: opt.OptionalPath = opt.TreebankOpt,
    text: opt.OptionalPath = opt.TextOpt,
    parse: bool = ParseOpt,
    out: Path = opt.OutOpt,
    batch_size: int = opt.BatchSizeOpt,
    max_length: int = opt.MaxLengthOpt,
    device: str = opt.DeviceOpt,
    dtype: str = opt.DtypeOpt,
    allow_pickle: bool = opt.AllowPickleOpt,
    positional_threshold: float = PositionalThresholdOpt,
    min_examples: int = MinExamplesOpt,
    margin: float = MarginOpt,
    rare_threshold: float = RareThresholdOpt,
    rarity_corpus: opt.OptionalPath = RarityCorpusOpt,
    base_relations: bool = BaseRelationsOpt,
    fmt: str = opt.FormatOpt,
    quiet: bool = opt.QuietOpt,
    force: bool = opt.ForceOpt,
    resume: bool = opt.ResumeOpt,
    checkpoint_every: int | None = opt.CheckpointEveryOpt,
) -> None:
    """Find the positional, syntactic and rare-word heads of MODEL (layers/heads from 0).

    With --treebank (or the embedded sample): everything. With --text: statistics,
    positional and rare-word heads (add --parse for syntactic heads via spaCy).
    """
    from attnlens.cli.outputs import prepare_output

    from attnlens.checkpointing import AnalysisCheckpoint
    from attnlens.data.rarity import WordRarity
    from attnlens.data.words import load_corpus

    formats = opt.figure_formats(fmt)
    corpus = load_corpus(
        text=str(text) if text else None,
        treebank=str(treebank) if treebank else None,
        parse=parse,
    )
    rarity = WordRarity.from_text_file(rarity_corpus) if rarity_corpus else None
    folder, manifest = prepare_output(
        out, force=force, resume=resume, resumable=True, model=model,
        inputs={"text": text, "treebank": treebank, "rarity_corpus": rarity_corpus},
    )
    if folder.resumes_complete:
        console.print(f"{out}/ already holds this run, complete; nothing to resume.")
        return
    from attnlens.loaders import load
    from attnlens.report.analyze import analyze as run_analysis
    from attnlens.report.heads_section import HeadRolesSection

    model_obj, tokenizer = load(model, device=device, dtype=dtype, allow_pickle=allow_pickle)
    batches = corpus.batches(tokenizer, batch_size=batch_size, max_length=max_length)
    section = HeadRolesSection(
        positional_threshold=positional_threshold,
        min_examples=min_examples,
        margin=margin,
        rare_threshold=rare_threshold,
        rarity=rarity,
        base_relations=base_relations,
    )
    with folder.writing(manifest) as work:
        checkpoint = AnalysisCheckpoint(work, checkpoint_every, resume=folder.resumes_partial)
        (output,) = run_analysis(
            model_obj, tokenizer, batches, work, sections=[section], formats=formats,
            show_progress=not quiet, corpus_name=corpus.name, checkpoint=checkpoint,
        )
    typer.echo(output.summary)
    console.print(f"wrote {len(output.tables)} tables and {len(output.figures)} figures "
                  f"to {out}/ (open {out / 'index.html'})")


def register(app: typer.Typer) -> None:
    app.command("heads")(heads)
