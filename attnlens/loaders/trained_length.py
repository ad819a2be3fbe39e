"""The input length a checkpoint was trained on, read from its own files (no torch).

Sources, the smallest wins: ``sentence_bert_config.json`` ``max_seq_length`` (a sentence
model's training length: all-MiniLM-L6-v2 says 256 although its BERT has 512 positions),
then ``config.json`` ``n_positions`` / ``n_ctx`` (GPT-2) and ``max_position_embeddings``
(RoBERTa-style models number positions from ``pad_token_id + 1``, so two fewer are usable).
None when the checkpoint states no length (T5's relative positions).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from attnlens.position_ids import position_offset

FALLBACK_LENGTH = 512  # the default --max-length when a checkpoint states no trained length



@dataclass(frozen=True)
class TrainedLength:
    """``tokens`` the model was trained on, and which file and field say so."""

    tokens: int
    source: str

    def describe(self) -> str:
        return f"{self.tokens} tokens ({self.source})"


def _json(path: Path) -> dict:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def _positive_int(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def trained_length(folder: str | Path) -> TrainedLength | None:
    """The shortest length the checkpoint in ``folder`` states (see the module docstring)."""
    folder = Path(folder)
    found: list[TrainedLength] = []
    sbert = _positive_int(_json(folder / "sentence_bert_config.json").get("max_seq_length"))
    if sbert:
        found.append(TrainedLength(sbert, "sentence_bert_config.json max_seq_length"))
    config = _json(folder / "config.json")
    for key in ("n_positions", "n_ctx", "max_position_embeddings"):
        value = _positive_int(config.get(key))
        if value is None:
            continue
        offset = position_offset(config.get("model_type"), config.get("pad_token_id"))
        if key == "max_position_embeddings" and offset and value > offset:
            found.append(TrainedLength(value - offset, f"config.json {key} {value} - "
                                       f"{offset} (positions start at pad_token_id + 1)"))
        else:
            found.append(TrainedLength(value, f"config.json {key}"))
    return min(found, key=lambda t: t.tokens) if found else None


def default_max_length(folder: str | Path | None) -> int:
    """Every command's default ``--max-length``: the trained length of the checkpoint in
    ``folder``, else ``FALLBACK_LENGTH``."""
    return resolved_max_length(folder).tokens


def resolved_max_length(folder: str | Path | None) -> TrainedLength:
    """``default_max_length`` with where it comes from (the file and field, or the fallback),
    as a run record states it."""
    found = trained_length(folder) if folder else None
    if found is not None:
        return found
    return TrainedLength(FALLBACK_LENGTH, "fallback: the checkpoint states no trained length")
