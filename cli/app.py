"""The ``attnlens`` command: a Typer app wiring the library's pieces, one module per command."""

from __future__ import annotations

import importlib
import os
import sys

import typer
from attnlens.cli.runner import Interrupted

from attnlens.errors import AttnlensError

app = typer.Typer(
    name="attnlens",
    help="Explain what the attention heads of a transformer do.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


@app.callback()
def _root() -> None:
    """Explain what the attention heads of a transformer do. Layers and heads count from 0."""


# Each module defines register(app). Order = order in `attnlens --help`.
COMMAND_MODULES = [
    "analyze", "report", "compare", "view", "heads", "spectrum", "asymmetry", "collapse",
    "rollout", "sparse", "linear", "prune", "eval", "models",
]

for _module in COMMAND_MODULES:
    importlib.import_module(f"attnlens.cli.{_module}").register(app)


def _known_error(exc: BaseException) -> str | None:
    """One-line messages for failures that are the environment's, not a bug."""
    if isinstance(exc, AttnlensError):
        return str(exc)
    if isinstance(exc, MemoryError) or "out of memory" in str(exc).lower():
        return "out of memory; lower --batch-size or --max-length."
    if isinstance(exc, PermissionError):
        return f"permission denied: {exc.filename}."
    if isinstance(exc, OSError) and exc.errno == 28:
        return "no space left on the device; free space or choose another --out folder."
    return None


# Click's UsageError (missing, unknown or bad options); typer may vendor click, so it is taken
# from the class hierarchy of the public typer.BadParameter rather than imported.
UsageError = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")


def usage_error_line(exc: Exception) -> str:
    """Click's option-parsing error as one line naming the option and where help is."""
    message = " ".join(exc.format_message().split())
    command = exc.ctx.command_path if exc.ctx is not None else "attnlens"
    return f"{message.rstrip('.')}; see '{command} --help'."


def main(argv: list[str] | None = None) -> None:
    """Entry point: runs the app; every failure a user can cause becomes one line on stderr
    starting with ``Error:`` and exit status 1 (130 when interrupted), without a traceback."""
    try:
        code = app(prog_name="attnlens", args=argv, standalone_mode=False)
    except UsageError as exc:  # missing/unknown option, bad value, out of range
        if type(exc).__name__ == "NoArgsIsHelpError":  # bare `attnlens` or group: its help
            typer.echo(exc.ctx.get_help())
            sys.exit(0)
        print(f"Error: {usage_error_line(exc)}", file=sys.stderr)
        code = 1
    except (KeyboardInterrupt, typer.Abort, Interrupted):
        print("Error: interrupted; rerun the command (runs that support it resume).",
              file=sys.stderr)
        code = 130
    except Exception as exc:
        message = _known_error(exc)
        if message is None or os.environ.get("ATTNLENS_DEBUG"):
            raise
        print(f"Error: {message}", file=sys.stderr)
        code = 1
    sys.exit(code or 0)


if __name__ == "__main__":
    main()
