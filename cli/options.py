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
DeviceMapOpt = typer.Option(
    None, "--device-map", show_default=False,
    help="auto: spread a model larger than one device over the GPUs and CPU memory "
    "(needs the extra accelerate).",
)
MaxMemoryOpt = typer.Option(
    None, "--max-memory", show_default=False,
    help="With --device-map auto: memory per device, e.g. 0=20GiB,1=20GiB,cpu=60GiB.",
)
AllowPickleOpt = typer.Option(
    False, "--allow-pickle", help="Allow pickle (pytorch_model.bin) weights; only if trusted."
)
FormatOpt = typer.Option("png", "--format", help="Figure formats, comma-separated: png,svg,pdf.")
QuietOpt = typer.Option(False, "--quiet", "-q", help="No progress bars.")


def figure_formats(value: str) -> tuple[str, ...]:
    return tuple(f.strip().lower() for f in value.split(",") if f.strip())


OptionalPath = Path | None
OptionalStr = str | None
