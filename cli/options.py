"""Options shared by several commands, so every command spells them the same way."""

from __future__ import annotations

from pathlib import Path

import typer

ModelArg = typer.Argument(
    None,
    help="Model folder (config.json + safetensors) or a hub id in the local HF cache. "
    "Default: the embedded all-MiniLM-L6-v2.",
    show_default=False,
)
TextOpt = typer.Option(None, "--text", help="Text file, one sentence per line.", show_default=False)
TreebankOpt = typer.Option(
    None, "--treebank", help="CoNLL-U treebank (default: the embedded sample).", show_default=False
)
OutOpt = typer.Option(Path("attnlens-report"), "--out", "-o", help="Output folder.")
BatchSizeOpt = typer.Option(16, "--batch-size", min=1, help="Sentences per forward pass.")
MaxLengthOpt = typer.Option(128, "--max-length", min=4, help="Truncate inputs to this many tokens.")
DeviceOpt = typer.Option("cpu", "--device", help="cpu, cuda, cuda:N or auto.")
DtypeOpt = typer.Option("float32", "--dtype", help="float32, bfloat16 or float16.")
AllowPickleOpt = typer.Option(
    False, "--allow-pickle", help="Allow pickle (pytorch_model.bin) weights; only if trusted."
)
FormatOpt = typer.Option("png", "--format", help="Figure formats, comma-separated: png,svg,pdf.")
QuietOpt = typer.Option(False, "--quiet", "-q", help="No progress bars.")


ForceOpt = typer.Option(
    False, "--force", help="Replace a non-empty output folder as a whole (its files are deleted)."
)
ResumeOpt = typer.Option(
    False, "--resume",
    help="Continue an interrupted run of the same command, inputs and options in --out.",
)
CheckpointEveryOpt = typer.Option(
    None, "--checkpoint-every", min=1, show_default=False,
    help="Save the analyzers' state every N sentences, so --resume continues from there.",
)
FIGURE_FORMATS = ("png", "svg", "pdf")


def figure_formats(value: str) -> tuple[str, ...]:
    """The --format list, checked before anything runs."""
    from attnlens.errors import ConfigError

    formats = tuple(dict.fromkeys(f.strip().lower() for f in value.split(",") if f.strip()))
    unknown = [f for f in formats if f not in FIGURE_FORMATS]
    if unknown or not formats:
        shown = f"{unknown[0]!r} is not a figure format" if unknown else "no figure format given"
        raise ConfigError(f"--format {value!r}: {shown}; choose from png, svg and pdf, "
                          "comma-separated (e.g. --format png,svg).")
    return formats


OptionalPath = Path | None
OptionalStr = str | None
