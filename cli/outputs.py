"""Checks every command that writes a folder makes before its model loads.

``prepare_output`` checks the output folder (``attnlens.outputs.OutputFolder``: new or empty
unless --force, never the source model or a folder holding an input, --resume only of the
same run) and builds the run's manifest (every option, the sha256 of every input file and of
the model's files). Commands then load the model and write inside ``folder.writing(manifest)``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from attnlens.outputs import OutputFolder

try:  # recent Typer releases vendor their own copy of Click
    from typer._click.globals import get_current_context
except ImportError:  # pragma: no cover (older Typer uses Click itself)
    from click import get_current_context


def _protected(model: str | None, inputs: dict[str, Any]) -> list[tuple[str, Any]]:
    from attnlens.loaders.checkpoint import resolve_checkpoint
    from attnlens.manifest import option_label

    protected = [(f"the input file {option_label(name)}", path)
                 for name, path in inputs.items() if path is not None]
    if model is not False:
        protected.append(("the source model", resolve_checkpoint(model)))
    return protected


def prepare_output(
    out: Path,
    *,
    force: bool = False,
    resume: bool = False,
    resumable: bool = False,
    inputs: dict[str, str | os.PathLike | None] | None = None,
    model: str | bool | None = None,
    option: str = "--out",
) -> tuple[OutputFolder, dict]:
    """Check ``out`` and build the manifest from the current command's parameters.

    ``inputs`` maps parameter names to the files the command reads; ``model`` is the model
    argument (None: the embedded model; False: the command loads none).
    """
    from attnlens.manifest import build_manifest

    ctx = get_current_context()
    inputs = dict(inputs or {})
    folder = OutputFolder(out, force=force, resume=resume, resumable=resumable, option=option,
                          protected=_protected(model, inputs))
    folder.check()
    command = " ".join(ctx.command_path.split()[1:]) or ctx.command_path
    manifest = build_manifest(command, dict(ctx.params), inputs, model)
    folder.verify_manifest(manifest)
    return folder, manifest
