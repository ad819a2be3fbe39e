"""What run.json records about a run: the model and its checksum, package versions."""

from __future__ import annotations

import hashlib
import platform
from importlib import metadata
from pathlib import Path
from typing import Any

PACKAGES = ("attnlens", "torch", "transformers", "numpy", "pandas", "matplotlib", "safetensors",
            "wordfreq", "conllu")
WEIGHT_PATTERNS = ("*.safetensors", "pytorch_model*.bin")


def package_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return versions


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def weights_checksum(model) -> dict[str, str]:
    """sha256 of the checkpoint's weight file (``sha256sum`` gives the same), or for several
    files of their ``name digest`` lines; a model built in memory: of its tensors."""
    folder = Path(model.cfg.source.get("path") or "")
    files: list[Path] = []
    if folder.is_dir():
        for pattern in WEIGHT_PATTERNS:
            files = sorted(folder.glob(pattern))
            if files:
                break
    if len(files) == 1:
        return {"sha256": _sha256_file(files[0]), "of": files[0].name}
    if files:
        lines = "".join(f"{_sha256_file(f)}  {f.name}\n" for f in files)
        return {"sha256": hashlib.sha256(lines.encode()).hexdigest(),
                "of": f"sha256sum output of {len(files)} files"}
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return {"sha256": digest.hexdigest(), "of": "state_dict tensors (names and bytes)"}


def model_record(model) -> dict[str, Any]:
    cfg = model.cfg
    source = cfg.source
    heads = max(cfg.heads_per_layer) if cfg.heads_per_layer else cfg.n_heads
    head_ids = getattr(cfg, "head_ids", None)
    if head_ids:  # structurally pruned: heads keep their numbers, the grid its width
        heads = max(cfg.n_heads, *(max(row) + 1 for row in head_ids if row))
    record = {
        "name": source.get("name") or Path(source.get("path", "model")).name,
        "path": source.get("path", ""),
        "architecture": source.get("architecture", ""),
        "model_type": source.get("model_type", ""),
        "backend": getattr(model, "backend", "native"),
        "layers": cfg.n_layers,
        "heads": heads,
        "d_model": cfg.d_model,
        "parameters": sum(p.numel() for p in model.parameters()),
        "checksum": weights_checksum(model),
    }
    if cfg.heads_per_layer:
        record["heads_per_layer"] = list(cfg.heads_per_layer)
    kv = getattr(cfg, "kv_heads_per_layer", None)
    record["causal"] = bool(getattr(cfg, "causal", False))
    if kv and list(kv) != list(cfg.heads_per_layer or []):
        record["kv_heads_per_layer"] = list(kv)  # grouped-query attention
    if head_ids:
        record["head_ids"] = [list(row) for row in head_ids]
    if source.get("native_refused"):
        record["native_refused"] = source["native_refused"]
    problems = model.weight_problems()
    if problems:
        record["not_available"] = problems
    return record


def _current_context():
    try:  # Typer >= 0.26 carries its own copy of click
        from typer.main import get_current_context
    except ImportError:
        from click import get_current_context
    return get_current_context(silent=True)


def invoked_command() -> tuple[str, dict[str, Any]]:
    """Inside a CLI command: its command line (options left at their defaults omitted) and
    every option's value; outside one: ("", {})."""
    import shlex

    ctx = _current_context()
    if ctx is None:
        return "", {}
    words = ctx.command_path.split()
    values: dict[str, Any] = {}
    for param in ctx.command.params:
        value = ctx.params.get(param.name)
        values[param.name] = str(value) if isinstance(value, Path) else value
        argument = getattr(param, "param_type_name", "") == "argument"
        if value is None or value == param.default or value in ((), []):
            continue
        if argument:
            words += [str(v) for v in value] if isinstance(value, list | tuple) else [str(value)]
        elif isinstance(value, bool):
            words.append(param.opts[0] if value else (param.secondary_opts or param.opts)[0])
        else:
            words += [param.opts[0], str(value)]
    return shlex.join(words), values
