"""Crash-safe checkpoints of analyzer states, and resuming a corpus pass from the last one.

A checkpoint is every analyzer's ``state_dict()`` (the v2 protocol) after a whole number of
batches: tensors go to ``step-NNNNNN.safetensors``, everything else to ``step-NNNNNN.json``
(with the tensors' places marked), then ``latest.json`` is replaced atomically to point at
the pair. A crash at any moment leaves ``latest.json`` naming a complete pair, so the run
resumes from there and, since batches come in a fixed order and states are restored
bit for bit, ends with the same tables as an uninterrupted run.

``AnalysisCheckpoint.wrap(batches, analyzers)`` is the whole interface: it yields the
batches still to do (after restoring the saved states when resuming) and saves a checkpoint
every ``every`` sentences, between batches, when every analyzer has folded the batch before.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from attnlens.errors import ConfigError
from attnlens.outputs import CHECKPOINT_DIR, active_folder, atomic_write_bytes, atomic_write_json

LATEST = "latest.json"
_MARK = "__attnlens__"  # key of an encoded non-JSON value


# State <-> (JSON, tensors) -------------------------------------------------------------------
class _Encoder:
    """Turns a ``state_dict()`` into JSON plus a flat dict of tensors, and back."""

    def __init__(self) -> None:
        self.tensors: dict[str, Any] = {}

    def encode(self, value: Any, where: str) -> Any:
        import numpy as np
        import torch

        if isinstance(value, torch.Tensor):
            key = f"t{len(self.tensors)}"
            self.tensors[key] = value.detach().to("cpu").contiguous().clone()
            return {_MARK: "tensor", "key": key}
        if isinstance(value, np.ndarray):
            key = f"t{len(self.tensors)}"
            self.tensors[key] = torch.from_numpy(np.ascontiguousarray(value).copy())
            return {_MARK: "ndarray", "key": key}
        if isinstance(value, np.generic):
            return {_MARK: "numpy", "dtype": str(value.dtype), "value": value.item()}
        if isinstance(value, Counter):
            items = [[self.encode(k, where), self.encode(v, where)] for k, v in value.items()]
            return {_MARK: "counter", "items": items}
        if isinstance(value, dict):
            if all(isinstance(k, str) and k != _MARK for k in value):
                return {k: self.encode(v, f"{where}[{k!r}]") for k, v in value.items()}
            items = [[self.encode(k, where), self.encode(v, f"{where}[{k!r}]")]
                     for k, v in value.items()]
            return {_MARK: "dict", "items": items}
        if isinstance(value, tuple):
            return {_MARK: "tuple", "items": [self.encode(v, where) for v in value]}
        if isinstance(value, (set, frozenset)):
            return {_MARK: "set", "items": [self.encode(v, where) for v in value]}
        if isinstance(value, list):
            return [self.encode(v, where) for v in value]
        if value is None or isinstance(value, (bool, int, float, str)):
            return value
        raise ConfigError(f"cannot checkpoint {where}: a {type(value).__name__} is not plain "
                          "data (tensors, numbers, strings, lists, dicts, Counters).")

    def decode(self, value: Any) -> Any:
        import numpy as np

        if isinstance(value, list):
            return [self.decode(v) for v in value]
        if not isinstance(value, dict):
            return value
        kind = value.get(_MARK)
        if kind is None:
            return {k: self.decode(v) for k, v in value.items()}
        if kind == "tensor":
            return self.tensors[value["key"]]
        if kind == "ndarray":
            return self.tensors[value["key"]].numpy()
        if kind == "numpy":
            return np.dtype(value["dtype"]).type(value["value"])
        items = value["items"]
        if kind == "counter":
            return Counter({self.decode(k): self.decode(v) for k, v in items})
        if kind == "dict":
            return {self.decode(k): self.decode(v) for k, v in items}
        if kind == "tuple":
            return tuple(self.decode(v) for v in items)
        if kind == "set":
            return {self.decode(v) for v in items}
        raise ConfigError(f"unknown value kind {kind!r} in a checkpoint; it is damaged.")


def encode_states(states: Sequence[dict]) -> tuple[bytes, dict[str, Any]]:
    """(JSON bytes, tensors) for a list of ``state_dict()``s."""
    encoder = _Encoder()
    encoded = [encoder.encode(s, s.get("analyzer", "analyzer")) for s in states]
    text = json.dumps(encoded, sort_keys=True, allow_nan=True)
    return text.encode("utf-8"), encoder.tensors


def decode_states(data: bytes, tensors: dict[str, Any]) -> list[dict]:
    encoder = _Encoder()
    encoder.tensors = tensors
    return [encoder.decode(s) for s in json.loads(data.decode("utf-8"))]


# Which analyzers can be checkpointed ----------------------------------------------------------
def declares_state(analyzer: Any) -> bool:
    """True when the analyzer's class (not the base) declares ``state_fields``."""
    from attnlens.analysis.base import Analyzer

    for cls in type(analyzer).__mro__:
        if cls is Analyzer:
            return False
        if "state_fields" in vars(cls):
            return True
    return False


def check_checkpointable(analyzers: Sequence[Any]) -> None:
    missing = sorted({type(a).__name__ for a in analyzers if not declares_state(a)})
    if missing:
        raise ConfigError(
            f"{', '.join(missing)} cannot be checkpointed yet (no state_fields); "
            "run without --checkpoint-every / --resume."
        )


def batch_order_digest(batches: Sequence[Any]) -> str:
    """sha256 of which sentences each batch holds and of its token ids (the corpus order)."""
    digest = hashlib.sha256()
    for batch in batches:
        digest.update(json.dumps(list(batch.extra.get("index", []))).encode())
        digest.update(str(tuple(batch.input_ids.shape)).encode())
        digest.update(batch.input_ids.cpu().numpy().tobytes())
    return digest.hexdigest()


# Checkpoints on disk -------------------------------------------------------------------------
class AnalysisCheckpoint:
    """Checkpoints of a corpus pass in ``folder/checkpoint`` (see the module docstring)."""

    def __init__(self, folder: str | Path, every: int | None = None, resume: bool = False):
        if every is not None and every < 1:
            raise ConfigError(f"--checkpoint-every must be at least 1 sentence, not {every}.")
        self.dir = Path(folder) / CHECKPOINT_DIR
        self.every, self.resume = every, resume
        self.batches_done = self.sentences_done = 0
        self.step = 0

    def latest(self) -> dict | None:
        path = self.dir / LATEST
        if not path.is_file():
            return None
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ConfigError(f"{path} is damaged ({exc}); add --force without --resume to "
                              "start over.") from exc

    def save(self, analyzers: Sequence[Any], order: str, total: int) -> None:
        from safetensors.torch import save

        self.step += 1
        stem = f"step-{self.step:06d}"
        data, tensors = encode_states([a.state_dict() for a in analyzers])
        atomic_write_bytes(self.dir / f"{stem}.safetensors", save(tensors))
        atomic_write_bytes(self.dir / f"{stem}.json", data)
        atomic_write_json(self.dir / LATEST, {
            "step": self.step, "files": [f"{stem}.json", f"{stem}.safetensors"],
            "batches_done": self.batches_done, "sentences_done": self.sentences_done,
            "sentences_total": total, "batch_order_sha256": order,
            "analyzers": [type(a).__name__ for a in analyzers],
        })
        for old in self.dir.glob("step-*"):
            if not old.name.startswith(stem):
                old.unlink(missing_ok=True)
        folder = active_folder()
        if folder is not None:
            folder.progress = (f"a checkpoint after {self.sentences_done} of {total} "
                               "sentences")

    def restore(self, analyzers: Sequence[Any], order: str) -> int:
        """Load the saved states into ``analyzers``; return how many batches they cover."""
        from safetensors.torch import load

        latest = self.latest()
        if latest is None:
            return 0
        names = [type(a).__name__ for a in analyzers]
        if latest.get("analyzers") != names:
            raise ConfigError(f"the checkpoint in {self.dir} holds {latest.get('analyzers')}, "
                              f"this run computes {names}; add --force to start over.")
        if latest.get("batch_order_sha256") != order:
            raise ConfigError(f"the corpus comes in other batches than when the checkpoint in "
                              f"{self.dir} was saved; add --force to start over.")
        json_name, tensor_name = latest["files"]
        try:
            tensors = load((self.dir / tensor_name).read_bytes())
            states = decode_states((self.dir / json_name).read_bytes(), tensors)
        except (OSError, ValueError, KeyError) as exc:
            raise ConfigError(f"the checkpoint in {self.dir} is damaged ({exc}); add --force "
                              "to start over.") from exc
        for analyzer, state in zip(analyzers, states, strict=True):
            analyzer.load_state_dict(state)
        self.step = int(latest["step"])
        self.batches_done = int(latest["batches_done"])
        self.sentences_done = int(latest["sentences_done"])
        return self.batches_done

    def wrap(self, batches: Sequence[Any], analyzers: Sequence[Any]) -> Iterator[Any]:
        """The batches still to do; saves a checkpoint every ``every`` sentences and once
        the pass is over (so an interruption while writing figures redoes no batch)."""
        saved = self.latest() if self.resume else None
        if self.every is None and saved is None:
            yield from batches
            return
        check_checkpointable(analyzers)
        order = batch_order_digest(batches)
        total = sum(int(b.input_ids.shape[0]) for b in batches)
        start = self.restore(analyzers, order) if saved is not None else 0
        last_saved = self.sentences_done
        for index in range(start, len(batches)):
            batch = batches[index]
            yield batch
            # Back here only once the runner has fed the whole batch to every analyzer.
            self.batches_done = index + 1
            self.sentences_done += int(batch.input_ids.shape[0])
            if self.every is not None and self.sentences_done - last_saved >= self.every:
                self.save(analyzers, order, total)
                last_saved = self.sentences_done
        if self.every is not None and self.sentences_done > last_saved:
            self.save(analyzers, order, total)
