"""A thin wrapper around a Hugging Face fast tokenizer: batching, special tokens, words.

Word <-> token alignment for word-level analyses: ``encode_words`` tokenises pre-split
sentences and records, for every token, the index of the word it belongs to (-1 for special
tokens, padding and the tokens of words cut by truncation). A word split into several tokens
has all of them; a word whose tokens were cut by ``max_length`` is dropped entirely and
counted in ``n_cut_words``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

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
    ``n_cut_words[b]`` the words lost to it, wholly or partly.
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    word_ids: torch.Tensor
    n_words: list[int]
    token_type_ids: torch.Tensor | None = None
    n_cut_words: list[int] = field(default_factory=list)

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

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike) -> Tokenizer:
        """The tokenizer saved in a checkpoint folder (never remote code)."""
        folder = Path(path)
        if folder.is_dir() and not any((folder / name).is_file() for name in TOKENIZER_FILES):
            raise ModelLoadError(
                f"{folder} has no tokenizer files ({', '.join(TOKENIZER_FILES[:4])}, ...); "
                "copy the tokenizer into it, or use attnlens.load_model() for the model alone."
            )
        from transformers import AutoTokenizer

        try:
            hf = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        except Exception as exc:  # transformers raises many types here
            raise ModelLoadError(f"cannot load the tokenizer from {path}: {exc}") from exc
        return cls(hf)

    @property
    def special_ids(self) -> set[int]:
        return set(self.hf.all_special_ids)

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

    @property
    def special_layout(self) -> tuple[list[str], list[str]]:
        """The special tokens added before and after one text.

        BERT: (["[CLS]"], ["[SEP]"]); RoBERTa: (["<s>"], ["</s>"]); Llama: (["<s>"], []);
        GPT-2: ([], []). Found by encoding a probe with and without special tokens.
        """
        with_special = self.hf("probe")["input_ids"]
        plain = self.hf("probe", add_special_tokens=False)["input_ids"]
        for start in range(len(with_special) - len(plain) + 1):
            if with_special[start : start + len(plain)] == plain:
                before = with_special[:start]
                after = with_special[start + len(plain) :]
                return self.decode_tokens(before), self.decode_tokens(after)
        raise DataError("cannot locate the text among the special tokens of this tokenizer.")

    @property
    def pad_token_id(self) -> int:
        return self.hf.pad_token_id

    def special_mask(self, input_ids: torch.Tensor) -> torch.Tensor:
        """``[batch, pos]`` True where a token is one of the tokenizer's special tokens."""
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

    def _word_kwargs(self) -> dict:
        # Byte-level BPE (GPT-2, RoBERTa) needs a prefix space for pre-split words.
        if getattr(self.hf, "add_prefix_space", None) is False:
            return {"add_prefix_space": True}
        return {}

    def tokens_per_word(self, sentences: Sequence[Sequence[str]]) -> list[list[int]]:
        """How many tokens each word of each sentence has, without truncation."""
        enc = self.hf(
            [list(s) for s in sentences],
            is_split_into_words=True,
            add_special_tokens=False,
            **self._word_kwargs(),
        )
        counts = []
        for b, sentence in enumerate(sentences):
            row = [0] * len(sentence)
            for w in enc.word_ids(b):
                if w is not None:
                    row[w] += 1
            counts.append(row)
        return counts

    def encode_words(
        self,
        sentences: Sequence[Sequence[str]],
        max_length: int = 128,
        full_counts: Sequence[Sequence[int]] | None = None,
    ) -> WordBatch:
        """Tokenise pre-split sentences, keeping each token's word index (-1: special/pad).

        Words whose tokens ``max_length`` cut (wholly or partly) are dropped: their tokens
        get -1 and they are counted in ``n_cut_words``. ``full_counts`` (from
        ``tokens_per_word``) saves re-tokenising when the caller already has it.
        """
        if not self.hf.is_fast:
            raise DataError("word alignment needs a fast (Rust) tokenizer; this one is slow.")
        sentences = [list(s) for s in sentences]
        enc = self.hf(
            sentences,
            is_split_into_words=True,
            padding=True,
            truncation=True,
            max_length=max_length,
            return_tensors="pt",
            **self._word_kwargs(),
        )
        if full_counts is None:
            full_counts = self.tokens_per_word(sentences)
        word_ids = torch.full_like(enc["input_ids"], -1)
        n_words, n_cut = [], []
        for b, counts in enumerate(full_counts):
            ids = [-1 if w is None else w for w in enc.word_ids(b)]
            kept = torch.tensor(ids, dtype=torch.long)  # [pos]
            got = torch.bincount(kept[kept >= 0], minlength=len(counts))[: len(counts)]
            complete = got == torch.tensor(counts, dtype=got.dtype)  # [word]
            # Truncation cuts from the end, so complete words are a prefix of the sentence.
            n = int(complete.long().cumprod(0).sum())
            kept[kept >= n] = -1
            word_ids[b, : len(ids)] = kept
            n_words.append(n)
            n_cut.append(len(counts) - n)
        return WordBatch(
            input_ids=enc["input_ids"],
            attention_mask=enc["attention_mask"],
            word_ids=word_ids,
            n_words=n_words,
            token_type_ids=enc.get("token_type_ids"),
            n_cut_words=n_cut,
        )

    def decode_tokens(self, input_ids: Sequence[int]) -> list[str]:
        return self.hf.convert_ids_to_tokens(list(input_ids))
