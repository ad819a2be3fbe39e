"""Synthetic probes ``[first token] + R + R`` and the heads they reveal (no corpus needed).

A probe is a first token (the tokenizer's own: BERT's [CLS], Llama's <s>; GPT-2's
<|endoftext|>), a segment R of ``length`` tokens drawn uniformly without replacement from
the tokenizer's ordinary vocabulary (no special, added or unused tokens), and R again; the
model's closing special tokens (BERT's [SEP]) follow. With the first token at 0 the second
repeat holds positions R+1 .. 2R. Over those queries i (Olsson et al. 2022; TransformerLens'
``detect_head``):

- ``previous_token``: mean attention A[i, i-1];
- ``duplicate_token``: mean attention A[i, i-R], the earlier copy of the same token;
- ``induction``: mean attention A[i, i-R+1], the token after the earlier copy.

``ProbeScores`` keeps the sums per probe, so each score has a bootstrap interval over probe
sequences. ``repeat_loss`` is the causal check's metric: the next-token loss on the second
repeat's tokens 2..R (the first is not predictable from the probe).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from attnlens.errors import ConfigError
from attnlens.hooks import ActivationCache
from attnlens.measures.lm_heads.shares import HeadShares, kv_heads_of
from attnlens.model.transformer import HookedTransformer
from attnlens.stream.base import Batch, PatternBlock

PROBE_MEASURES = ("previous_token", "duplicate_token", "induction")
PROBE_BATCH = 32  # probe sequences per forward pass
# Vocabulary entries that are placeholders, not ordinary tokens: BERT's [unused17], T5's
# <extra_id_3>, Gemma's <unused4>, fairseq's madeupword0002, sentencepiece byte fallbacks.
UNUSED = re.compile(r"^(\[unused\d+\]|<unused\d+>|<extra_id_\d+>|madeupword\d+|<0x[0-9A-Fa-f]{2}>"
                    r"|<\|.*\|>)$")


def ordinary_token_ids(tokenizer, vocab_size: int) -> list[int]:
    """Ids of the tokenizer's ordinary vocabulary below ``vocab_size`` (the model's).

    Left out: special ids, added tokens, and placeholder entries (``UNUSED``).
    """
    hf = tokenizer.hf
    excluded = set(hf.all_special_ids) | set(getattr(hf, "added_tokens_decoder", {}) or {})
    return sorted(i for token, i in hf.get_vocab().items()
                  if i < vocab_size and i not in excluded and not UNUSED.match(token))


def frame_tokens(tokenizer) -> tuple[list[int], list[int]]:
    """(first tokens, closing tokens) of a probe: the special tokens the tokenizer puts
    around one text; without a leading one, its BOS (else EOS) token as the first; with
    neither, no first token (probes ``R + R``, as the model reads its texts)."""
    before, after = tokenizer.special_layout
    hf = tokenizer.hf
    first = hf.convert_tokens_to_ids(before)
    if not first:
        fallback = hf.bos_token_id if hf.bos_token_id is not None else hf.eos_token_id
        first = [] if fallback is None else [fallback]
    return list(first), list(hf.convert_tokens_to_ids(after))


@dataclass
class ProbeSet:
    """Token sequences with the layout of a probe: ``prefix`` first tokens, a segment of
    ``repeat`` tokens twice, closing tokens; padded on the right."""

    input_ids: torch.Tensor  # [sequence, pos]
    attention_mask: torch.Tensor  # [sequence, pos]
    special_mask: torch.Tensor  # [sequence, pos]: the frame's special tokens
    prefix: list[int]  # first tokens per sequence
    repeat: list[int]  # R per sequence
    extra: dict[str, list] | None = None  # further per-sequence annotations

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])

    def batches(self, batch_size: int = PROBE_BATCH) -> list[Batch]:
        """The probes as analyzer batches (``extra``: index, prefix, repeat, ...)."""
        out = []
        for start in range(0, len(self), batch_size):
            rows = slice(start, start + batch_size)
            width = int(self.attention_mask[rows].sum(1).max())
            extra = {"index": list(range(start, min(start + batch_size, len(self)))),
                     "prefix": self.prefix[rows], "repeat": self.repeat[rows]}
            extra.update({k: v[rows] for k, v in (self.extra or {}).items()})
            out.append(Batch(input_ids=self.input_ids[rows, :width],
                             attention_mask=self.attention_mask[rows, :width],
                             special_mask=self.special_mask[rows, :width], extra=extra))
        return out


def pad_sequences(sequences: Sequence[Sequence[int]], pad_id: int, special: set[int],
                  frame: Sequence[tuple[int, int]]) -> tuple[torch.Tensor, ...]:
    """(ids, attention mask, special mask) ``[sequence, pos]`` for lists of ids; ``frame``
    gives each sequence's (prefix, suffix) lengths, whose special ids are marked."""
    width = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    mask = torch.zeros(len(sequences), width, dtype=torch.long)
    marked = torch.zeros(len(sequences), width, dtype=torch.bool)
    for row, (seq, (prefix, suffix)) in enumerate(zip(sequences, frame, strict=True)):
        ids[row, : len(seq)] = torch.tensor(list(seq), dtype=torch.long)
        mask[row, : len(seq)] = 1
        for pos in [*range(prefix), *range(len(seq) - suffix, len(seq))]:
            marked[row, pos] = int(seq[pos]) in special
    return ids, mask, marked


def draw_segments(vocab: Sequence[int], n: int, length: int, seed: int) -> torch.Tensor:
    """``[n, length]`` tokens drawn uniformly from ``vocab``: without replacement within a
    segment when the vocabulary is large enough, else with replacement. Seeded: the same
    segments on every machine for a given seed and vocabulary."""
    if not len(vocab):
        raise ConfigError("the tokenizer has no ordinary token to build probes from.")
    pool = torch.tensor(list(vocab), dtype=torch.long)
    gen = torch.Generator().manual_seed(int(seed))
    if len(pool) >= length:
        picks = torch.stack([torch.randperm(len(pool), generator=gen)[:length] for _ in range(n)])
    else:
        picks = torch.randint(len(pool), (n, length), generator=gen)
    return pool[picks]


def random_probes(vocab: Sequence[int], n: int, length: int, seed: int, first: Sequence[int],
                  closing: Sequence[int], pad_id: int, special: set[int]) -> ProbeSet:
    """``n`` probes ``first + R + R + closing`` with seeded random segments R (see module)."""
    segments = draw_segments(vocab, n, length, seed).tolist()
    return probes_from_segments([[*first, *s, *s, *closing] for s in segments],
                                len(first), len(closing), pad_id, special)


def probes_from_file(sequences: Sequence[Sequence[int]], closing: Sequence[int], pad_id: int,
                     special: set[int], vocab_size: int) -> ProbeSet:
    """Probes read by ``settings.read_probe_file`` (``first R R`` per line) plus closing."""
    too_big = [i for s in sequences for i in s if i >= vocab_size]
    if too_big:
        raise ConfigError(f"--probe-file holds token id {max(too_big)}, beyond the model's "
                          f"vocabulary of {vocab_size}.")
    return probes_from_segments([[*s, *closing] for s in sequences], 1, len(closing), pad_id,
                                special)


def probes_from_segments(sequences: list[list[int]], prefix: int, closing: int, pad_id: int,
                         special: set[int]) -> ProbeSet:
    ids, mask, marked = pad_sequences(sequences, pad_id, special,
                                      [(prefix, closing)] * len(sequences))
    repeat = [(len(s) - prefix - closing) // 2 for s in sequences]
    return ProbeSet(ids, mask, marked, [prefix] * len(sequences), repeat)


def query_targets(batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
    """(``targets [batch, measure, query_pos]`` key positions, ``valid [batch, query_pos]``)
    of the probe measures: for queries i of the second repeat, i-1, i-R and i-R+1."""
    length = batch.input_ids.shape[1]
    device = batch.input_ids.device
    pos = torch.arange(length, device=device)
    prefix = torch.tensor(batch.extra["prefix"], device=device)[:, None]  # [batch, 1]
    repeat = torch.tensor(batch.extra["repeat"], device=device)[:, None]
    valid = (pos >= prefix + repeat) & (pos < prefix + 2 * repeat)  # [batch, query_pos]
    offsets = torch.stack([torch.ones_like(repeat), repeat, repeat - 1], 1)  # [batch, 3, 1]
    targets = (pos[None, None, :] - offsets).clamp_min(0)  # [batch, measure, query_pos]
    return targets, valid


class ProbeScores(HeadShares):
    """Streaming previous-token, duplicate-token and induction scores of every head (each
    query row's attention on its targets: fed a block of query rows at a time)."""

    name = "lm_probes"
    measures = PROBE_MEASURES
    pooling = "token"  # the mean over every second-repeat query of every probe

    @classmethod
    def for_model(cls, model: HookedTransformer, inference=None) -> ProbeScores:
        return cls(model.heads_per_layer, kv_heads_of(model), inference)._identify(model)

    def begin_batch(self, batch: Batch) -> None:
        self.move_state(batch.input_ids.device)
        targets, valid = query_targets(batch)
        self._targets = targets.transpose(1, 2)[:, None]  # [batch, 1, query_pos, measure]
        self._valid = valid[:, None, :, None].to(torch.float32)  # [batch, 1, query_pos, 1]
        self._start(batch, valid.sum(1))

    def update_block(self, batch: Batch, layer: int, block: PatternBlock,
                     cache: ActivationCache) -> None:
        p = block.p  # [batch, head, rows, key_pos], rows start:stop of the pattern
        n_heads = p.shape[1]
        targets = block.query_rows(self._targets, dim=2)  # [batch, 1, rows, measure]
        index = targets.expand(-1, n_heads, -1, -1)  # [batch, head, rows, measure]
        taken = p.gather(-1, index) * block.query_rows(self._valid, dim=2)
        self._scratch[:, :, layer, :n_heads] += taken.sum(2).transpose(1, 2)  # [batch, m, head]


@torch.no_grad()
def repeat_loss(model: HookedTransformer, batches: Sequence[Batch],
                head_mask: torch.Tensor | None = None) -> float:
    """Mean next-token cross-entropy (nats) on the second repeat's tokens 2..R of probes
    (``ProbeSet.batches``): predicted at the positions holding tokens 1..R-1."""
    total, count = 0.0, 0
    for batch in batches:
        batch = batch.to(model.device)
        logits = model(**batch.model_inputs(), head_mask=head_mask, return_type="logits")
        _, valid = query_targets(batch)
        prefix = torch.tensor(batch.extra["prefix"], device=valid.device)[:, None]
        repeat = torch.tensor(batch.extra["repeat"], device=valid.device)[:, None]
        pos = torch.arange(valid.shape[1], device=valid.device)
        scored = valid & (pos < prefix + 2 * repeat - 1)  # predicting the next repeat token
        labels = torch.full_like(batch.input_ids, -100)
        labels[:, :-1] = torch.where(scored[:, :-1], batch.input_ids[:, 1:], -100)
        ce = F.cross_entropy(logits.float().transpose(1, 2), labels, ignore_index=-100,
                             reduction="sum")
        total += float(ce.double())
        count += int((labels != -100).sum())
    if count == 0:
        raise ConfigError("the probes hold no second-repeat token to predict (R must be >= 2).")
    return total / count
