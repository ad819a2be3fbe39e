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
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from attnlens.errors import ConfigError
from attnlens.runs.io import atomic_write_bytes, atomic_write_json
from attnlens.runs.outputs import CHECKPOINT_DIR, active_folder

LATEST = "latest.json"
# State <-> (JSON, tensors) -------------------------------------------------------------------
def encode_states(states: Sequence[dict]) -> tuple[bytes, dict[str, Any]]:
    """(JSON bytes, tensors) for a list of ``state_dict()``s (``stream.state.split_state``)."""
    from attnlens.stream.state import split_state

    tensors, skeleton = split_state(list(states))
    return json.dumps(skeleton, sort_keys=True, allow_nan=True).encode("utf-8"), tensors


def decode_states(data: bytes, tensors: dict[str, Any]) -> list[dict]:
    from attnlens.stream.state import join_state

    return join_state(tensors, json.loads(data.decode("utf-8")))


# Which analyzers can be checkpointed ----------------------------------------------------------
def declares_state(analyzer: Any) -> bool:
    """True when the analyzer's class (not the base) declares ``state_fields``."""
    from attnlens.stream.base import Analyzer

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
