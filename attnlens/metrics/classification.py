"""Accuracy of a sequence classifier on a ``text,label`` CSV; cross-entropy for gradients."""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from pathlib import Path

import torch
import torch.nn.functional as F

from attnlens.errors import DataError
from attnlens.metrics.base import LossBatch, Metric
from attnlens.model.gates import gated_forward
from attnlens.model.transformer import HookedTransformer


def model_label_ids(model: HookedTransformer) -> dict[str, int]:
    """The checkpoint's ``label2id`` (and ``id2label`` reversed), if its config has them."""
    path = model.cfg.source.get("path")
    config = Path(path) / "config.json" if path else None
    if config is None or not config.is_file():
        return {}
    hf = json.loads(config.read_text())
    names = {str(v): int(k) for k, v in (hf.get("id2label") or {}).items()}
    names.update({str(k): int(v) for k, v in (hf.get("label2id") or {}).items()})
    return names


def read_labelled(
    path: str | Path, label_ids: dict[str, int] | None = None, n_labels: int | None = None
) -> tuple[list[str], list[int]]:
    """Rows ``text,label`` (an optional ``text,label`` header); labels are ids or names."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"labelled file {path} does not exist; pass a CSV of text,label rows.")
    label_ids = label_ids or {}
    texts, labels = [], []
    with path.open(encoding="utf-8", newline="") as handle:
        for line_no, row in enumerate(csv.reader(handle), start=1):
            if not row:
                continue
            if len(row) != 2:
                raise DataError(
                    f"{path}:{line_no}: expected 2 columns (text,label), got {len(row)}."
                )
            if line_no == 1 and [c.strip().lower() for c in row] == ["text", "label"]:
                continue
            value = row[1].strip()
            if value in label_ids:
                label = label_ids[value]
            else:
                try:
                    label = int(value)
                except ValueError:
                    known = ", ".join(sorted(label_ids)) or "integer ids"
                    raise DataError(
                        f"{path}:{line_no}: label {value!r} is neither an id nor one of: {known}."
                    ) from None
            if n_labels is not None and not 0 <= label < n_labels:
                raise DataError(
                    f"{path}:{line_no}: label {label} is outside the model's 0..{n_labels - 1}."
                )
            texts.append(row[0])
            labels.append(label)
    if not texts:
        raise DataError(f"{path} holds no rows.")
    return texts, labels


class AccuracyMetric(Metric):
    """Classification accuracy x 100; per-example cross-entropy for gradients."""

    name = "accuracy"
    label = "accuracy (%)"
    higher_is_better = True
    loss_description = "per example cross-entropy of the gold label"

    def __init__(self, texts: Sequence[str], labels: Sequence[int], tokenizer,
                 batch_size: int = 32, max_length: int = 128) -> None:
        if len(texts) != len(labels):
            raise DataError("texts and labels differ in length.")
        super().__init__(list(zip(texts, labels, strict=True)), tokenizer, batch_size,
                         max_length)

    @property
    def lines(self) -> list[str]:
        return [text for text, _ in self.examples]

    @property
    def labels(self) -> list[int]:
        return [label for _, label in self.examples]

    def texts(self) -> list[str]:
        return self.lines

    def make_batch(self, chunk: list[int], number: int) -> LossBatch:
        rows = [self.examples[i] for i in chunk]
        return LossBatch(
            self.tokenizer([text for text, _ in rows], max_length=self.max_length),
            torch.arange(len(chunk)),
            len(chunk),
            target=torch.tensor([label for _, label in rows]),
        )

    def example_losses(self, model, batch, head_mask=None, row_gates=None) -> torch.Tensor:
        batch = batch.to(model.device)
        logits = gated_forward(model, batch.inputs, head_mask, row_gates, "logits")
        return F.cross_entropy(logits.float(), batch.target, reduction="none")  # [batch]

    @torch.no_grad()
    def evaluate(self, model: HookedTransformer, head_mask: torch.Tensor | None = None) -> float:
        correct = 0
        for batch in self.loss_batches():
            batch = batch.to(model.device)
            logits = model(**batch.inputs, head_mask=head_mask, return_type="logits")
            correct += int((logits.argmax(-1) == batch.target).sum())
        return 100.0 * correct / self.n_examples
