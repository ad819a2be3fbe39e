"""Tiny tokenizers, models and data shared by the pruning, importance and metric tests."""

from __future__ import annotations

import csv
from pathlib import Path

import torch

from attnlens.data.tokenizer import Tokenizer

WORDS = [
    "the", "a", "cat", "dog", "sat", "ran", "on", "under", "mat", "rug", "big", "small",
    "red", "blue", "fast", "slow", "bird", "fish", "tree", "house", "saw", "ate", "quickly",
    "near",
]
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def word_tokenizer(causal: bool = False) -> Tokenizer:
    """A whitespace word-level fast tokenizer over ``WORDS`` (ids 0-4 are special)."""
    from tokenizers import Tokenizer as RustTokenizer
    from tokenizers import models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(SPECIALS + list(WORDS))}
    rust = RustTokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    rust.pre_tokenizer = pre_tokenizers.Whitespace()
    if not causal:
        rust.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)]
        )
    hf = PreTrainedTokenizerFast(
        tokenizer_object=rust, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
        sep_token="[SEP]", mask_token="[MASK]",
    )
    return Tokenizer(hf)


def sentences(n: int, seed: int = 0, min_len: int = 3, max_len: int = 9) -> list[str]:
    gen = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        length = int(torch.randint(min_len, max_len + 1, (1,), generator=gen))
        ids = torch.randint(0, len(WORDS), (length,), generator=gen).tolist()
        out.append(" ".join(WORDS[i] for i in ids))
    return out


def write_pairs(path: Path, n: int, seed: int = 0) -> Path:
    """A ``sentence1,sentence2,score`` CSV of random sentences with random 0-5 scores."""
    gen = torch.Generator().manual_seed(seed + 100)
    first, second = sentences(n, seed), sentences(n, seed + 1)
    scores = (torch.rand(n, generator=gen) * 5).tolist()
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        for a, b, s in zip(first, second, scores, strict=True):
            writer.writerow([a, b, f"{s:.2f}"])
    return path


def vocab_size() -> int:
    return len(SPECIALS) + len(WORDS)
