"""Word-level attention (Clark et al. 2019) and batches of pre-split words.

A token-level pattern ``P [batch, head, query_pos, key_pos]`` becomes a word-level one
``W [batch, head, query_word, key_word]``:

- attention *to* a word split into several tokens is the **sum** over its tokens (columns);
- attention *from* a split word is the **mean** over its tokens' rows;
- rows and columns of special tokens ([CLS], [SEP]) and of words cut by truncation are
  dropped **without renormalising**, so a word row sums to 1 minus its weight on those.
  Attention to special tokens is reported separately (``to_special``).

Both steps are one batched product with a token->word assignment matrix
``A [batch, word, pos]``: ``W = A_mean @ P @ A.T``.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from attnlens.data.alignment import Span, join_words, word_spans
from attnlens.data.batch import Batch
from attnlens.data.text import length_sorted_chunks
from attnlens.data.tokenizer import Tokenizer
from attnlens.errors import DataError


def split_words(text: str) -> list[str]:
    """Split plain text into words and punctuation marks (``"don't stop."`` -> 3 words)."""
    return word_spans(text)[0]


def is_wordlike(word: str) -> bool:
    """True when ``word`` contains a letter or a digit (punctuation is not a word here)."""
    return any(ch.isalnum() for ch in word)


@dataclass
class WordAttention:
    """Word-level attention of one layer for a batch.

    ``weights [batch, head, query_word, key_word]``; ``to_special [batch, head, query_word]``
    is a word's total attention to special tokens; ``valid [batch, word]`` marks real words
    (False for padding words of shorter sentences).
    """

    weights: torch.Tensor
    to_special: torch.Tensor
    valid: torch.Tensor


def assignment_matrix(word_ids: torch.Tensor, n_words: int) -> torch.Tensor:
    """``A [batch, word, pos]``: 1 where token ``pos`` belongs to word ``word``."""
    words = torch.arange(n_words, device=word_ids.device)  # [word]
    return (word_ids[:, None, :] == words[None, :, None]).to(torch.float32)


def word_attention(
    pattern: torch.Tensor,
    word_ids: torch.Tensor,
    special_mask: torch.Tensor | None = None,
    n_words: int | None = None,
) -> WordAttention:
    """Aggregate a token pattern ``[batch, head, query_pos, key_pos]`` to words.

    ``word_ids [batch, pos]`` gives each token's word (-1: special, padding or a word cut by
    truncation). ``special_mask [batch, pos]`` marks the special tokens whose total weight is
    returned as ``to_special``.
    """
    if n_words is None:
        n_words = int(word_ids.max().item()) + 1 if word_ids.numel() else 0
    n_words = max(n_words, 0)
    assign = assignment_matrix(word_ids, n_words)  # [batch, word, pos]
    tokens_per_word = assign.sum(-1)  # [batch, word]
    valid = tokens_per_word > 0
    from_mean = assign / tokens_per_word.clamp_min(1)[..., None]  # [batch, word, pos]
    p = pattern.to(torch.float32)
    # rows: mean over a word's tokens; columns: sum over a word's tokens
    rows = from_mean[:, None] @ p  # [batch, head, query_word, key_pos]
    weights = rows @ assign.transpose(1, 2)[:, None]  # [batch, head, query_word, key_word]
    if special_mask is None:
        to_special = torch.zeros(weights.shape[:3], device=weights.device)
    else:
        special = special_mask.to(rows.dtype)[:, None, :, None]  # [batch, 1, key_pos, 1]
        to_special = (rows @ special)[..., 0]  # [batch, head, query_word]
    return WordAttention(weights=weights, to_special=to_special, valid=valid)


class WordAttentionContext:
    """Word-level attention of the batch and layer being analysed, shared explicitly.

    One object per run, passed to every analyzer that reads word-level attention (syntactic
    and rare-word heads), so each layer of each batch is aggregated once however many
    analyzers read it. It remembers one layer of one batch (weak references to the batch and
    the pattern tensor, so it never keeps either alive): asking for another batch, layer or
    pattern recomputes. Analyzers given none make their own (nothing shared, same numbers).
    """

    def __init__(self) -> None:
        self.clear()

    def clear(self) -> None:
        """Forget the remembered layer (analyzers call this at the end of each batch)."""
        self._key: tuple | None = None
        self._value: WordAttention | None = None

    def get(self, batch: Batch, layer: int, pattern: torch.Tensor) -> WordAttention:
        """``word_attention`` of ``pattern [batch, head, query_pos, key_pos]`` for ``batch``."""
        if self._key is not None:
            batch_ref, pattern_ref, known_layer = self._key
            if batch_ref() is batch and pattern_ref() is pattern and known_layer == layer:
                return self._value
        n_words = max(batch.extra["n_words"]) if batch.extra.get("n_words") else None
        value = word_attention(pattern, batch.word_ids, batch.special_mask, n_words=n_words)
        self._key = (weakref.ref(batch), weakref.ref(pattern), layer)
        self._value = value
        return value


def word_batches(
    tokenizer: Tokenizer,
    sentences: Sequence[Sequence[str]],
    batch_size: int = 16,
    max_length: int = 128,
    annotations: dict[str, Sequence[Any]] | None = None,
    surfaces: Sequence[tuple[str, Sequence[Span]]] | None = None,
) -> list[Batch]:
    """Length-sorted batches of sentences of words with ``word_ids`` and ``words``.

    The model reads each sentence's raw text (``surfaces[i]``: the text and its words'
    character spans; default: the words joined by single spaces), tokenised as the tokenizer
    tokenises it; tokens are given to words by their offsets (``attnlens.data.alignment``).
    ``annotations`` maps a name to one value per sentence (e.g. dependency heads); each
    batch carries its sentences' values in ``extra`` under the same name, plus ``n_words``
    (words that survived truncation), ``unaligned`` (kept words without a token of their
    own) and ``index`` (positions in ``sentences``).
    """
    if max_length < 4:
        raise DataError(f"max length must be at least 4 tokens, not {max_length}.")
    sentences = [list(s) for s in sentences]
    empty = [i for i, s in enumerate(sentences) if not s]
    if empty:
        raise DataError(f"sentence {empty[0]} has no words; remove empty sentences.")
    if surfaces is None:
        surfaces = [join_words(s) for s in sentences]
    texts = [text for text, _ in surfaces]
    spans = [list(sp) for _, sp in surfaces]
    annotations = dict(annotations or {})
    for name, values in annotations.items():
        if len(values) != len(sentences):
            raise DataError(f"{len(values)} values of {name!r} for {len(sentences)} sentences.")
    counts = tokenizer.tokens_per_text_word(texts, spans)
    batches = []
    for chunk in length_sorted_chunks([sum(c) for c in counts], batch_size):
        chunk_sentences = [sentences[i] for i in chunk]
        enc = tokenizer.encode_text_words(
            [texts[i] for i in chunk], [spans[i] for i in chunk], max_length=max_length,
            full_counts=[counts[i] for i in chunk],
        )
        extra: dict[str, Any] = {"index": chunk, "n_words": enc.n_words,
                                 "unaligned": enc.unaligned}
        for name, values in annotations.items():
            extra[name] = [values[i] for i in chunk]
        batches.append(
            Batch(
                input_ids=enc.input_ids,
                attention_mask=enc.attention_mask,
                token_type_ids=enc.token_type_ids,
                word_ids=enc.word_ids,
                words=chunk_sentences,
                special_mask=tokenizer.special_mask(enc.input_ids),
                extra=extra,
            )
        )
    return batches


def text_word_batches(
    tokenizer: Tokenizer, texts: Sequence[str], batch_size: int = 16, max_length: int = 128
) -> list[Batch]:
    """Plain-text lines split into words (``split_words``), batched like a treebank; the
    model reads each line as it is."""
    kept = [(t, word_spans(t)) for t in texts]
    kept = [(t, words, spans) for t, (words, spans) in kept if words]
    if not kept:
        raise DataError("the text has no words; write one sentence per line.")
    return word_batches(tokenizer, [words for _, words, _ in kept], batch_size=batch_size,
                        max_length=max_length, surfaces=[(t, spans) for t, _, spans in kept])


def treebank_batches(
    tokenizer: Tokenizer, sentences: Sequence, batch_size: int = 16, max_length: int = 128
) -> list[Batch]:
    """Batches of ``DepSentence``s; ``extra`` carries ``heads`` and ``relations`` per sentence.

    The model reads each sentence's text (its ``# text`` line when the words are found in
    it, see ``DepSentence.surface``)."""
    return word_batches(
        tokenizer,
        [s.words for s in sentences],
        batch_size=batch_size,
        max_length=max_length,
        annotations={
            "heads": [s.heads for s in sentences],
            "relations": [s.relations for s in sentences],
        },
        surfaces=[s.surface() for s in sentences],
    )
