"""The ``attnlens`` command: a Typer app wiring the library's pieces, one module per command."""

from __future__ import annotations

import importlib
import os
import shlex
import signal
import sys

import typer
from attnlens.cli import help_layout
from attnlens.cli.known_errors import known_error
from attnlens.cli.runner import NUMERIC_DEFAULTS, Interrupted

from attnlens.errors import RunInterrupted
from attnlens.measures.registry import measure_commands
from attnlens.runs import collector, openmp

help_layout.install()  # --help fits 80 columns (cli/help_layout.py)

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


# Each module defines register(app). Order = order in `attnlens --help`: the report commands,
# then each measure's command in the order of attnlens.measures.registry.MEASURES, then the rest.
REPORT_COMMANDS = ["analyze", "report", "compare", "view"]
OTHER_COMMANDS = ["eval", "models"]
COMMAND_MODULES = [*REPORT_COMMANDS, *measure_commands(), *OTHER_COMMANDS]

for _module in COMMAND_MODULES:
    importlib.import_module(f"attnlens.cli.{_module}").register(app)


def _sizes_given(args: list[str]) -> tuple[list[str], bool]:
    """The numeric options in ``args`` set above their default (``--bootstrap 1000000000
    (default 1000)``), and whether the command has --batch-size: what an out-of-memory
    message tells the user to lower."""
    defaults = NUMERIC_DEFAULTS.get(_command_path(args).split()[-1], {})
    sizes = []
    for i, arg in enumerate(args):
        option, eq, value = arg.partition("=")
        if option not in defaults or (not eq and i + 1 >= len(args)):
            continue
        value = value if eq else args[i + 1]
        try:
            number = float(value)
        except ValueError:
            continue
        default = defaults[option]
        if default is None or number > default:
            sizes.append(f"{option} {value}" + ("" if default is None else f" (default "
                                                                         f"{default:g})"))
    return sizes, "--batch-size" in defaults


def _known_error(exc: BaseException, args: list[str]) -> str | None:
    """One line for failures that are the environment's, not a bug (cli/known_errors.py)."""
    sizes, has_batching = _sizes_given(args)
    return known_error(exc, sizes, has_batching)


# Click's UsageError (missing, unknown or bad options); typer may vendor click, so it is taken
# from the class hierarchy of the public typer.BadParameter rather than imported.
UsageError = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")


def _command_path(args: list[str]) -> str:
    """``attnlens CMD [SUB]`` as named by ``args``: the help to point to when Click raised its
    error without a context (an option missing its value, e.g. ``heads --max-length``)."""
    command, path = typer.main.get_command(app), ["attnlens"]
    for arg in args:
        subcommands = getattr(command, "commands", None)
        if subcommands is None:  # a command, not a group: its own help
            break
        if arg.startswith("-"):
            continue
        if arg not in subcommands:
            break
        command = subcommands[arg]
        path.append(arg)
    return " ".join(path)


def usage_error_line(exc: Exception, args: list[str] | None = None) -> str:
    """Click's option-parsing error as one line naming the option and where help is: the
    command's own ``--help`` (taken from ``args`` when the error carries no context)."""
    message = " ".join(exc.format_message().split())
    command = exc.ctx.command_path if exc.ctx is not None else _command_path(args or [])
    return f"{message.rstrip('.')}; see '{command} --help'."


def _on_signal(signum: int, frame) -> None:
    # A second Ctrl-C ends the process at once: outputs are atomic, nothing half-written.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    raise RunInterrupted(signal.Signals(signum).name)


def interrupted_message(args: list[str]) -> str:
    """One line: what the interrupted run kept, and the exact command to resume or rerun."""
    outputs = sys.modules.get("attnlens.runs.outputs")
    note = outputs.interrupt_note() if outputs is not None else None
    if note and note.startswith("kept"):
        again = shlex.join(["attnlens", *args, *([] if "--resume" in args else ["--resume"])])
        return f"Interrupted: {note}; resume with: {again}"
    return f"Interrupted: {note or 'nothing was written'}; rerun with: " + shlex.join(
        ["attnlens", *args])


def main(argv: list[str] | None = None) -> None:
    """Entry point: runs the app; every failure a user can cause becomes one line on stderr
    starting with ``Error:`` and exit status 1, without a traceback.

    Ctrl-C and SIGTERM raise ``RunInterrupted`` (a ``BaseException`` that is not a
    ``KeyboardInterrupt``, which Click would turn into a bare abort and library code might
    swallow): the line then says what the run kept and the command that resumes it; exit
    status 130 (143 for SIGTERM).
    """
    args = sys.argv[1:] if argv is None else list(argv)
    own_process = argv is None  # the attnlens program, not a caller such as a test
    if own_process:
        collector.hold()  # until the model is loaded (attnlens/runs/collector.py)
        openmp.passive_waits()  # before torch loads (attnlens/runs/openmp.py)
    previous = signal.signal(signal.SIGINT, _on_signal), signal.signal(signal.SIGTERM, _on_signal)
    try:
        code = app(prog_name="attnlens", args=args, standalone_mode=False)
    except UsageError as exc:  # missing/unknown option, bad value, out of range
        if type(exc).__name__ == "NoArgsIsHelpError":  # bare `attnlens` or group: its help
            typer.echo(exc.ctx.get_help())
            sys.exit(0)
        print(f"Error: {usage_error_line(exc, args)}", file=sys.stderr)
        code = 1
    except RunInterrupted as exc:
        print(interrupted_message(args), file=sys.stderr)
        code = 143 if exc.signal_name == "SIGTERM" else 130
    except (KeyboardInterrupt, typer.Abort, Interrupted):
        print(interrupted_message(args), file=sys.stderr)
        code = 130
    except Exception as exc:
        message = _known_error(exc, args)
        if message is None or os.environ.get("ATTNLENS_DEBUG"):
            raise
        print(f"Error: {' '.join(message.split())}", file=sys.stderr)
        code = 1
    finally:
        signal.signal(signal.SIGINT, previous[0])
        signal.signal(signal.SIGTERM, previous[1])
        locks = sys.modules.get("attnlens.runs.folder_lock")
        if locks is not None:  # a command that failed after checking its --out
            locks.release_all()
    if own_process:
        sys.stdout.flush()
        sys.stderr.flush()
        collector.before_exit()
    sys.exit(code or 0)


if __name__ == "__main__":
    main()
