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

Long inputs come as blocks of query rows (``WordAttentionContext.rows``): a word's row is
complete once the block holding its last token has been seen (a word cut by a block boundary
carries its partial row into the next block), and its columns are summed with a scatter over
key positions instead of ``A.T`` (``[pos, word]`` would be quadratic in length). Each word's
row is the same sum as on the whole matrix, in another order: equal within float32 rounding.

On the CPU, whole patterns are pooled by a C kernel where it is built
(``WordAttentionContext.kernel_weights``, ``_words_kernel.c``, read by the syntactic and
rare-word heads): the same float32 operations in the same order as the two products above
(the rows' fused multiply-adds as MKL's float32 matmul does them), one pass per (sentence,
head): the same bits.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from attnlens.data.alignment import Span, join_words, word_spans
from attnlens.data.batch import Batch
from attnlens.data.text import length_sorted_chunks
from attnlens.data.tokenizer import Tokenizer, word_counts
from attnlens.errors import DataError
from attnlens.hooks import QueryBlock
from attnlens.stream.threads import run_split

try:  # the C kernel (setup.py builds it where a compiler is present)
    from attnlens.data import _words_kernel
except ImportError:  # pragma: no cover - the torch path then runs everywhere
    _words_kernel = None


def split_words(text: str) -> list[str]:
    """Split plain text into words and punctuation marks (``"don't stop."`` -> 3 words)."""
    return word_spans(text)[0]


def is_wordlike(word: str) -> bool:
    """True when ``word`` contains a letter or a digit (punctuation is not a word here)."""
    return any(ch.isalnum() for ch in word)


class WordAttention:
    """Word-level attention of one layer for a batch.

    ``weights [batch, head, query_word, key_word]``; ``to_special [batch, head, query_word]``
    is a word's total attention to special tokens (computed on first use from the word rows
    over key tokens ``rows [batch, head, query_word, key_pos]``: the syntactic and rare-word
    heads never read it); ``valid [batch, word]`` marks real words (False for padding words
    of shorter sentences).
    """

    def __init__(self, weights: torch.Tensor, valid: torch.Tensor, rows: torch.Tensor,
                 special_mask: torch.Tensor | None) -> None:
        self.weights, self.valid = weights, valid
        self._rows, self._special_mask = rows, special_mask
        self._to_special: torch.Tensor | None = None

    @property
    def to_special(self) -> torch.Tensor:
        if self._to_special is None:
            if self._special_mask is None:
                found = torch.zeros(self.weights.shape[:3], device=self.weights.device)
            else:  # [batch, 1, key_pos, 1]
                special = self._special_mask.to(self._rows.dtype)[:, None, :, None]
                found = (self._rows @ special)[..., 0]  # [batch, head, query_word]
            self._to_special = found
            self._rows = self._special_mask = None
        return self._to_special


@dataclass
class WordRows:
    """The word rows completed by one query block of a layer.

    ``weights [batch, head, n, key_word]`` are the rows of words ``first .. first + n - 1``
    (``n`` spans the words any sentence of the batch has in the block); ``done [batch, n]``
    marks the rows complete in this block (real words whose last token lies in it: each real
    word is done in exactly one block); ``valid [batch, key_word]`` marks real words. The
    whole matrix is one block: ``first = 0`` and ``done = valid``.
    """

    weights: torch.Tensor
    first: int
    done: torch.Tensor
    valid: torch.Tensor

    @property
    def n(self) -> int:
        return self.weights.shape[-2]


def assignment_matrix(word_ids: torch.Tensor, n_words: int) -> torch.Tensor:
    """``A [batch, word, pos]``: 1 where token ``pos`` belongs to word ``word``."""
    words = torch.arange(n_words, device=word_ids.device)  # [word]
    return (word_ids[:, None, :] == words[None, :, None]).to(torch.float32)


def word_pooling(word_ids: torch.Tensor, n_words: int, n_heads: int
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """What pools a batch's tokens into words, the same for each of its layers with
    ``n_heads`` heads: (``A [batch, word, pos]``, ``valid [batch, word]``, ``A_mean [batch,
    head, word, pos]``: ``A``'s rows divided by the word's tokens, repeated per head and
    contiguous, as ``A_mean[:, None] @ P`` would copy it at every call)."""
    assign = assignment_matrix(word_ids, n_words)  # [batch, word, pos]
    tokens_per_word = assign.sum(-1)  # [batch, word]
    valid = tokens_per_word > 0
    from_mean = assign / tokens_per_word.clamp_min(1)[..., None]  # [batch, word, pos]
    return assign, valid, from_mean[:, None].expand(-1, n_heads, -1, -1).contiguous()


def uses_kernel(pattern: torch.Tensor) -> bool:
    """Whether the C kernel pools this whole pattern (``WordAttentionContext.kernel_weights``):
    built and on the CPU (any dtype: the torch path too reads it as float32)."""
    return _words_kernel is not None and pattern.device.type == "cpu"


def word_attention(
    pattern: torch.Tensor,
    word_ids: torch.Tensor,
    special_mask: torch.Tensor | None = None,
    n_words: int | None = None,
    pooling: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
) -> WordAttention:
    """Aggregate a token pattern ``[batch, head, query_pos, key_pos]`` to words.

    ``word_ids [batch, pos]`` gives each token's word (-1: special, padding or a word cut by
    truncation). ``special_mask [batch, pos]`` marks the special tokens whose total weight is
    returned as ``to_special``. ``pooling``: ``word_pooling`` of the same batch, words and
    heads, when already made (``WordAttentionContext`` makes it once per batch).
    """
    if n_words is None:
        n_words = int(word_ids.max().item()) + 1 if word_ids.numel() else 0
    n_words = max(n_words, 0)
    if pooling is None:
        pooling = word_pooling(word_ids, n_words, pattern.shape[1])
    assign, valid, from_mean = pooling  # from_mean: [batch, head, word, pos]
    p = pattern.to(torch.float32)
    # rows: mean over a word's tokens; columns: sum over a word's tokens
    rows = from_mean @ p  # [batch, head, query_word, key_pos]
    # columns: one product per sentence of its heads' rows stacked ([head * word, key_pos]),
    # not assign broadcast over the heads (a copy of it per head)
    n_batch, n_heads, _, n_keys = rows.shape
    stacked = rows.reshape(n_batch, n_heads * n_words, n_keys)  # [batch, head * word, key_pos]
    weights = (stacked @ assign.transpose(1, 2)).view(n_batch, n_heads, n_words, n_words)
    # weights: [batch, head, query_word, key_word]; to_special from rows when asked for
    return WordAttention(weights, valid, rows, special_mask)


class WordAttentionContext:
    """Word-level attention of the batch and layer being analysed, shared explicitly.

    One object per run, passed to every analyzer that reads word-level attention (syntactic
    and rare-word heads), so each layer of each batch is aggregated once however many
    analyzers read it. It remembers one layer of one batch (weak references to the batch and
    the pattern tensor, so it never keeps either alive): asking for another batch, layer or
    pattern recomputes. Analyzers given none make their own (nothing shared, same numbers).
    ``rows`` does the same for query blocks of long inputs.
    """

    def __init__(self) -> None:
        self.clear()

    def clear(self) -> None:
        """Forget the remembered layer (analyzers call this at the end of each batch)."""
        self._key: tuple | None = None
        self._value: WordAttention | None = None
        self._pooling_key: tuple | None = None  # (batch, heads, words) of ``_pooling``
        self._pooling: tuple[torch.Tensor, ...] | None = None
        self._rows_key: tuple | None = None
        self._rows_value: WordRows | None = None
        self._layout: _WordLayout | None = None
        self._carry: dict[int, tuple[int, torch.Tensor]] = {}
        self._kernel_key: tuple | None = None  # (batch, pattern, layer) of ``_kernel_value``
        self._kernel_value: torch.Tensor | None = None

    def get(self, batch: Batch, layer: int, pattern: torch.Tensor) -> WordAttention:
        """``word_attention`` of ``pattern [batch, head, query_pos, key_pos]`` for ``batch``."""
        if self._key is not None:
            batch_ref, pattern_ref, known_layer = self._key
            if batch_ref() is batch and pattern_ref() is pattern and known_layer == layer:
                return self._value
        n_heads = pattern.shape[1]
        known = self._pooling_key  # once per batch and head count (weak: batch identity)
        if known is None or known[0]() is not batch or known[1] != n_heads:
            n_words = max(batch.extra["n_words"]) if batch.extra.get("n_words") else None
            if n_words is None:  # (a host read, once per batch)
                n_words = int(batch.word_ids.max().item()) + 1 if batch.word_ids.numel() else 0
            n_words = max(n_words, 0)
            self._pooling_key = (weakref.ref(batch), n_heads, n_words)
            self._pooling = word_pooling(batch.word_ids, n_words, n_heads)
        n_words = self._pooling_key[2]
        value = word_attention(pattern, batch.word_ids, batch.special_mask, n_words=n_words,
                               pooling=self._pooling)
        self._key = (weakref.ref(batch), weakref.ref(pattern), layer)
        self._value = value
        return value

    def prepare(self, batch: Batch) -> None:
        """Read where ``batch``'s words lie (one host transfer), before its layers come, so
        ``rows`` reads nothing from the device (analyzers call this in ``begin_batch``)."""
        if batch.word_ids is not None and (self._layout is None
                                           or self._layout.batch() is not batch):
            self._layout = _WordLayout(batch)

    def token_lists(self, batch: Batch) -> tuple[np.ndarray, np.ndarray]:
        """Each word's tokens in ``batch`` (``_WordLayout.token_lists``), made once per batch."""
        self.prepare(batch)
        return self._layout.token_lists()

    def kernel_weights(self, batch: Batch, layer: int, pattern: torch.Tensor) -> torch.Tensor:
        """``word_attention``'s weights ``[batch, head, query_word, key_word]`` of the whole
        CPU ``pattern [batch, head, query_pos, key_pos]`` by the C kernel (``uses_kernel``):
        the same float32 operations in the same order (``_words_kernel.c``), one pass over
        each (sentence, head), split between the intra-op threads. Remembered as ``get``."""
        if self._kernel_key is not None:
            batch_ref, pattern_ref, known_layer = self._kernel_key
            if batch_ref() is batch and pattern_ref() is pattern and known_layer == layer:
                return self._kernel_value
        starts, positions = self.token_lists(batch)
        p = pattern.detach().float().contiguous()  # [batch, head, n, n]
        n_batch, n_heads, n, _ = p.shape
        n_words = starts.shape[1] - 1
        weights = torch.empty(n_batch, n_heads, n_words, n_words)
        args = (p.numpy(), starts, positions, n_batch, n_heads, n, n_words)
        out = weights.numpy()
        run_split(lambda first, stop: _words_kernel.pool(*args, first, stop, out),
                  n_batch * n_heads)
        self._kernel_key = (weakref.ref(batch), weakref.ref(pattern), layer)
        self._kernel_value = weights
        return weights

    def rows(self, batch: Batch, layer: int, pattern: torch.Tensor,
             query: QueryBlock) -> WordRows:
        """The word rows completed by the query block ``pattern [batch, head, rows, key_pos]``
        (rows ``query.start:query.stop``). Blocks of a layer must come in order."""
        if self._rows_key is not None:
            batch_ref, pattern_ref, known_layer = self._rows_key
            if batch_ref() is batch and pattern_ref() is pattern and known_layer == layer:
                return self._rows_value
        if query.is_whole:
            wa = self.get(batch, layer, pattern)
            value = WordRows(wa.weights, 0, wa.valid, wa.valid)
        else:
            self.prepare(batch)
            if query.start == 0:
                self._carry = {}
            value = self._layout.rows(pattern, query, self._carry)
        self._rows_key = (weakref.ref(batch), weakref.ref(pattern), layer)
        self._rows_value = value
        return value


class _WordLayout:
    """Where each word's tokens lie in a batch (read on the host once per batch), to cut a
    query block's rows into words without reading the device."""

    def __init__(self, batch: Batch) -> None:
        self.batch = weakref.ref(batch)
        word_ids = batch.word_ids
        self.n_words = (max(batch.extra["n_words"]) if batch.extra.get("n_words")
                        else int(word_ids.max()) + 1 if word_ids.numel() else 0)
        ids = word_ids.cpu().numpy()  # one transfer per batch
        self.ids = ids
        n_batch, length = ids.shape
        self.last = np.full((n_batch, self.n_words), -1, dtype=np.int64)
        self.first = np.full((n_batch, self.n_words), length, dtype=np.int64)
        for b in range(n_batch):
            pos = np.nonzero(ids[b] >= 0)[0]
            words = ids[b, pos]
            self.last[b, words] = pos  # ascending positions: the last one stays
            self.first[b, words[::-1]] = pos[::-1]
        device = word_ids.device
        self.word_ids = word_ids
        self.last_dev = torch.from_numpy(self.last).to(device)  # [batch, word]
        counts = np.stack([np.bincount(row[row >= 0], minlength=self.n_words)[: self.n_words]
                           for row in ids]) if n_batch else np.zeros((0, self.n_words))
        self.tokens = torch.from_numpy(counts).to(device, torch.float32)  # [batch, word]
        self.valid = self.tokens > 0  # [batch, word]
        # key tokens -> word slot (n_words: special, padding, cut words), for the scatter
        self.key_slot = torch.where(word_ids >= 0, word_ids, self.n_words)  # [batch, pos]
        self._token_lists: tuple[np.ndarray, np.ndarray] | None = None

    def token_lists(self) -> tuple[np.ndarray, np.ndarray]:
        """Each word's tokens, for the C kernels: ``starts [batch, n_words + 1]`` and
        ``positions [batch, pos]`` (int32), word ``w``'s tokens being ``positions[b,
        starts[b, w]:starts[b, w + 1]]`` in ascending order (the rest of a row is 0)."""
        if self._token_lists is None:
            n_batch, length = self.ids.shape
            starts = np.zeros((n_batch, self.n_words + 1), dtype=np.int32)
            positions = np.zeros((n_batch, length), dtype=np.int32)
            for b in range(n_batch):
                pos = np.nonzero((self.ids[b] >= 0) & (self.ids[b] < self.n_words))[0]
                words = self.ids[b, pos]
                order = np.argsort(words, kind="stable")  # by word, then position
                positions[b, : len(pos)] = pos[order]
                starts[b, 1:] = np.cumsum(np.bincount(words, minlength=self.n_words))
            self._token_lists = (starts, positions)
        return self._token_lists

    def rows(self, pattern: torch.Tensor, query: QueryBlock,
             carry: dict[int, tuple[int, torch.Tensor]]) -> WordRows:
        start, stop = query.start, query.stop
        block_ids = self.ids[:, start:stop]
        present = block_ids[block_ids >= 0]
        n_batch, n_heads, n_keys = pattern.shape[0], pattern.shape[1], pattern.shape[-1]
        if not present.size:
            empty = pattern.new_zeros(n_batch, n_heads, 0, self.n_words)
            return WordRows(empty, 0, self.valid[:, :0], self.valid)
        first, last = int(present.min()), int(present.max())
        n = last - first + 1
        ids = self.word_ids[:, start:stop]  # [batch, rows]
        words = torch.arange(first, last + 1, device=ids.device)
        to_word = (ids[:, None, :] == words[None, :, None]).to(torch.float32)  # [b, n, rows]
        to_word = to_word / self.tokens[:, first:last + 1].clamp_min(1)[..., None]
        token_rows = to_word[:, None] @ pattern.to(torch.float32)  # [batch, head, n, key_pos]
        for b, (word, partial) in carry.items():  # rows begun in the previous block
            if first <= word <= last:
                token_rows[b, :, word - first] += partial
        carry.clear()
        for b in range(n_batch):  # a word whose tokens go on past the block
            row = block_ids[b]
            word = int(row[-1]) if row.size else -1
            if word >= 0 and self.last[b, word] >= stop:
                carry[b] = (word, token_rows[b, :, word - first].clone())
        slots = self.key_slot[:, None, None, :].expand(n_batch, n_heads, n, n_keys)
        weights = token_rows.new_zeros(n_batch, n_heads, n, self.n_words + 1)
        weights.scatter_add_(-1, slots, token_rows)  # key tokens summed into their words
        last_pos = self.last_dev[:, first:last + 1]  # [batch, n]
        done = (last_pos >= start) & (last_pos < stop)
        return WordRows(weights[..., : self.n_words], first, done, self.valid)


def word_batches(
    tokenizer: Tokenizer,
    sentences: Sequence[Sequence[str]],
    batch_size: int = 16,
    max_length: int = 128,
    annotations: dict[str, Sequence[Any]] | None = None,
    surfaces: Sequence[tuple[str, Sequence[Span]]] | None = None,
    batch_tokens: int | None = None,
) -> list[Batch]:
    """Length-sorted batches of sentences of words with ``word_ids`` and ``words``.

    ``batch_tokens``: a token budget per batch (``length_sorted_chunks``), counted as each
    sentence's tokens (its words' tokens and the tokenizer's special tokens, at most
    ``max_length``) times the batch's longest; at most ``batch_size`` sentences a batch.

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
    full_tokens, full_ids = tokenizer.text_tokens(texts, spans)  # untruncated: ids, words
    counts = [word_counts(ids, len(sp)) for ids, sp in zip(full_ids, spans, strict=True)]
    added = sum(len(side) for side in tokenizer.special_layout) if batch_tokens else 0
    lengths = [min(sum(c) + added, max_length) if batch_tokens else sum(c) for c in counts]
    batches = []
    for chunk in length_sorted_chunks(lengths, batch_size, batch_tokens):
        chunk_sentences = [sentences[i] for i in chunk]
        enc = tokenizer.encode_text_words(
            [texts[i] for i in chunk], [spans[i] for i in chunk], max_length=max_length,
            full_counts=[counts[i] for i in chunk], full_word_ids=[full_ids[i] for i in chunk],
            full_input_ids=[full_tokens[i] for i in chunk],
        )
        extra: dict[str, Any] = {"index": chunk, "n_words": enc.n_words,
                                 "unaligned": enc.unaligned, "corpus_size": len(sentences)}
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
    tokenizer: Tokenizer, texts: Sequence[str], batch_size: int = 16, max_length: int = 128,
    batch_tokens: int | None = None,
) -> list[Batch]:
    """Plain-text lines split into words (``split_words``), batched like a treebank; the
    model reads each line as it is."""
    kept = [(t, word_spans(t)) for t in texts]
    kept = [(t, words, spans) for t, (words, spans) in kept if words]
    if not kept:
        raise DataError("the text has no words; write one sentence per line.")
    return word_batches(tokenizer, [words for _, words, _ in kept], batch_size=batch_size,
                        max_length=max_length, surfaces=[(t, spans) for t, _, spans in kept],
                        batch_tokens=batch_tokens)


def treebank_batches(
    tokenizer: Tokenizer, sentences: Sequence, batch_size: int = 16, max_length: int = 128,
    batch_tokens: int | None = None,
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
        batch_tokens=batch_tokens,
    )
