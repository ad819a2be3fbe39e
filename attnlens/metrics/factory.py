"""Build the importance and evaluation metrics for a checkpoint and a data file."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from attnlens.data.text import read_text_file
from attnlens.errors import ConfigError
from attnlens.metrics import METRIC_NAMES
from attnlens.metrics.base import Metric, require_head, split_indices
from attnlens.model.protocol import has_several_attention_types
from attnlens.model.transformer import HookedTransformer


@dataclass
class MetricPair:
    """The importance metric (scores heads) and the held-apart evaluation metric."""

    importance: Metric
    evaluation: Metric
    split: str  # how the two parts were obtained, for the run record


def auto_metric(model: HookedTransformer, data: str | Path) -> str:
    """The natural metric: the model's own head, else STS for a CSV, else fidelity.

    Encoder-decoder models use the sequence-to-sequence metric (source<TAB>target pairs).
    """
    if has_several_attention_types(model):
        return "seq2seq"
    head = model.cfg.head
    if head in ("mlm", "lm"):
        return head
    if head == "classifier":
        return "accuracy" if str(data).lower().endswith(".csv") else "fidelity"
    return "sts" if str(data).lower().endswith(".csv") else "fidelity"


def load_metric(
    name: str,
    model: HookedTransformer,
    tokenizer,
    data: str | Path,
    batch_size: int = 32,
    max_length: int = 128,
    seed: int = 0,
    score_range: tuple[float, float] | None = None,
) -> Metric:
    """One metric on the whole of ``data`` (``score_range``: STS scores' scale, default 0-5)."""
    if has_several_attention_types(model) != (name == "seq2seq"):
        raise ConfigError(
            "--metric seq2seq needs an encoder-decoder model, and an encoder-decoder model "
            f"needs --metric seq2seq (got {name!r})."
        )
    if name == "seq2seq":
        from attnlens.metrics.seq2seq import Seq2SeqMetric

        require_head(model, ("lm",), name)
        return Seq2SeqMetric.from_file(data, tokenizer, batch_size=batch_size,
                                       max_length=max_length)
    if name == "sts":
        from attnlens.data.pairs import STS_RANGE
        from attnlens.metrics.sts_task import StsMetric

        require_head(model, (None, "pooler"), name)
        return StsMetric.from_csv(data, tokenizer, score_range or STS_RANGE,
                                  batch_size=batch_size, max_length=max_length)
    if name == "mlm":
        from attnlens.metrics.language_model import MaskedLMMetric

        require_head(model, ("mlm",), name)
        return MaskedLMMetric(read_text_file(data), tokenizer, batch_size, max_length, seed=seed)
    if name == "lm":
        from attnlens.metrics.language_model import CausalLMMetric

        require_head(model, ("lm",), name)
        return CausalLMMetric(read_text_file(data), tokenizer, batch_size, max_length)
    if name == "accuracy":
        from attnlens.metrics.classification import (
            AccuracyMetric,
            model_label_ids,
            read_labelled,
        )

        require_head(model, ("classifier",), name)
        texts, labels = read_labelled(data, model_label_ids(model), model.cfg.n_labels)
        return AccuracyMetric(texts, labels, tokenizer, batch_size, max_length)
    if name == "fidelity":
        from attnlens.metrics.fidelity import FidelityMetric

        return FidelityMetric(read_text_file(data), tokenizer, model, batch_size, max_length,
                              seed=seed)
    raise ConfigError(f"unknown metric {name!r}; choose one of {', '.join(METRIC_NAMES)}.")


def build_metrics(
    name: str,
    model: HookedTransformer,
    tokenizer,
    data: str | Path,
    importance_data: str | Path | None = None,
    eval_fraction: float = 0.5,
    seed: int = 0,
    batch_size: int = 32,
    max_length: int = 128,
    score_range: tuple[float, float] | None = None,
) -> MetricPair:
    """Importance and evaluation metrics: two files, or ``data`` split with ``seed``.

    Without ``importance_data`` a seeded permutation puts ``eval_fraction`` of the examples
    (pairs, lines or rows) in the evaluation part and the rest in the importance part.
    """
    if name == "auto":
        name = auto_metric(model, data)
    full = load_metric(name, model, tokenizer, data, batch_size, max_length, seed, score_range)
    if importance_data is not None:
        importance = load_metric(name, model, tokenizer, importance_data, batch_size,
                                 max_length, seed, score_range)
        return MetricPair(importance, full, f"importance: {importance_data}; evaluation: {data}")
    imp_idx, eval_idx = split_indices(full.n_examples, eval_fraction, seed)
    split = (
        f"{data} split with seed {seed}: {len(imp_idx)} examples for importance, "
        f"{len(eval_idx)} for evaluation"
    )
    return MetricPair(full.subset(imp_idx), full.subset(eval_idx), split)
