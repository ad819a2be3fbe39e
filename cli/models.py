"""`attnlens models`: the architectures attnlens loads; with --verify, their parity measured now."""

from __future__ import annotations

import typer

MarkdownOpt = typer.Option(False, "--markdown", help="Print a Markdown table (docs/models.md).")
VerifyOpt = typer.Option(
    False, "--verify",
    help="Build a tiny random model of every architecture, load it and measure the largest "
    "difference to Hugging Face (attention, hidden states, logits; fp32).",
)
FamilyOpt = typer.Option(
    None, "--family", show_default=False,
    help="Only these model_types, comma-separated (e.g. bert,gpt2).",
)
AllOpt = typer.Option(
    False, "--all",
    help="With --verify: every model_type of the installed transformers through the hf "
    "backend (a tiny random model of each, attnlens vs eager attention on one padded batch).",
)


def _print(rows: list[dict[str, str]], markdown: bool, title: str) -> None:
    if markdown:
        import pandas as pd

        from attnlens.runs.io import markdown_table

        typer.echo(markdown_table(pd.DataFrame(rows)), nl=False)
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for column in rows[0]:
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(*row.values())
    Console().print(table)


def coverage(chosen: list[str] | None, markdown: bool) -> None:
    """`--verify --all`: the sweep's table, then refuse what differs from eager attention."""
    from attnlens.loaders import listing

    rows = listing.coverage_rows(chosen, show_progress=not markdown)
    if markdown:
        from attnlens.loaders.coverage_doc import coverage_markdown

        typer.echo(coverage_markdown(rows), nl=False)
    else:
        verified = sum(r.status == "verified" for r in rows)
        _print([listing.coverage_row(r) for r in rows], False,
               f"hf backend vs eager attention, fp32, tiny random models: {verified} of "
               f"{len(rows)} model types verified")
    listing.check_coverage(rows)


def models(markdown: bool = MarkdownOpt, verify: bool = VerifyOpt,
           family: str | None = FamilyOpt, every: bool = AllOpt) -> None:
    """List the supported architectures; --verify measures their parity with Hugging Face.

    --verify --all runs the hf backend's sweep over every model_type of the installed
    transformers (docs/model-coverage.md is its --markdown output); it exits with status 1
    after the table when attnlens differs from eager attention on some model type.
    """
    from attnlens.errors import ConfigError
    from attnlens.loaders import listing

    chosen = [f.strip() for f in family.split(",") if f.strip()] if family else None
    if every:
        if not verify:
            raise ConfigError("--all goes with --verify: attnlens models --verify --all.")
        coverage(chosen, markdown)
        return
    from attnlens.loaders.registry import CONVERTERS

    unknown = [f for f in chosen or [] if f not in CONVERTERS]
    if unknown:
        raise ConfigError(f"unknown --family {', '.join(unknown)}; choose from "
                          f"{', '.join(CONVERTERS)}.")
    if not verify:
        rows = [r for r in listing.model_rows() if not chosen or r["model_type"] in chosen]
        _print(rows, markdown, "Architectures attnlens loads (model_type from config.json)")
        return
    rows, failed = listing.verified_rows(chosen, show_progress=not markdown)
    _print(rows, markdown, "Largest absolute difference to Hugging Face eager, fp32, measured "
                           "now on tiny random models")
    if failed:
        raise ConfigError(f"parity above tolerance for {', '.join(failed)}.")


def register(app: typer.Typer) -> None:
    app.command("models")(models)
