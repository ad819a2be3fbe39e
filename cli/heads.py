"""`attnlens heads`: positional, syntactic and rare-word heads, with Clark's statistics."""

from __future__ import annotations

from pathlib import Path

import typer
from attnlens.cli.analyze import DEFAULT_OUT
from attnlens.cli.runner import CommandRun, command

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
    run: CommandRun,
    positional_threshold: float = PositionalThresholdOpt,
    min_examples: int = MinExamplesOpt,
    margin: float = MarginOpt,
    rare_threshold: float = RareThresholdOpt,
    rarity_corpus: Path | None = RarityCorpusOpt,
    base_relations: bool = BaseRelationsOpt,
) -> None:
    """Find the positional, syntactic and rare-word heads of MODEL (layers/heads from 0).

    With --treebank (or the embedded sample): everything. With --text: statistics,
    positional and rare-word heads (add --parse for syntactic heads via spaCy).
    """
    from attnlens.data.text import read_text_file

    rarity_lines = read_text_file(rarity_corpus) if rarity_corpus else None  # checked early
    from attnlens.data.rarity import WordRarity
    from attnlens.report.heads_section import HeadRolesSection

    rarity = None
    if rarity_lines is not None:
        rarity = WordRarity.from_texts(rarity_lines, source=str(rarity_corpus))
    section = HeadRolesSection(
        positional_threshold=positional_threshold,
        min_examples=min_examples,
        margin=margin,
        rare_threshold=rare_threshold,
        rarity=rarity,
        base_relations=base_relations,
    )
    run.write_report([section])


def register(app: typer.Typer) -> None:
    command(app, "heads", corpus=True, out=DEFAULT_OUT)(heads)
