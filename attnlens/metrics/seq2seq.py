"""Sequence-to-sequence metric: cross-entropy of a reference target given its source.

Data: a UTF-8 file of ``source<TAB>target`` lines. The target is tokenised as the model's
labels (with the tokenizer's end token, ``text_target=`` for tokenizers that distinguish the
target language, as Marian's do); the decoder reads it teacher-forced: a target of ``k`` tokens
``t_0 .. t_{k-1}`` gives the decoder inputs ``[start, t_0, ..., t_{k-2}]`` and every one of the
``k`` tokens is predicted. The metric is the mean cross-entropy over all target tokens (nats
per token, lower is better); an example's loss is the mean over its own tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch

from attnlens.errors import ConfigError, DataError
from attnlens.metrics.base import LossBatch, Metric
from attnlens.metrics.language_model import IGNORE, _TokenLossMetric
from attnlens.model.encoder_decoder import EncoderDecoderTransformer
from attnlens.model.protocol import has_several_attention_types


def read_seq2seq_pairs(path: str | Path) -> tuple[list[str], list[str]]:
    """``(sources, targets)`` from a file of ``source<TAB>target`` lines (blank lines skipped)."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"pairs file {path} does not exist; pass lines of source<TAB>target.")
    sources, targets = [], []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as exc:
        raise DataError(f"{path} is not UTF-8 text ({exc.reason}).") from exc
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        parts = line.split("\t")
        if len(parts) != 2 or not parts[0].strip() or not parts[1].strip():
            raise DataError(f"{path}:{number}: expected source<TAB>target, got "
                            f"{len(parts)} tab-separated field(s).")
        sources.append(parts[0].strip())
        targets.append(parts[1].strip())
    if len(sources) < 2:
        raise DataError(f"{path} holds fewer than 2 source/target pairs.")
    return sources, targets


class Seq2SeqMetric(_TokenLossMetric):
    """Mean target-token cross-entropy (nats) of an encoder-decoder model on pairs."""

    name = "seq2seq"
    label = "target cross-entropy (nats/token)"
    higher_is_better = False
    loss_description = "per pair: mean cross-entropy over its target tokens (teacher forcing)"

    def __init__(self, sources: Sequence[str], targets: Sequence[str], tokenizer,
                 batch_size: int = 32, max_length: int = 128) -> None:
        if len(targets) != len(sources):
            raise ConfigError(f"{len(sources)} sources but {len(targets)} targets.")
        # Examples are (source, target) pairs, so the base class's ``subset`` keeps them
        # together.
        Metric.__init__(self, list(zip(sources, targets, strict=True)), tokenizer, batch_size,
                        max_length)

    @classmethod
    def from_file(cls, path: str | Path, tokenizer, **kwargs) -> Seq2SeqMetric:
        sources, targets = read_seq2seq_pairs(path)
        return cls(sources, targets, tokenizer, **kwargs)

    @property
    def sources(self) -> list[str]:
        return [source for source, _ in self.examples]

    @property
    def targets(self) -> list[str]:
        return [target for _, target in self.examples]

    def texts(self) -> list[str]:
        return self.sources

    def example_lengths(self) -> list[int]:
        return [len(source) + len(target) for source, target in self.examples]

    def _labels(self, inputs, line_ids):
        """Decoder inputs and labels for the pairs ``line_ids``; ``inputs`` is the source."""
        enc = self.tokenizer.hf(
            text_target=[self.examples[i][1] for i in line_ids], padding=True, truncation=True,
            max_length=self.max_length, return_tensors="pt",
        )
        target, mask = enc["input_ids"], enc["attention_mask"]
        labels = target.masked_fill(mask == 0, IGNORE)  # [batch, target_pos]
        return {**inputs, "target_ids": target, "decoder_attention_mask": mask}, labels

    def make_batch(self, chunk: list[int], number: int) -> LossBatch:
        source = self.tokenizer([self.examples[i][0] for i in chunk], max_length=self.max_length)
        source.pop("token_type_ids", None)
        inputs, labels = self._labels(source, chunk)
        return LossBatch(inputs, torch.arange(len(chunk)), len(chunk), target=labels)

    def _sums(self, model, batch, head_mask=None, row_gates=None):
        if not has_several_attention_types(model):
            raise ConfigError("--metric seq2seq needs an encoder-decoder model (BART, Marian, "
                              "T5).")
        inputs = decoder_inputs(model, batch.inputs)
        return super()._sums(model, LossBatch(inputs, batch.row_example, batch.n_examples,
                                              batch.target), head_mask, row_gates)

    def evaluate(self, model: EncoderDecoderTransformer, head_mask=None) -> float:
        return self.mean_token_loss(model, head_mask)


def decoder_inputs(model: EncoderDecoderTransformer, inputs: dict) -> dict:
    """Model inputs with the teacher-forced decoder inputs of ``inputs["target_ids"]``."""
    out = {k: v for k, v in inputs.items() if k != "target_ids"}
    ids, mask = model.decoder_inputs(inputs["target_ids"], inputs["decoder_attention_mask"])
    out["decoder_input_ids"], out["decoder_attention_mask"] = ids, mask
    return out
