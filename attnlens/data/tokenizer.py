"""A thin wrapper around a Hugging Face fast tokenizer: batching, special tokens, words.

Word <-> token alignment for word-level analyses: ``encode_text_words`` tokenises raw texts
exactly as the tokenizer does (the model sees the text, never words tokenised one by one)
and records, for every token, the index of the word it belongs to from the tokens'
character offsets (-1 for special tokens, padding and the tokens of words cut by
truncation; see ``attnlens.data.alignment``). A word split into several tokens has all of
them; a word whose tokens were cut by ``max_length`` is dropped entirely and counted in
``n_cut_words``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import torch

from attnlens.data.alignment import Span, join_words, token_words
from attnlens.errors import DataError, ModelLoadError

# Files that hold a tokenizer; a checkpoint folder without any of them has none.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "vocab.json",
                   "tokenizer.model", "spiece.model", "sentencepiece.bpe.model")


@dataclass
class WordBatch:
    """Tokenised pre-split sentences with each token's word index.

    ``word_ids [batch, pos]`` holds the index of the word a token belongs to, or -1 for
    special tokens, padding and the tokens of words cut by truncation. ``n_words[b]`` counts
    the words that survived truncation complete (always a prefix of the sentence);
    ``n_cut_words[b]`` the words lost to it, wholly or partly; ``unaligned[b]`` the kept
    words without a token of their own (their characters lie in an earlier word's token).
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    word_ids: torch.Tensor
    n_words: list[int]
    token_type_ids: torch.Tensor | None = None
    n_cut_words: list[int] = field(default_factory=list)
    unaligned: list[list[int]] = field(default_factory=list)

    def model_inputs(self) -> dict[str, torch.Tensor]:
        inputs = {"input_ids": self.input_ids, "attention_mask": self.attention_mask}
        if self.token_type_ids is not None:
            inputs["token_type_ids"] = self.token_type_ids
        return inputs

    def word_tokens(self, b: int) -> list[list[int]]:
        """Token positions of each kept word of sentence ``b`` (several for split words)."""
        ids = self.word_ids[b].tolist()
        spans: list[list[int]] = [[] for _ in range(self.n_words[b])]
        for pos, word in enumerate(ids):
            if 0 <= word < self.n_words[b]:
                spans[word].append(pos)
        return spans

    def split_words(self, b: int) -> list[int]:
        """Indices of the kept words of sentence ``b`` that have more than one token."""
        return [w for w, span in enumerate(self.word_tokens(b)) if len(span) > 1]


class Tokenizer:
    """Batches text for a HookedTransformer and knows the tokenizer's special tokens."""

    def __init__(self, hf_tokenizer) -> None:
        self.hf = hf_tokenizer
        if self.hf.pad_token is None:
            # GPT-2 and Llama have no pad token; pad with EOS (masked out anyway).
            fallback = self.hf.eos_token or self.hf.unk_token or self.hf.bos_token
            if fallback is None:
                fallback = self.hf.convert_ids_to_tokens(0)
            self.hf.pad_token = fallback
        self.hf.padding_side = "right"
        # transformers warns that a text longer than model_max_length "will result in
        # indexing errors"; attnlens truncates every input to --max-length itself.
        self.hf.deprecation_warnings["sequence-length-is-longer-than-the-specified-maximum"] = True
        self.hf.truncation_side = "right"  # word alignment counts on cuts at the end

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike) -> Tokenizer:
        """The tokenizer saved in a checkpoint folder (never remote code)."""
        folder = Path(path)
        if folder.is_dir() and not any((folder / name).is_file() for name in TOKENIZER_FILES):
            raise ModelLoadError(
                f"{folder} has no tokenizer files ({', '.join(TOKENIZER_FILES[:4])}, ...); "
                "copy the tokenizer into it, or use attnlens.load_model() for the model alone."
            )
        from attnlens.data.bert_tokenizer import load_bert_tokenizer

        lite = load_bert_tokenizer(folder) if folder.is_dir() else None
        if lite is not None:  # transformers' own BertTokenizer, without importing transformers
            return cls(lite)
        from transformers import AutoTokenizer

        try:
            hf = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        except Exception as exc:  # transformers raises many types here
            raise ModelLoadError(f"cannot load the tokenizer from {path}: {exc}") from exc
        return cls(hf)

    @property
    def special_ids(self) -> set[int]:
        """Ids of the special tokens: those a tokenizer adds around a text or as padding.

        [CLS], [SEP], <s>, </s>, BOS, EOS, padding, [MASK] and the other declared special
        tokens. [UNK] is not one (unless it doubles as one of those, as GPT-2's
        <|endoftext|> does): it stands for a piece of the text the vocabulary lacks, so it is
        a real token of its word. One definition for every command (``special_mask``).
        """
        hf = self.hf
        ids = set(hf.all_special_ids)
        roles = {getattr(hf, f"{role}_token_id", None)
                 for role in ("cls", "sep", "bos", "eos", "pad", "mask")}
        if hf.unk_token_id is not None and hf.unk_token_id not in roles:
            ids.discard(hf.unk_token_id)
        return ids

    @property
    def special_tokens(self) -> dict[str, str | None]:
        """The roles of the special tokens: cls/bos first, sep/eos last, pad."""
        return {
            "cls": self.hf.cls_token,
            "sep": self.hf.sep_token,
            "bos": self.hf.bos_token,
            "eos": self.hf.eos_token,
            "pad": self.hf.pad_token,
        }

    @cached_property
    def special_layout(self) -> tuple[list[str], list[str]]:
        """The special tokens added before and after one text.

        BERT: (["[CLS]"], ["[SEP]"]); RoBERTa: (["<s>"], ["</s>"]); Llama: (["<s>"], []);
        GPT-2: ([], []). Found once per tokenizer, by encoding a probe with and without
        special tokens (``encode_text_words`` reads it for every chunk of a corpus).
        """
        with_special = self.hf("probe")["input_ids"]
        plain = self.hf("probe", add_special_tokens=False)["input_ids"]
        for start in range(len(with_special) - len(plain) + 1):
            if with_special[start : start + len(plain)] == plain:
                before = with_special[:start]
                after = with_special[start + len(plain) :]
                return self.decode_tokens(before), self.decode_tokens(after)
        raise DataError("cannot locate the text among the special tokens of this tokenizer.")

    @cached_property
    def single_template(self) -> SingleTemplate | None:
        """How this tokenizer wraps and pads one text's tokens (``SingleTemplate``), found
        by encoding probes; None when the probes do not show it (then texts are encoded)."""
        texts = ["probe", "probe probe probe"]
        plain = self.hf(texts, add_special_tokens=False)["input_ids"]
        enc = self(texts, max_length=64)
        types = enc.get("token_type_ids")
        ids, mask = enc["input_ids"].tolist(), enc["attention_mask"].tolist()
        short, long_ = plain
        n_added = int(sum(mask[1])) - len(long_)
        start = next((i for i in range(n_added + 1) if ids[1][i:i + len(long_)] == long_), None)
        if start is None or len(short) >= len(long_):
            return None
        text_types = None if types is None else types[1].tolist()
        template = SingleTemplate(
            before=ids[1][:start], after=ids[1][start + len(long_):len(long_) + n_added],
            pad_id=ids[0][-1],
            before_types=None if types is None else text_types[:start],
            after_types=None if types is None else text_types[start + len(long_):
                                                              len(long_) + n_added],
            text_type=None if types is None else text_types[start], pad_type=(
                None if types is None else types[0].tolist()[-1]))
        cut = n_added + len(long_) - 1  # the longer probe truncated by one token
        if cut <= n_added:
            return None
        for max_length, expected in ((64, enc), (cut, self(texts, max_length=cut))):
            again = template.encode(plain, max_length)  # as the tokenizer encoded them?
            if set(again) != set(expected) or not all(
                    again[k].dtype == expected[k].dtype and again[k].equal(expected[k])
                    for k in expected):
                return None
        return template

    @property
    def pad_token_id(self) -> int:
        return self.hf.pad_token_id

    def special_mask(self, input_ids: torch.Tensor) -> torch.Tensor:
        """``[batch, pos]`` True where a token is one of ``special_ids`` ([UNK] is not)."""
        special = torch.tensor(sorted(self.special_ids), dtype=input_ids.dtype)
        return torch.isin(input_ids, special.to(input_ids.device))

    def __call__(
        self,
        texts: Sequence[str],
        max_length: int = 128,
        pairs: Sequence[str] | None = None,
    ) -> dict[str, torch.Tensor]:
        """Tokenise, truncate to ``max_length`` and pad: model keyword arguments."""
        if isinstance(texts, str):
            texts = [texts]
        enc = self.hf(
            list(texts),
            list(pairs) if pairs is not None else None,
            padding=True,
            truncation=True,
            max_length=max_length,
            return_tensors="pt",
        )
        keep = ("input_ids", "attention_mask", "token_type_ids")
        return {k: v for k, v in enc.items() if k in keep}

    def _encode_offsets(self, texts: Sequence[str], **kwargs):
        """The tokenizer's own encoding of ``texts`` with character offsets."""
        if not self.hf.is_fast:
            raise DataError("word alignment needs a fast (Rust) tokenizer; this one is slow.")
        return self.hf(list(texts), return_offsets_mapping=True,
                       return_special_tokens_mask=True, **kwargs)

    def text_word_ids(self, texts: Sequence[str], spans: Sequence[Sequence[Span]]
                      ) -> list[list[int]]:
        """Each token's word (-1: none) in each text's untruncated encoding, no special
        tokens (see ``attnlens.data.alignment``)."""
        return self.text_tokens(texts, spans)[1]

    def text_tokens(self, texts: Sequence[str], spans: Sequence[Sequence[Span]]
                    ) -> tuple[list[list[int]], list[list[int]]]:
        """Each text's untruncated token ids without special tokens, and each token's word
        (``text_word_ids``)."""
        enc = self._encode_offsets(texts, add_special_tokens=False)
        not_text = self._not_text(enc)
        return enc["input_ids"], [
            token_words(enc["offset_mapping"][b], not_text[b], spans[b], len(text))
            for b, text in enumerate(texts)]

    def _not_text(self, enc) -> list[list[bool]]:
        """Per row and token of an encoding: added by the tokenizer, or a special token (a
        special token's text typed in a sentence is read as that token: it is no word's)."""
        ids, added = enc["input_ids"], enc["special_tokens_mask"]
        ids = ids.tolist() if hasattr(ids, "tolist") else ids
        added = added.tolist() if hasattr(added, "tolist") else added
        special = self.special_ids
        return [[bool(a) or i in special for i, a in zip(row_ids, row_added, strict=True)]
                for row_ids, row_added in zip(ids, added, strict=True)]

    def tokens_per_word(self, sentences: Sequence[Sequence[str]]) -> list[list[int]]:
        """How many tokens each word of each sentence has (words joined by single spaces,
        no truncation; a word without a token of its own has 0)."""
        joined = [join_words(s) for s in sentences]
        return self.tokens_per_text_word([t for t, _ in joined], [sp for _, sp in joined])

    def tokens_per_text_word(self, texts: Sequence[str], spans: Sequence[Sequence[Span]]
                             ) -> list[list[int]]:
        """How many tokens of each raw text belong to each of its words, without truncation."""
        return [word_counts(ids, len(words))
                for ids, words in zip(self.text_word_ids(texts, spans), spans, strict=True)]

    def encode_words(
        self,
        sentences: Sequence[Sequence[str]],
        max_length: int = 128,
        full_counts: Sequence[Sequence[int]] | None = None,
    ) -> WordBatch:
        """Pre-split sentences joined by single spaces, then ``encode_text_words``."""
        joined = [join_words(s) for s in sentences]
        return self.encode_text_words([t for t, _ in joined], [sp for _, sp in joined],
                                      max_length, full_counts)

    def encode_text_words(
        self,
        texts: Sequence[str],
        spans: Sequence[Sequence[Span]],
        max_length: int = 128,
        full_counts: Sequence[Sequence[int]] | None = None,
        full_word_ids: Sequence[Sequence[int]] | None = None,
        full_input_ids: Sequence[Sequence[int]] | None = None,
    ) -> WordBatch:
        """Tokenise raw ``texts`` as the tokenizer does; give each token its word by offsets.

        ``spans[b]`` are the character spans of text ``b``'s words. Words whose tokens
        ``max_length`` cut (wholly or partly) are dropped: their tokens get -1 and they are
        counted in ``n_cut_words``. ``full_counts`` (from ``tokens_per_text_word``) saves
        re-tokenising when the caller already has it. ``full_word_ids`` (``text_word_ids``
        of the same texts) saves aligning the offsets again: truncation cuts the text's
        tokens from the end, so each row's text tokens are a prefix of its untruncated ones.
        With ``full_input_ids`` too (``text_tokens``), the rows are built from those prefixes
        and the tokenizer's ``single_template`` without encoding the texts again.
        """
        texts = list(texts)
        if full_word_ids is None:
            return self._encode_by_offsets(texts, spans, max_length, full_counts)
        template = self.single_template if full_input_ids is not None else None
        if template is not None and max_length > len(template.before) + len(template.after):
            enc = template.encode(full_input_ids, max_length)
        else:
            enc = self(texts, max_length=max_length)
        if full_counts is None:
            full_counts = [word_counts(ids, len(sp))
                           for ids, sp in zip(full_word_ids, spans, strict=True)]
        before, after = (len(side) for side in self.special_layout)
        kept = (enc["attention_mask"].sum(dim=1) - before - after).tolist()  # text tokens
        rows = [[-1] * before + list(ids[:k]) for ids, k in zip(full_word_ids, kept, strict=True)]
        return _word_batch(enc, rows, full_counts)

    def _encode_by_offsets(self, texts: list[str], spans: Sequence[Sequence[Span]],
                           max_length: int, full_counts: Sequence[Sequence[int]] | None
                           ) -> WordBatch:
        """``encode_text_words`` aligning the truncated encoding's own offsets."""
        enc = self._encode_offsets(texts, padding=True, truncation=True,
                                   max_length=max_length, return_tensors="pt")
        if full_counts is None:
            full_counts = self.tokens_per_text_word(texts, spans)
        offsets, not_text = enc["offset_mapping"].tolist(), self._not_text(enc)
        rows = [token_words(offsets[b], not_text[b], spans[b], len(text))
                for b, text in enumerate(texts)]
        return _word_batch(enc, rows, full_counts)

    def decode_tokens(self, input_ids: Sequence[int]) -> list[str]:
        return self.hf.convert_ids_to_tokens(list(input_ids))


@dataclass
class SingleTemplate:
    """The special tokens a tokenizer adds around one text (``before``, ``after``, with
    their token types), the text's token type and the padding (right), as its encodings
    show them: ``encode`` makes a padded, truncated batch from the texts' own tokens."""

    before: list[int]
    after: list[int]
    pad_id: int
    before_types: list[int] | None
    after_types: list[int] | None
    text_type: int | None
    pad_type: int | None

    def encode(self, tokens: Sequence[Sequence[int]], max_length: int
               ) -> dict[str, torch.Tensor]:
        """``Tokenizer.__call__``'s tensors for texts of the untruncated tokens ``tokens``
        (no special tokens): each cut to ``max_length`` with its special tokens (from the
        end, as the tokenizer truncates), wrapped, padded to the longest."""
        room = max_length - len(self.before) - len(self.after)
        kept = [min(len(row), room) for row in tokens]
        width = max(kept, default=0) + len(self.before) + len(self.after)
        ids, mask, types = [], [], []
        for row, k in zip(tokens, kept, strict=True):
            pad = width - k - len(self.before) - len(self.after)
            ids.append(self.before + list(row[:k]) + self.after + [self.pad_id] * pad)
            mask.append([1] * (width - pad) + [0] * pad)
            if self.text_type is not None:
                types.append(self.before_types + [self.text_type] * k + self.after_types
                             + [self.pad_type] * pad)
        enc = {"input_ids": torch.tensor(ids), "attention_mask": torch.tensor(mask)}
        if self.text_type is not None:
            enc["token_type_ids"] = torch.tensor(types)
        return enc


def word_counts(ids: Sequence[int], n_words: int) -> list[int]:
    """How many of the tokens ``ids`` (each token's word, -1: none) each word has."""
    row = [0] * n_words
    for w in ids:
        if w >= 0:
            row[w] += 1
    return row


def _word_batch(enc, rows: list[list[int]], full_counts: Sequence[Sequence[int]]
                ) -> WordBatch:
    """A ``WordBatch`` of a padded encoding ``enc`` whose row ``b``'s tokens have the words
    ``rows[b]`` (-1: none; untruncated word counts ``full_counts[b]``): words cut by the
    truncation dropped."""
    word_rows, n_words, n_cut, unaligned = [], [], [], []
    for ids, counts in zip(rows, full_counts, strict=True):
        got = [0] * len(counts)  # tokens each word kept
        for w in ids:
            if 0 <= w < len(counts):
                got[w] += 1
        # Truncation cuts from the end, so complete words are a prefix of the sentence.
        n = next((w for w, (g, c) in enumerate(zip(got, counts, strict=True)) if g != c),
                 len(counts))
        word_rows.append([w if w < n else -1 for w in ids])
        n_words.append(n)
        n_cut.append(len(counts) - n)
        unaligned.append([w for w in range(n) if counts[w] == 0])
    return WordBatch(
        input_ids=enc["input_ids"],
        attention_mask=enc["attention_mask"],
        word_ids=_word_id_rows(word_rows, enc["input_ids"]),
        n_words=n_words,
        token_type_ids=enc.get("token_type_ids"),
        n_cut_words=n_cut,
        unaligned=unaligned,
    )


def _word_id_rows(rows: list[list[int]], input_ids: torch.Tensor) -> torch.Tensor:
    """``[batch, pos]`` word ids: ``rows[b]`` from position 0 of row ``b``, -1 after it."""
    word_ids = torch.full_like(input_ids, -1)
    width = max(map(len, rows), default=0)
    if width:
        padded = [row + [-1] * (width - len(row)) for row in rows]
        word_ids[:, :width] = torch.tensor(padded, dtype=word_ids.dtype)
    return word_ids
