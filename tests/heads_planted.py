"""Hand-built treebanks and attention with a planted syntactic head of known accuracy."""

from __future__ import annotations

import torch

from attnlens.data.batch import Batch
from attnlens.data.conllu import ROOT, DepSentence

CLS, SEP, PAD = 101, 102, 0
N_WORDS = 11  # word 0 is the root, words 1..10 its dependents


def make_batch(sentences: list[DepSentence], start: int = 0) -> Batch:
    """One token per word: [CLS] w0 .. wn-1 [SEP] [PAD]..; corpus indices from ``start``."""
    length = max(len(s) for s in sentences) + 2
    ids = torch.full((len(sentences), length), PAD)
    word_ids = torch.full((len(sentences), length), -1)
    mask = torch.zeros(len(sentences), length, dtype=torch.long)
    for b, s in enumerate(sentences):
        n = len(s)
        ids[b, : n + 2] = torch.tensor([CLS, *range(1000, 1000 + n), SEP])
        word_ids[b, 1 : n + 1] = torch.arange(n)
        mask[b, : n + 2] = 1
    return Batch(
        input_ids=ids, attention_mask=mask, word_ids=word_ids,
        words=[list(s.words) for s in sentences], special_mask=(ids == CLS) | (ids == SEP),
        extra={"heads": [s.heads for s in sentences], "relations": [s.relations for s in sentences],
               "n_words": [len(s) for s in sentences],
               "index": list(range(start, start + len(sentences)))},
    )


def planted_treebank(
    n_sentences: int, rel_per_sentence: int, plus_one: float, hit_rate: float, seed: int = 0
) -> tuple[list[DepSentence], dict[tuple[int, int], bool]]:
    """Sentences of 11 words whose ``rel`` arcs are ``plus_one`` of the time at offset +1
    (the rest attach to the root word 0, at offsets -1..-10), and which arcs of ``rel`` a
    planted head gets right (exactly ``hit_rate`` of them, at random).

    The first ``rel_per_sentence`` dependents of each sentence (positions 1..) carry ``rel``;
    the others carry ``other``. Returns the sentences and {(sentence, dependent): hit}.
    """
    gen = torch.Generator().manual_seed(seed)
    rel_arcs = [(s, d) for s in range(n_sentences) for d in range(1, 1 + rel_per_sentence)]
    if rel_per_sentence == 1:  # one arc a sentence: spread the dependents over 1..10
        rel_arcs = [(s, 1 + s % (N_WORDS - 1)) for s in range(n_sentences)]
    can_chain = [i for i, (_, d) in enumerate(rel_arcs) if d < N_WORDS - 1]
    n_plus = round(plus_one * len(rel_arcs))
    chained = {rel_arcs[can_chain[i]]
               for i in torch.randperm(len(can_chain), generator=gen)[:n_plus].tolist()}
    n_hits = round(hit_rate * len(rel_arcs))
    hits = {rel_arcs[i]: True for i in torch.randperm(len(rel_arcs), generator=gen)[:n_hits]}
    rel = set(rel_arcs)
    sentences = []
    for s in range(n_sentences):
        heads = [ROOT] + [d + 1 if (s, d) in chained else 0 for d in range(1, N_WORDS)]
        relations = ["root"] + ["rel" if (s, d) in rel else "other" for d in range(1, N_WORDS)]
        words = tuple(f"w{i}" for i in range(N_WORDS))
        sentences.append(DepSentence(words, tuple(heads), tuple(relations), ("X",) * N_WORDS))
    return sentences, {arc: hits.get(arc, False) for arc in rel_arcs}


def _row(length: int, real: int, target: int, peak: float = 0.6) -> torch.Tensor:
    row = torch.zeros(length)
    row[:real] = (1 - peak) / (real - 1)
    row[target] = peak
    return row


def planted_patterns(
    sentences: list[DepSentence], hits: dict[tuple[int, int], bool], start: int, n_heads: int = 2
) -> torch.Tensor:
    """``[batch, head, query_pos, key_pos]``. Head 0 puts each dependent's maximum on its
    head where ``hits`` says so, else on a wrong word; head 1 on the next word (the last
    word: two back), so it is right on exactly the +1 arcs: the baseline's accuracy;
    further heads copy head 1."""
    length = N_WORDS + 2
    p = torch.zeros(len(sentences), n_heads, length, length)
    for b, s in enumerate(sentences):
        for q in range(length):
            d = q - 1  # word index of token q
            if 0 < d < N_WORDS:
                gold = s.heads[d]
                wrong = next(w for w in range(N_WORDS) if w not in (d, gold))
                right = hits.get((start + b, d), False)
                p[b, 0, q] = _row(length, length, (gold if right else wrong) + 1)
                follow = d + 1 if d + 1 < N_WORDS else d - 2
                p[b, 1:, q] = _row(length, length, follow + 1)
            else:
                p[b, :, q] = 1 / length
    return p
