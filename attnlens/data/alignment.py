"""Words located in a raw text, and each token of the text's encoding given to a word.

The model always reads the raw text, tokenised as the tokenizer tokenises it (so byte-level
BPE sees the spaces between words, SentencePiece its word-start marks); words are then
found from character offsets, never by tokenising words one by one:

- a word is a character span ``[start, end)`` of the text (``word_spans``; a treebank
  sentence locates its words in its ``# text`` line);
- a token belongs to the first word its characters overlap; a token of whitespace only
  (byte-level ``Ġ``, SentencePiece ``▁``) belongs to the word that follows it; tokens the
  tokenizer adds ([CLS], [SEP], <s>, </s>, padding) belong to none (-1);
- a word all of whose characters lie in a token of an earlier word (``cannot`` read as one
  token for the treebank words ``can`` + ``not``; SentencePiece's ``▁mat.`` for ``mat`` +
  ``.``) has no token of its own: it is *unaligned*, and word-level analyses skip it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

Span = tuple[int, int]

_WORD_RE = re.compile(r"\w+(?:['’]\w+)*|[^\w\s]")


def word_spans(text: str) -> tuple[list[str], list[Span]]:
    """Words and punctuation marks of plain text with their spans (``"don't stop."``: 3)."""
    matches = list(_WORD_RE.finditer(text))
    return [m.group() for m in matches], [m.span() for m in matches]


def join_words(words: Sequence[str]) -> tuple[str, list[Span]]:
    """Pre-split words as one text, separated by single spaces, with each word's span."""
    spans, start = [], 0
    for word in words:
        spans.append((start, start + len(word)))
        start += len(word) + 1
    return " ".join(words), spans


def locate(text: str, pieces: Sequence[str]) -> list[Span] | None:
    """Spans of ``pieces`` found one after the other in ``text``, separated by whitespace
    only; None when a piece is not where the previous one left off."""
    spans, at = [], 0
    for piece in pieces:
        while at < len(text) and text[at].isspace():
            at += 1
        if not piece or not text.startswith(piece, at):
            return None
        spans.append((at, at + len(piece)))
        at += len(piece)
    return spans


def token_words(
    offsets: Sequence[Sequence[int]], added: Sequence[int], spans: Sequence[Span], length: int
) -> list[int]:
    """Each token's word index (-1: none) from its character ``offsets`` ``[token, 2]``.

    ``added[token]`` is 1 for tokens the tokenizer added (special tokens, padding);
    ``spans`` are the words' character spans in a text of ``length`` characters.
    """
    owner = [-1] * length  # the word each character belongs to (the first span's)
    owned = 0  # no character at or after this one has a word yet
    for w, (start, end) in enumerate(spans):
        stop = min(end, length)
        if 0 <= owned <= start < stop:  # after every earlier word: all at once
            owner[start:stop] = [w] * (stop - start)
            owned = stop
            continue
        for c in range(start, stop):
            if owner[c] < 0:
                owner[c] = w
        owned = -1 if start < 0 or owned < 0 else max(owned, stop)
    starts = [start for start, _ in spans]
    result = []
    for (start, end), is_added in zip(offsets, added, strict=True):
        if is_added:
            result.append(-1)
            continue
        stop = min(end, length)
        word = owner[start] if 0 <= start < stop else -1  # its first character's word
        if word < 0:
            word = next((owner[c] for c in range(start, stop) if owner[c] >= 0), -1)
        if word < 0:  # whitespace (or nothing): the mark of the word that follows
            word = next((w for w, s in enumerate(starts) if s >= start), -1)
        result.append(word)
    return result
