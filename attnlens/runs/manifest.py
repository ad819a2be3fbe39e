"""Run manifests: what a run read (content hashes) and how it was asked (every option).

A manifest is written into every output folder (``manifest.json``) and compared when a run
is resumed: ``--resume`` continues only the same run, so a changed input file, other weights
or another option value is refused and named, instead of mixing old and new results.

Hashes are sha256 of file contents. Files of 16 MiB and more (model weights) are hashed
once per (path, size, modification time, inode) and remembered in
``$XDG_CACHE_HOME/attnlens/sha256.json`` so that large checkpoints are not reread by every
run; ``ATTNLENS_NO_HASH_CACHE=1`` turns the cache off.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from pathlib import Path
from typing import Any

MANIFEST_VERSION = 1
_CACHE_MIN_BYTES = 16 << 20
# Options that change nothing in the run's tables: never compared on --resume. (``prune``'s
# --export is written after the run from its table, so a finished run can be exported.)
NOT_COMPARED = frozenset({"out", "force", "resume", "quiet", "checkpoint_every", "export",
                          "export_step"})


# Hashing ------------------------------------------------------------------------------------
def _cache_path() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "attnlens" / "sha256.json"


def _cache_key(path: Path) -> str:
    stat = path.stat()
    return f"{path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}|{stat.st_ino}"


def _read_cache() -> dict[str, str]:
    try:
        cache = json.loads(_cache_path().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return cache if isinstance(cache, dict) else {}


def _remember(key: str, digest: str) -> None:
    from attnlens.runs.io import atomic_write_json

    cache = _read_cache()
    cache[key] = digest
    with contextlib.suppress(OSError):  # a read-only home only costs a rehash next time
        atomic_write_json(_cache_path(), dict(list(cache.items())[-256:]))


def sha256_file(path: str | os.PathLike) -> str:
    """Hex sha256 of a file's contents (large files through the cache)."""
    path = Path(path)
    use_cache = (path.stat().st_size >= _CACHE_MIN_BYTES
                 and not os.environ.get("ATTNLENS_NO_HASH_CACHE"))
    key = _cache_key(path) if use_cache else ""
    if use_cache and key in (cache := _read_cache()):
        return cache[key]
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    hexdigest = digest.hexdigest()
    if use_cache:
        _remember(key, hexdigest)
    return hexdigest


def input_fingerprint(path: str | os.PathLike) -> dict[str, Any]:
    """``{"path", "bytes", "sha256"}`` of one input file."""
    path = Path(path)
    return {"path": str(path.resolve()), "bytes": path.stat().st_size,
            "sha256": sha256_file(path)}


def files_fingerprint(files: list[Path]) -> dict[str, Any]:
    """``{"files": {name: sha256}, "sha256": combined}`` of a set of files (one folder)."""
    digests = {p.name: sha256_file(p) for p in files}
    combined = hashlib.sha256(json.dumps(digests, sort_keys=True).encode()).hexdigest()
    return {"files": digests, "sha256": combined}


# Manifests ----------------------------------------------------------------------------------
def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def build_manifest(
    command: str,
    options: dict[str, Any],
    inputs: dict[str, str | os.PathLike | None] | None = None,
    model: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The record of a run: command, every option, input hashes and the model's hash.

    ``inputs`` maps an option name to a file (None: not given); ``model`` is the model's
    fingerprint (``loaders.checkpoint.checkpoint_fingerprint``; None: the command uses none).
    """
    from attnlens import __version__

    inputs = {k: v for k, v in (inputs or {}).items() if v is not None}
    skip = set(inputs) | ({"model"} if model else set())
    return {
        "attnlens_manifest": MANIFEST_VERSION,
        "attnlens_version": __version__,
        "command": command,
        "options": {k: _jsonable(v) for k, v in sorted(options.items())
                    if k not in NOT_COMPARED and k not in skip},
        "inputs": {k: input_fingerprint(v) for k, v in sorted(inputs.items())},
        "model": model or None,
    }


def option_label(name: str) -> str:
    """``min_heads_per_layer`` -> ``--min-heads-per-layer`` (``model`` -> ``MODEL``)."""
    return "MODEL" if name == "model" else "--" + name.replace("_", "-")


def _short(digest: str | None) -> str:
    return "none" if not digest else digest[:12] + "…"


def manifest_differences(saved: dict, current: dict) -> list[str]:
    """What differs between two manifests, one phrase each (empty when the same run)."""
    changes = []
    for key in ("command", "attnlens_version"):
        if saved.get(key) != current.get(key):
            changes.append(f"{key} was {saved.get(key)!r}, now {current.get(key)!r}")
    old_model, new_model = saved.get("model") or {}, current.get("model") or {}
    if old_model.get("sha256") != new_model.get("sha256"):
        changes.append(f"the model's files changed (sha256 {_short(old_model.get('sha256'))} "
                       f"then, {_short(new_model.get('sha256'))} now)")
    old_inputs, new_inputs = saved.get("inputs") or {}, current.get("inputs") or {}
    for name in sorted(set(old_inputs) | set(new_inputs)):
        old, new = old_inputs.get(name) or {}, new_inputs.get(name) or {}
        if old.get("sha256") != new.get("sha256"):
            if not old or not new:
                changes.append(f"{option_label(name)} was {old.get('path', 'not given')}, "
                               f"now {new.get('path', 'not given')}")
            else:
                changes.append(f"the contents of {option_label(name)} ({new['path']}) changed "
                               f"(sha256 {_short(old['sha256'])} then, "
                               f"{_short(new['sha256'])} now)")
    old_opts, new_opts = saved.get("options") or {}, current.get("options") or {}
    for name in sorted(set(old_opts) | set(new_opts)):
        if old_opts.get(name) != new_opts.get(name):
            changes.append(f"{option_label(name)} was {old_opts.get(name)!r}, "
                           f"now {new_opts.get(name)!r}")
    return changes
