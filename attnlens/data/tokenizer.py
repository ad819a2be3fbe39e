"""A thin wrapper around a Hugging Face fast tokenizer: batching, special tokens, words."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from attnlens.errors import DataError, ModelLoadError


@dataclass
class WordBatch:
    """Tokenised pre-split sentences with each token's word index.

    ``word_ids [batch, pos]`` holds the index of the word a token belongs to, or -1 for
    special tokens and padding. ``n_words[b]`` counts the words that survived truncation.
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    word_ids: torch.Tensor
    n_words: list[int]
    token_type_ids: torch.Tensor | None = None

    def model_inputs(self) -> dict[str, torch.Tensor]:
        inputs = {"input_ids": self.input_ids, "attention_mask": self.attention_mask}
        if self.token_type_ids is not None:
            inputs["token_type_ids"] = self.token_type_ids
        return inputs


class Tokenizer:
    """Batches text for a HookedTransformer and knows the tokenizer's special tokens."""

    def __init__(self, hf_tokenizer) -> None:
        self.hf = hf_tokenizer
        if self.hf.pad_token is None:
            # GPT-2 and Llama have no pad token; pad with EOS (masked out anyway).
            self.hf.pad_token = self.hf.eos_token or self.hf.unk_token
        self.hf.padding_side = "right"

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike) -> Tokenizer:
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
    def pad_token_id(self) -> int:
        return self.hf.pad_token_id

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
        return {k: v for k, v in enc.items() if k in ("input_ids", "attention_mask", "token_type_ids")}

    def encode_words(self, sentences: Sequence[Sequence[str]], max_length: int = 128) -> WordBatch:
        """Tokenise pre-split sentences, keeping each token's word index (-1: special/pad)."""
        if not self.hf.is_fast:
            raise DataError("word alignment needs a fast (Rust) tokenizer; this one is slow.")
        kwargs = {}
        if getattr(self.hf, "add_prefix_space", None) is False:
            kwargs["add_prefix_space"] = True
        enc = self.hf(
            [list(s) for s in sentences],
            is_split_into_words=True,
            padding=True,
            truncation=True,
            max_length=max_length,
            return_tensors="pt",
            **kwargs,
        )
        word_ids = torch.full_like(enc["input_ids"], -1)
        n_words = []
        for b in range(len(sentences)):
            ids = [-1 if w is None else w for w in enc.word_ids(b)]
            word_ids[b, : len(ids)] = torch.tensor(ids)
            # A word cut by truncation is dropped entirely: keep only complete words.
            kept = max(ids) + 1 if max(ids) >= 0 else 0
            n_words.append(kept)
        return WordBatch(
            input_ids=enc["input_ids"],
            attention_mask=enc["attention_mask"],
            word_ids=word_ids,
            n_words=n_words,
            token_type_ids=enc.get("token_type_ids"),
        )

    def decode_tokens(self, input_ids: Sequence[int]) -> list[str]:
        return self.hf.convert_ids_to_tokens(list(input_ids))
