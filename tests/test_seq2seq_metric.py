"""The sequence-to-sequence metric: file format, and its value against transformers' own loss."""

from __future__ import annotations

import pytest
import torch

from attnlens.errors import ConfigError, DataError
from attnlens.metrics.seq2seq import Seq2SeqMetric, read_seq2seq_pairs
from tests.seq2seq_utils import tiny_bart_with_tokenizer

WORDS = ["the", "a", "cat", "dog", "sat", "ran", "on", "under", "mat", "rug", "big", "small",
         "red", "blue"]


def pairs(n: int, seed: int = 0) -> list[tuple[str, str]]:
    gen = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        a = torch.randint(0, len(WORDS), (int(torch.randint(2, 8, (1,), generator=gen)),),
                          generator=gen)
        b = torch.randint(0, len(WORDS), (int(torch.randint(1, 6, (1,), generator=gen)),),
                          generator=gen)
        out.append((" ".join(WORDS[i] for i in a), " ".join(WORDS[i] for i in b)))
    return out


def test_file_format_errors(tmp_path):
    path = tmp_path / "pairs.tsv"
    path.write_text("a cat\tthe dog\n\nred mat\tblue rug\n")
    assert read_seq2seq_pairs(path) == (["a cat", "red mat"], ["the dog", "blue rug"])
    path.write_text("a cat the dog\nred mat\tblue rug\n")
    with pytest.raises(DataError, match=r"pairs.tsv:1: expected source<TAB>target"):
        read_seq2seq_pairs(path)
    path.write_text("a cat\tthe dog\n")
    with pytest.raises(DataError, match="fewer than 2"):
        read_seq2seq_pairs(path)


def test_metric_equals_transformers_loss(tmp_path):
    """Mean target-token cross-entropy = BartForConditionalGeneration(labels=...).loss."""
    from attnlens.loaders import load

    hf = tiny_bart_with_tokenizer(tmp_path, WORDS)
    model, tokenizer = load(tmp_path)
    data = pairs(11)
    metric = Seq2SeqMetric([s for s, _ in data], [t for _, t in data], tokenizer,
                           batch_size=4)
    total = count = 0.0
    with torch.no_grad():
        for source, target in data:  # one pair at a time: no padding in HF's computation
            enc = tokenizer.hf([source], return_tensors="pt")
            labels = tokenizer.hf(text_target=[target], return_tensors="pt")["input_ids"]
            loss = hf(**enc, labels=labels).loss
            total += float(loss) * labels.shape[1]
            count += labels.shape[1]
    # token-weighted means of fp32 cross-entropies (~4.6 nats) over 11 pairs in other batch
    # shapes: summation order differs (eps 1.2e-7 x 4.6 x a few dozen terms) -> 1e-5
    assert metric.evaluate(model) == pytest.approx(total / count, abs=1e-5)
    losses = torch.cat([metric.example_losses(model, b) for b in metric.loss_batches()])
    assert losses.shape == (11,) and bool((losses > 0).all())
    gate = torch.ones(model.n_layers, 4)
    gate[-1] = 0.0  # remove the last cross-attention layer's heads: the loss moves
    assert metric.evaluate(model, gate) != pytest.approx(metric.evaluate(model), abs=1e-4)


def test_metric_needs_an_encoder_decoder(tmp_path):
    from attnlens.metrics.factory import load_metric
    from tests.helpers import tiny_model
    from tests.pruning_toys import word_tokenizer

    path = tmp_path / "pairs.tsv"
    path.write_text("a cat\tthe dog\nred mat\tblue rug\n")
    with pytest.raises(ConfigError, match="needs an encoder-decoder model"):
        load_metric("seq2seq", tiny_model(), word_tokenizer(), path)
