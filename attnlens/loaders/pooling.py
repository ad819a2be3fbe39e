"""How a checkpoint turns token states into one sentence vector: its pooling.

A sentence-transformers checkpoint says so in its own files: ``modules.json`` names the
pooling module's folder (``1_Pooling``), whose ``config.json`` sets ``pooling_mode_*``
(all-MiniLM-L6-v2: ``pooling_mode_mean_tokens``). ``checkpoint_pooling`` reads that and
returns ``"mean"`` (mean over the real tokens, special tokens included, as
sentence-transformers masks only padding), ``"cls"`` (the first token), ``"max"``,
``"last"`` (the last token); without such files ``"last"`` for a causal model and
``"cls"`` otherwise, the token a classification head reads.
"""

from __future__ import annotations

import json
from pathlib import Path

POOLING_MODES = {
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_mean_sqrt_len_tokens": "mean",
    "pooling_mode_cls_token": "cls",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_lasttoken": "last",
}


def _pooling_folder(path: Path) -> Path | None:
    modules = path / "modules.json"
    try:
        entries = json.loads(modules.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        entries = None
    if isinstance(entries, list):
        for entry in entries:
            if isinstance(entry, dict) and str(entry.get("type", "")).endswith("Pooling"):
                folder = path / str(entry.get("path", ""))
                if folder.is_dir():
                    return folder
    folder = path / "1_Pooling"
    return folder if folder.is_dir() else None


def checkpoint_pooling(path: str | Path | None, causal: bool = False) -> tuple[str, str]:
    """(pooling, where it was read) for the checkpoint folder ``path`` (module docstring)."""
    default = ("last", "causal model: the last token") if causal else (
        "cls", "no pooling config: the first token")
    if not path:
        return default
    folder = _pooling_folder(Path(path))
    if folder is None:
        return default
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return default
    for key, mode in POOLING_MODES.items():
        if isinstance(config, dict) and config.get(key) is True:
            return mode, f"{folder.name}/config.json: {key}"
    return default
