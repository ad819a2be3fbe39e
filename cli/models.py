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

HEAD_NAMES = {None: "hidden states", "mlm": "masked LM", "classifier": "classifier", "lm": "LM"}


def model_rows() -> list[dict[str, str]]:
    """One row per family: HF architectures, output heads, whether it exports back."""
    from attnlens.loaders.registry import CONVERTERS

    rows = []
    for model_type, conv in CONVERTERS.items():
        heads = dict.fromkeys(HEAD_NAMES[h] for h in conv.architectures.values())
        rows.append({
            "family": conv.family or model_type,
            "model_type": model_type,
            "architectures": ", ".join(conv.architectures),
            "heads": ", ".join(heads),
            "export": "yes" if conv.export is not None else "no",
        })
    return rows


def verified_rows(
    model_types: list[str] | None, show_progress: bool
) -> tuple[list[dict[str, str]], list[str]]:
    """One row per architecture with the parity measured on a tiny random model, and the
    architectures above the tolerance."""
    from attnlens.loaders.registry import CONVERTERS
    from attnlens.loaders.verify import TINY_TOL, verify_all
    from attnlens.progress import progress_bar

    total = sum(len(c.architectures) for t, c in CONVERTERS.items()
                if not model_types or t in model_types)
    with progress_bar("tiny models", total=total, enabled=show_progress) as advance:
        measured = verify_all(model_types, progress=advance)

    def fmt(value: float | None) -> str:
        return "-" if value is None else f"{value:.1e}" if value else "0"

    rows = [{
        "family": CONVERTERS[m["model_type"]].family or m["model_type"],
        "model_type": m["model_type"],
        "architecture": m["architecture"],
        "head": HEAD_NAMES[CONVERTERS[m["model_type"]].architectures[m["architecture"]]],
        "attention": fmt(m["attention"]),
        "hidden states": fmt(m["hidden"]),
        "logits": fmt(m.get("logits")),
        f"within {TINY_TOL:g}": "yes" if m["within_tolerance"] else "NO",
    } for m in measured]
    return rows, [m["architecture"] for m in measured if not m["within_tolerance"]]


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
    """`--verify --all`: the hf backend's sweep over every model_type (loaders.verify_hf)."""
    from attnlens.loaders.verify_hf import model_types, sweep
    from attnlens.progress import progress_bar

    known = model_types()
    unknown = [f for f in chosen or [] if f not in known]
    if unknown:
        from attnlens.errors import ConfigError

        raise ConfigError(f"unknown --family {', '.join(unknown)}: not a model_type of the "
                          "installed transformers.")
    types = chosen or known
    with progress_bar("model types", total=len(types), enabled=not markdown) as advance:
        rows = sweep(types, progress=advance)
    if markdown:
        from attnlens.loaders.coverage_doc import coverage_markdown

        typer.echo(coverage_markdown(rows), nl=False)
    else:
        table = [coverage_row(r) for r in rows]
        verified = sum(r.status == "verified" for r in rows)
        _print(table, False, f"hf backend vs eager attention, fp32, tiny random models: "
                             f"{verified} of {len(rows)} model types verified")
    differing = [r.model_type for r in rows if r.status == "differs"]
    if differing:  # attnlens computed something else than eager: a wrong result, not a refusal
        from attnlens.errors import ConfigError

        raise ConfigError(f"the hf backend differs from eager attention for "
                          f"{', '.join(differing)} (figures in the table above); report it.")


def coverage_row(row) -> dict[str, str]:
    def fmt(value: float | None) -> str:
        return "-" if value is None else f"{value:.1e}" if value else "0"

    status = row.status if row.status == "verified" else f"{row.status}: {row.reason}"
    return {"model_type": row.model_type, "architecture": row.architecture,
            "backend": row.backend, "attention": fmt(row.attention),
            "hidden states": fmt(row.hidden), "status": status}


def models(markdown: bool = MarkdownOpt, verify: bool = VerifyOpt,
           family: str | None = FamilyOpt, every: bool = AllOpt) -> None:
    """List the supported architectures; --verify measures their parity with Hugging Face.

    --verify --all runs the hf backend's sweep over every model_type of the installed
    transformers (docs/model-coverage.md is its --markdown output); it exits with status 1
    after the table when attnlens differs from eager attention on some model type.
    """
    from attnlens.errors import ConfigError

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
        rows = [r for r in model_rows() if not chosen or r["model_type"] in chosen]
        _print(rows, markdown, "Architectures attnlens loads (model_type from config.json)")
        return
    rows, failed = verified_rows(chosen, show_progress=not markdown)
    _print(rows, markdown, "Largest absolute difference to Hugging Face eager, fp32, measured "
                           "now on tiny random models")
    if failed:
        raise ConfigError(f"parity above tolerance for {', '.join(failed)}.")


def register(app: typer.Typer) -> None:
    app.command("models")(models)
