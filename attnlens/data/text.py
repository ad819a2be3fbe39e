"""Plain-text corpora: reading, the built-in sample, batching by length.

Reading (``read_text_file``) imports no torch, so a command checks its corpus before the
slow imports and the model load.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from attnlens.data.files import read_utf8, refuse_conllu, text_lines
from attnlens.errors import DataError
from attnlens.runs.io import check_input_file

if TYPE_CHECKING:  # reading files needs no torch: commands check them before loading it

    from attnlens.data.batch import Batch
    from attnlens.data.tokenizer import Tokenizer


# `attnlens analyze` and `attnlens heads`: at most REPORT_BATCH_SIZE sentences per batch and,
# unless 0, REPORT_BATCH_TOKENS padded tokens (`--batch-tokens`): on the idle 2-core machine
# the UD EWT dev corpus pass took 12.47 s in 43 such batches against 15.56 s in 126 batches of
# 16 (docs/performance.md, batch30); no table depends on the batching beyond float32 rounding.
REPORT_BATCH_SIZE = 64
REPORT_BATCH_TOKENS = 1024


def sample_sentences() -> list[str]:
    """The built-in sample: 50 English sentences written by the attnlens authors."""
    text = resources.files("attnlens.data").joinpath("sample_sentences.txt").read_text("utf-8")
    return [line.strip() for line in text.splitlines() if line.strip()]


def read_text_file(path: str | Path, option: str = "--text") -> list[str]:
    """One sentence (or passage) per line; lines without real text are skipped.

    A line counts when it holds a letter, digit, punctuation mark or symbol (not only
    whitespace or control characters); a file without any such line is an error.
    """
    path = check_input_file(path, option, "text, one sentence per line")
    text = read_utf8(path)
    refuse_conllu(text, str(path), option, "plain text, one sentence per line")
    texts = text_lines(text)
    if not texts:
        raise DataError(f"{path} contains no text (only blank lines, whitespace or control "
                        "characters); write one sentence per line.")
    return texts


def length_sorted_chunks(
    lengths: Sequence[int], batch_size: int, batch_tokens: int | None = None
) -> list[list[int]]:
    """Indices grouped into batches of similar length (less padding, same results).

    Without ``batch_tokens``: consecutive runs of ``batch_size`` sentences in length order.
    With it, a token budget: each batch takes the next sentences in length order while its
    padded size (sentences x its longest length) stays within ``batch_tokens`` and it holds
    at most ``batch_size`` sentences (a sentence longer than the budget is a batch alone);
    short sentences then come many to a batch, long ones few. The batches come in a fixed
    pseudo-random order, so that any prefix of the corpus spans all lengths (progress-bar
    estimates are not skewed by short sentences coming first).
    """
    if batch_size < 1:
        raise DataError(f"batch size must be at least 1, not {batch_size}.")
    if batch_tokens is not None and batch_tokens < 1:
        raise DataError(f"batch tokens must be at least 1, not {batch_tokens}.")
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    if batch_tokens is None:
        chunks = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    else:
        chunks, chunk = [], []
        for i in order:  # ascending: the sentence added is the chunk's longest
            if chunk and (len(chunk) == batch_size
                          or (len(chunk) + 1) * lengths[i] > batch_tokens):
                chunks.append(chunk)
                chunk = []
            chunk.append(i)
        if chunk:
            chunks.append(chunk)
    random.Random(0).shuffle(chunks)
    return chunks


def text_batches(
    tokenizer: Tokenizer,
    texts: Sequence[str],
    batch_size: int = 16,
    max_length: int = 128,
) -> list[Batch]:
    """Tokenise ``texts`` into length-sorted batches of at most ``batch_size`` sentences."""
    from attnlens.data.batch import Batch

    if max_length < 4:
        raise DataError(f"max length must be at least 4 tokens, not {max_length}.")
    lengths = [len(t) for t in texts]
    batches = []
    for chunk in length_sorted_chunks(lengths, batch_size):
        enc = tokenizer([texts[i] for i in chunk], max_length=max_length)
        batches.append(
            Batch(
                input_ids=enc["input_ids"],
                attention_mask=enc["attention_mask"],
                token_type_ids=enc.get("token_type_ids"),
                special_mask=tokenizer.special_mask(enc["input_ids"]),
                extra={"index": chunk, "corpus_size": len(texts)},
            )
        )
    return batches
