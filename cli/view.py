"""`attnlens view`: one text's attention as a self-contained interactive HTML page."""

from __future__ import annotations

from pathlib import Path

import typer
from attnlens.cli.runner import CommandRun, command

FirstArg = typer.Argument(..., metavar="[MODEL] TEXT", show_default=False,
                          help="The text to look at; with two arguments, MODEL then TEXT.")
SecondArg = typer.Argument(None, hidden=True, show_default=False)
OutOpt = typer.Option(Path("attention.html"), "--out", "-o", help="Output HTML file.",
                      rich_help_panel="Output")
ForceOpt = typer.Option(False, "--force", rich_help_panel="Output",
                        help="Replace a non-empty --out file (the new page is written beside "
                        "it, then renamed over it).")
PairOpt = typer.Option(None, "--pair", help="A second text, encoded as a sentence pair.",
                       show_default=False)
LengthOpt = typer.Option(512, "--max-length", min=2, help="Truncate the input to this many "
                         "tokens.")
LayerOpt = typer.Option(0, "--layer", min=0, help="Layer shown first.")
HeadsOpt = typer.Option(None, "--heads", help="Heads shown first, comma-separated (default: "
                        "all).", show_default=False)
ViewOpt = typer.Option("head", "--view", help="View shown first: head, model or matrix.")
RolloutOpt = typer.Option(True, "--rollout/--no-rollout",
                          help="Add attention rollout as an overlay where available.")
BudgetOpt = typer.Option(6.0, "--budget-mb", min=0.5, help="Size budget of the packed weights; "
                         "long texts keep each row's largest weights within it.")
VIEWS = ("head", "model", "matrix")


def _heads(value: str | None) -> list[int] | None:
    from attnlens.numeric import parse_numbers

    if value is None:
        return None
    return list(parse_numbers("--heads", value, integer=True, low=0, example="0,3,7 (from 0)"))


def _check_out_file(out_file: Path, force: bool) -> None:
    """Refuse to replace a non-empty --out file unless --force (an empty one is no loss)."""
    from attnlens.errors import ConfigError

    if out_file.exists() and not out_file.is_file():
        raise ConfigError(f"--out {out_file} is not a regular file; give a file name such as "
                          "view.html.")
    if not force and out_file.is_file() and out_file.stat().st_size > 0:
        raise ConfigError(f"--out {out_file} already exists and is not empty; choose a new file "
                          "name, or add --force to replace it.")


def _check_not_in_model(out_file: Path, model: str | None) -> None:
    """The source model's folder is never written into, under any flag (as for folders)."""
    from attnlens.errors import ConfigError
    from attnlens.loaders.checkpoint import resolve_checkpoint

    source = resolve_checkpoint(model).resolve()
    if source in out_file.resolve().parents:
        raise ConfigError(f"--out {out_file} is inside the source model ({source}); attnlens "
                          "never writes there: choose another file.")


def view(
    run: CommandRun,
    first: str = FirstArg,
    second: str | None = SecondArg,
    out_file: Path = OutOpt,
    overwrite: bool = ForceOpt,  # not `force`: the runner takes that name for --out folders
    pair: str | None = PairOpt,
    text_tokens: int = LengthOpt,
    layer: int = LayerOpt,
    heads: str | None = HeadsOpt,
    start_view: str = ViewOpt,
    rollout: bool = RolloutOpt,
    budget_mb: float = BudgetOpt,
) -> None:
    """Write an interactive attention viewer for TEXT (head view, model view, matrix).

    Opens from file:// with no network; any view can be saved as PNG. Layers and heads are
    numbered from 0. Without MODEL: the embedded all-MiniLM-L6-v2.
    """
    from attnlens.errors import ConfigError
    from attnlens.runs.io import WORK_SUFFIX_BYTES, check_writable_target

    model, text = (None, first) if second is None else (first, second)
    if not text.strip():
        raise ConfigError("TEXT is empty; give the text to look at.")
    if start_view not in VIEWS:
        raise ConfigError(f"--view {start_view!r}: choose head, model or matrix.")
    chosen = _heads(heads)
    if out_file.is_dir():
        raise ConfigError(f"--out {out_file} is a folder; give a file name such as view.html.")
    if not out_file.parent.exists() and not out_file.parent.is_symlink():
        raise ConfigError(f"--out {out_file}: folder {out_file.parent} does not exist.")
    check_writable_target(out_file, "--out", added=WORK_SUFFIX_BYTES)
    _check_out_file(out_file, overwrite)

    run.model.name = model
    run.model.check()
    _check_not_in_model(out_file, model)
    from attnlens.viewer import AttentionView, rollout_overlay, text_attention

    model_obj, tokenizer = run.load_model()
    n_layers = model_obj.cfg.n_layers
    if layer >= n_layers:
        raise ConfigError(f"--layer {layer}: the model has layers 0..{n_layers - 1}.")
    data = text_attention(model_obj, tokenizer, text, pair=pair, max_length=text_tokens)
    n_heads = data.patterns[layer].shape[0]
    if chosen and max(chosen) >= n_heads:
        raise ConfigError(f"--heads: layer {layer} has heads 0..{n_heads - 1}.")
    added = rollout and rollout_overlay(data)
    page = AttentionView(data, budget_bytes=int(budget_mb * 1e6),
                         initial={"layer": layer, "heads": chosen, "view": start_view})
    page.save(out_file)
    extra = " with a rollout overlay" if added else ""
    run.note(f"wrote {out_file} ({out_file.stat().st_size / 1e6:.1f} MB, {len(data.tokens)} tokens"
                  f"{extra}); open it in a browser")


def register(app: typer.Typer) -> None:
    command(app, "view", model=False, loading=True, batch_size=None,
            usage="[MODEL] TEXT")(view)
