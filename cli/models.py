"""`attnlens models`: the architectures attnlens loads, with the parity each reached."""

from __future__ import annotations

import typer

MarkdownOpt = typer.Option(False, "--markdown", help="Print a Markdown table (as in the README).")

HEAD_NAMES = {None: "hidden states", "mlm": "masked LM", "classifier": "classifier", "lm": "LM"}


def model_rows() -> list[dict[str, str]]:
    """One row per family: HF architectures, output heads, parity reached in the tests."""
    from attnlens.loaders.registry import CONVERTERS

    rows = []
    for model_type, conv in CONVERTERS.items():
        heads = dict.fromkeys(HEAD_NAMES[h] for h in conv.architectures.values())
        rows.append({
            "family": conv.family or model_type,
            "model_type": model_type,
            "architectures": ", ".join(conv.architectures),
            "heads": ", ".join(heads),
            "max abs difference vs HF (fp32)": conv.parity,
            "export": "yes" if conv.export is not None else "no",
        })
    return rows


def models(markdown: bool = MarkdownOpt) -> None:
    """List the supported architectures and the parity with Hugging Face each reached."""
    rows = model_rows()
    if markdown:
        import pandas as pd

        from attnlens.io import markdown_table

        typer.echo(markdown_table(pd.DataFrame(rows)), nl=False)
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title="Architectures attnlens loads (model_type from config.json)")
    for column in rows[0]:
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(*row.values())
    Console().print(table)


def register(app: typer.Typer) -> None:
    app.command("models")(models)
