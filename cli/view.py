"""`attnlens view`: one text's attention as a self-contained interactive HTML page."""

from __future__ import annotations

import sys
from pathlib import Path

import typer
from attnlens.cli.options import AllowPickle, Backend, Device, Dtype, Quiet
from attnlens.cli.runner import CommandRun, command

FirstArg = typer.Argument(None, metavar="[MODEL] TEXT", show_default=False,
                          help="The text to look at (- reads standard input); with two "
                          "arguments, MODEL then TEXT. With --file: only [MODEL].")
SecondArg = typer.Argument(None, hidden=True, show_default=False)
INPUT, PAGE = "Input", "Page"
FileOpt = typer.Option(None, "--file", show_default=False, rich_help_panel=INPUT,
                       help="Read the text from this UTF-8 file (- : standard input) instead "
                       "of TEXT.")
OutOpt = typer.Option(Path("attention.html"), "--out", "-o", help="Output HTML file.",
                      rich_help_panel="Output")
ForceOpt = typer.Option(False, "--force", rich_help_panel="Output",
                        help="Replace a non-empty --out file (the new page is written beside "
                        "it, then renamed over it).")
PairOpt = typer.Option(None, "--pair", help="A second text, encoded as a sentence pair.",
                       show_default=False, rich_help_panel=INPUT)
LengthOpt = typer.Option(None, "--max-length", min=2, show_default=False,
                         rich_help_panel=INPUT,
                         help="Truncate the input to this many tokens. Default: the length "
                         "the model was trained on, from its checkpoint files (MiniLM: 256; "
                         "512 if they state none).")
GenerateOpt = typer.Option(None, "--generate", min=1, show_default=False, rich_help_panel=INPUT,
                           help="Causal LMs: append N greedily generated tokens and show the "
                           "attention of prompt and continuation.")
LayerOpt = typer.Option(None, "--layer", min=0, show_default=False, rich_help_panel=PAGE,
                        help="Layer shown first (default 0).")
HeadsOpt = typer.Option(None, "--heads", help="Heads shown first, e.g. 0,3,7 or L2H8 "
                        "(default: all).", show_default=False, rich_help_panel=PAGE)
ViewOpt = typer.Option("head", "--view", rich_help_panel=PAGE,
                       help="View shown first: head, text, model or matrix.")
ReportOpt = typer.Option(None, "--report", show_default=False, rich_help_panel=PAGE,
                         help="Report folder of `attnlens analyze` or `heads`: show its "
                         "heads' role badges (from its head_roles table).")
RolloutOpt = typer.Option(True, "--rollout/--no-rollout", rich_help_panel=PAGE,
                          help="Add attention rollout as an overlay (inputs up to 1,024 "
                          "tokens).")
BudgetOpt = typer.Option(12.0, "--budget-mb", min=0.5, rich_help_panel=PAGE,
                         help="Size budget of the stored "
                         "weights (the page is about 4/3 of it): long inputs keep each "
                         "query's largest weights within it.")
VIEWS = ("head", "text", "model", "matrix")


def _heads(value: str | None, layer: int | None) -> tuple[list[int] | None, int | None]:
    """``--heads`` as head numbers of one layer: ``0,3,7`` or ``L2H0,L2H8`` (which sets the
    layer; ``2.8`` and ``2-8`` are read as L2H8 too)."""
    from attnlens.errors import ConfigError
    from attnlens.head_names import is_head, parse_head
    from attnlens.numeric import check_number

    if value is None:
        return None, layer
    heads, layers = [], set()
    for item in (v.strip() for v in value.split(",") if v.strip()):
        if item.isdigit():
            heads.append(check_number("--heads", int(item), integer=True, low=0))
            continue
        if not is_head(item):
            raise ConfigError(f"--heads {value!r}: give head numbers like 0,3,7 or heads like "
                              "L2H8 (layer 2, head 8).")
        numbers = [check_number("--heads", n, integer=True, low=0) for n in parse_head(item)]
        layers.add(numbers[0])
        heads.append(numbers[1])
    if not heads:
        raise ConfigError(f"--heads {value!r}: give head numbers (from 0) like 0,3,7.")
    if layers:
        if len(layers) > 1 or (layer is not None and layer not in layers):
            raise ConfigError(f"--heads {value!r}: the heads shown first belong to one layer "
                              f"(--layer {layer if layer is not None else 'or L…H…'}).")
        layer = layers.pop()
    return heads, layer


def _check_out_file(out_file: Path, force: bool) -> None:
    """Refuse to replace a non-empty --out file unless --force (an empty one is no loss)."""
    from attnlens.errors import ConfigError

    if out_file.is_dir():
        raise ConfigError(f"--out {out_file} is a folder; give a file name such as view.html.")
    if not out_file.parent.exists():
        raise ConfigError(f"--out {out_file}: folder {out_file.parent} does not exist.")
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


def _read_text(source: str) -> str:
    """The text of ``--file`` (or TEXT ``-``): a UTF-8 file, or standard input for ``-``."""
    from attnlens.errors import DataError

    if source == "-":
        return sys.stdin.read()
    path = Path(source).expanduser()
    if path.is_dir():
        raise DataError(f"--file {path} is a folder; pass a UTF-8 text file.")
    if not path.is_file():
        raise DataError(f"--file {path} does not exist; pass a UTF-8 text file (- : standard "
                        "input).")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise DataError(f"--file {path} is not UTF-8 text (byte {exc.start}); convert it, e.g. "
                        "iconv -t utf-8.") from exc
    except OSError as exc:
        raise DataError(f"--file {path} cannot be read: {exc.strerror}.") from exc


def _is_path(text: str) -> bool:
    """``text`` names an existing file or folder (a long text is no path: the OS says so)."""
    try:
        return Path(text).expanduser().exists()
    except (OSError, ValueError):
        return False


def _model_and_text(first: str | None, second: str | None, file: str | None
                    ) -> tuple[str | None, str]:
    """(MODEL, the text) from the arguments; a lone argument that names an existing file or
    model folder is refused with what to write instead."""
    from attnlens.errors import ConfigError

    if file is not None:
        if second is not None:
            raise ConfigError("give the text once: TEXT or --file, not both.")
        return first, _read_text(file)
    if first is None:
        raise ConfigError("give the text to look at: attnlens view [MODEL] TEXT, or --file "
                          "PATH (- : standard input).")
    if second is None:
        if first != "-" and _is_path(first):
            path = Path(first).expanduser()
            if (path / "config.json").is_file():
                raise ConfigError(f"{first} is a model folder, not a text: give the text after "
                                  f"it (attnlens view {first} \"TEXT\") or --file PATH.")
            raise ConfigError(f"{first} is an existing path, not a text: to look at the text "
                              f"of a file, use --file {first}.")
        return None, _read_text("-") if first == "-" else first
    return first, _read_text("-") if second == "-" else second


def view(
    run: CommandRun,
    first: str | None = FirstArg,
    second: str | None = SecondArg,
    file: str | None = FileOpt,
    out_file: Path = OutOpt,
    overwrite: bool = ForceOpt,  # not `force`: the runner takes that name for --out folders
    pair: str | None = PairOpt,
    text_tokens: int | None = LengthOpt,
    generate: int | None = GenerateOpt,
    layer: int | None = LayerOpt,
    heads: str | None = HeadsOpt,
    start_view: str = ViewOpt,
    report: Path | None = ReportOpt,
    rollout: bool = RolloutOpt,
    budget_mb: float = BudgetOpt,
    device: Device = "cpu",
    dtype: Dtype = "float32",
    allow_pickle: AllowPickle = False,
    backend: Backend = "auto",
    quiet: Quiet = False,
) -> None:
    """Write an interactive attention viewer for TEXT (head, text, model, matrix).

    Opens from file:// with no network; any view can be saved as PNG.
    The page's address selects what it shows: view.html#layer=2&head=8&view=text.
    Layers and heads are numbered from 0. Without MODEL: all-MiniLM-L6-v2.
    """
    from attnlens.errors import ConfigError
    from attnlens.runs.io import WORK_SUFFIX_BYTES, check_writable_target

    if start_view not in VIEWS:
        raise ConfigError(f"--view {start_view!r}: choose head, text, model or matrix.")
    chosen, layer = _heads(heads, layer)
    if generate is not None and pair is not None:
        raise ConfigError("--generate continues one text; leave out --pair.")
    if out_file.is_dir():
        raise ConfigError(f"--out {out_file} is a folder; give a file name such as view.html.")
    if not out_file.parent.exists() and not out_file.parent.is_symlink():
        raise ConfigError(f"--out {out_file}: folder {out_file.parent} does not exist.")
    check_writable_target(out_file, "--out", added=WORK_SUFFIX_BYTES)
    _check_out_file(out_file, overwrite)
    roles = None
    if report is not None:
        from attnlens.viewer.roles import read_head_roles

        roles = read_head_roles(report)
    model, text = _model_and_text(first, second, file)
    if not text.strip():
        raise ConfigError("the text is empty; give the text to look at.")

    run.model.name = model
    run.model.check()
    _check_not_in_model(out_file, model)
    if generate is not None:
        from attnlens.loaders.checkpoint import resolve_checkpoint
        from attnlens.viewer.generate import check_generation_checkpoint

        check_generation_checkpoint(resolve_checkpoint(model))
    from attnlens.viewer import AttentionView, rollout_overlay, text_attention
    from attnlens.viewer.roles import check_roles_fit

    layer = layer or 0
    budget = int(budget_mb * 1e6)
    model_obj, tokenizer = run.load_model()
    n_layers = model_obj.cfg.n_layers
    if layer >= n_layers:
        raise ConfigError(f"--layer {layer}: the model has layers 0..{n_layers - 1}.")
    if generate is not None:
        from attnlens.viewer.generate import generation_view

        data = generation_view(model_obj, tokenizer, text, generate, text_tokens, budget,
                               allow_pickle=run.model.allow_pickle)
    else:
        data = text_attention(model_obj, tokenizer, text, pair=pair, max_length=text_tokens,
                              budget_bytes=budget)
    numbers = data.head_numbers(layer)  # a pruned layer's heads keep their numbers
    if chosen and not set(chosen) <= set(numbers):
        missing = sorted(set(chosen) - set(numbers))
        raise ConfigError(f"--heads: layer {layer} has no head {missing[0]}; its heads are "
                          f"{', '.join(map(str, numbers))}.")
    if chosen:
        chosen = [numbers.index(h) for h in chosen]  # positions in the page's patterns
    if roles is not None:
        check_roles_fit(roles, [data.head_numbers(layer) for layer in range(data.layers)])
        data.roles = roles
    added = rollout and rollout_overlay(data)
    page = AttentionView(data, budget_bytes=budget,
                         initial={"layer": layer, "heads": chosen, "view": start_view})
    page.save(out_file)
    for warning in data.warnings:  # plain echo: rich would read "[n, n]" as markup
        typer.echo(f"Warning: {warning}", err=True)
    extra = " with a rollout overlay" if added else ""
    run.note(f"wrote {out_file} ({out_file.stat().st_size / 1e6:.1f} MB, {data.n} tokens"
             f"{extra}); open it in a browser")


def register(app: typer.Typer) -> None:
    command(app, "view", usage="[MODEL] TEXT")(view)
