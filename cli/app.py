"""The ``attnlens`` command: a Typer app wiring the library's pieces, one module per command."""

from __future__ import annotations

import importlib
import os
import sys

import typer

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
    "analyze", "report", "compare", "view", "heads", "spectrum", "asymmetry", "collapse", "prune",
    "eval", "models",
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


def main() -> None:
    """Entry point: runs the app; known failures become one line on stderr and exit 1."""
    try:
        app(prog_name="attnlens")
    except KeyboardInterrupt:
        print(
            "Error: interrupted; rerun the command (runs that support it resume).", file=sys.stderr
        )
        sys.exit(130)
    except Exception as exc:
        message = _known_error(exc)
        if message is None or os.environ.get("ATTNLENS_DEBUG"):
            raise
        print(f"Error: {message}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
