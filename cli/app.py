"""The ``attnlens`` command: a Typer app wiring the library's pieces, one module per command."""

from __future__ import annotations

import importlib
import os
import shlex
import signal
import sys

import typer

from attnlens.errors import AttnlensError, RunInterrupted

try:  # recent Typer releases vendor their own copy of Click
    from typer._click import exceptions as click_errors
except ImportError:  # pragma: no cover (older Typer uses Click itself)
    from click import exceptions as click_errors

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
    "analyze", "heads", "spectrum", "asymmetry", "collapse", "prune", "eval", "models",
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


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _usage_error(exc: click_errors.ClickException) -> str:
    """Click's usage errors (bad option values, unknown options) as one line with the fix."""
    message = _one_line(exc.format_message()).rstrip(".")
    ctx = getattr(exc, "ctx", None)
    where = ctx.command_path if ctx is not None else "attnlens"
    return f"{message}; see `{where} --help`."


def _on_signal(signum: int, frame) -> None:
    # A second Ctrl-C ends the process at once: outputs are atomic, nothing half-written.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    raise RunInterrupted(signal.Signals(signum).name)


def _interrupted_message() -> str:
    """One line: what the interrupted run kept, and the exact command to resume or rerun."""
    outputs = sys.modules.get("attnlens.outputs")
    note = outputs.interrupt_note() if outputs is not None else None
    args = sys.argv[1:]
    if note and note.startswith("kept"):
        again = shlex.join(["attnlens", *args, *([] if "--resume" in args else ["--resume"])])
        return f"Interrupted: {note}; resume with: {again}"
    return f"Interrupted: {note or 'nothing was written'}; rerun with: " + shlex.join(
        ["attnlens", *args]
    )


def main() -> None:
    """Entry point: runs the app; known failures become one line on stderr and exit 1.

    Typer's standalone mode turns a KeyboardInterrupt into a silent exit 130 before any
    handler of ours can run, so the app runs with ``standalone_mode=False`` and SIGINT and
    SIGTERM raise ``RunInterrupted`` (not an ``Exception``: no library ``except`` swallows
    it); the message says what was kept and how to resume.
    """
    signal.signal(signal.SIGINT, _on_signal)
    signal.signal(signal.SIGTERM, _on_signal)
    try:
        code = app(prog_name="attnlens", standalone_mode=False)
    except RunInterrupted as exc:
        print(_interrupted_message(), file=sys.stderr)
        sys.exit(143 if exc.signal_name == "SIGTERM" else 130)
    except KeyboardInterrupt:
        print(_interrupted_message(), file=sys.stderr)
        sys.exit(130)
    except click_errors.NoArgsIsHelpError as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except click_errors.ClickException as exc:
        if os.environ.get("ATTNLENS_DEBUG"):
            raise
        print(f"Error: {_usage_error(exc)}", file=sys.stderr)
        sys.exit(1)
    except typer.Abort:
        print("Error: aborted.", file=sys.stderr)
        sys.exit(1)
    except Exception as exc:
        message = _known_error(exc)
        if message is None or os.environ.get("ATTNLENS_DEBUG"):
            raise
        print(f"Error: {_one_line(message)}", file=sys.stderr)
        sys.exit(1)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
