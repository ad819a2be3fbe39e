"""Retrieval heads (Wu et al. 2024), scored teacher-forced so that no generation is needed.

A haystack of ``HAYSTACK`` random ordinary tokens holds a needle of ``NEEDLE`` random tokens
at a depth (``DEPTHS``, cycling over the sequences); the token just before the needle is
repeated after the haystack as the cue (as a question points at the needle), followed by
the needle again as the answer::

    first  h_1 .. h_d  w_1 .. w_k  h_d+1 .. h_H  h_d  w_1 .. w_k  closing

At each answer position predicting token ``w`` (the cue predicts ``w_1``, the answer's
``w_j`` predicts ``w_j+1``), a head scores ``1/k`` when its most-attended key lies in the
needle and holds ``w`` (ties share the credit). A head's retrieval score is the mean over
haystacks, with a bootstrap interval over haystacks. Wu et al. score during generation, on
the tokens the model itself produces and copies; this teacher-forced score counts every
answer position whatever the model predicts (docs/lm-heads.md says what that misses).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from attnlens.hooks import ActivationCache
from attnlens.measures.lm_heads.probes import ProbeSet, draw_segments, pad_sequences
from attnlens.measures.lm_heads.shares import HeadShares, kv_heads_of
from attnlens.model.transformer import HookedTransformer
from attnlens.stream.base import Batch, PatternBlock

HAYSTACK = 192  # haystack tokens (fewer when the model's context is shorter)
NEEDLE = 8  # needle tokens k
DEPTHS = (0.1, 0.3, 0.5, 0.7, 0.9)  # needle positions, as fractions of the haystack


def haystacks(vocab: Sequence[int], n: int, seed: int, first: Sequence[int],
              closing: Sequence[int], pad_id: int, special: set[int], n_ctx: int | None = None,
              haystack: int = HAYSTACK, needle: int = NEEDLE,
              depths: Sequence[float] = DEPTHS) -> ProbeSet:
    """``n`` teacher-forced needle-in-a-haystack sequences (see the module docstring).

    Haystack and needle tokens are distinct within a sequence when the vocabulary allows.
    ``extra``: ``needle_start`` and ``answer_start`` (the cue's position) per sequence.
    """
    frame = len(first) + len(closing)
    if n_ctx is not None:  # haystack + needle + cue + needle must fit the context
        haystack = max(2, min(haystack, n_ctx - frame - 2 * needle - 1))
    tokens = draw_segments(vocab, n, haystack + needle, seed).tolist()
    sequences, needle_starts, answer_starts = [], [], []
    for row, drawn in enumerate(tokens):
        hay, pin = drawn[:haystack], drawn[haystack:]
        depth = max(1, min(haystack - 1, round(depths[row % len(depths)] * haystack)))
        body = [*first, *hay[:depth], *pin, *hay[depth:]]
        needle_starts.append(len(first) + depth)
        answer_starts.append(len(body))
        sequences.append([*body, hay[depth - 1], *pin, *closing])
    ids, mask, marked = pad_sequences(sequences, pad_id, special,
                                      [(len(first), len(closing))] * n)
    return ProbeSet(ids, mask, marked, [len(first)] * n, [needle] * n,
                    extra={"needle_start": needle_starts, "answer_start": answer_starts})


class RetrievalScores(HeadShares):
    """Streaming teacher-forced retrieval scores of every head (see the module)."""

    name = "lm_retrieval"
    measures = ("retrieval",)
    pooling = "token"  # hits over every answer position of every haystack

    @classmethod
    def for_model(cls, model: HookedTransformer, inference=None) -> RetrievalScores:
        return cls(model.heads_per_layer, kv_heads_of(model), inference)._identify(model)

    def begin_batch(self, batch: Batch) -> None:
        self.move_state(batch.input_ids.device)
        ids = batch.input_ids  # [batch, pos]
        device, length = ids.device, ids.shape[1]
        k = torch.tensor(batch.extra["repeat"], device=device)[:, None]  # [batch, 1]: needle
        needle = torch.tensor(batch.extra["needle_start"], device=device)[:, None]
        cue = torch.tensor(batch.extra["answer_start"], device=device)[:, None]
        width = int(k.max())
        j = torch.arange(width, device=device)[None, :]  # [1, answer]
        self._answer_ok = j < k  # [batch, answer]
        self._queries = (cue + j).clamp(max=length - 1)  # the cue, then w_1 .. w_k-1
        wanted = ids.gather(1, (needle + j).clamp(max=length - 1))  # [batch, answer]: w_j+1
        pos = torch.arange(length, device=device)[None, None, :]
        in_needle = (pos >= needle[:, :, None]) & (pos < (needle + k)[:, :, None])
        # [batch, answer, key_pos]: keys in the needle holding the token to predict
        self._good = in_needle & (ids[:, None, :] == wanted[:, :, None])
        self._start(batch, self._answer_ok.sum(1))

    def update_block(self, batch: Batch, layer: int, block: PatternBlock,
                     cache: ActivationCache) -> None:
        p = block.p  # [batch, head, rows, key_pos], rows start:stop of the pattern
        n_heads, length = p.shape[1], p.shape[-1]
        inside = (self._queries >= block.start) & (self._queries < block.stop)
        local = (self._queries - block.start).clamp(0, p.shape[2] - 1)  # [batch, answer]
        index = local[:, None, :, None].expand(-1, n_heads, -1, length)
        rows = p.gather(2, index)  # [batch, head, answer, key_pos]
        is_max = rows == rows.amax(-1, keepdim=True)
        hits = (is_max & self._good[:, None]).sum(-1) / is_max.sum(-1)  # [batch, head, answer]
        counted = self._answer_ok & inside  # answer positions whose row is in this block
        credit = (hits * counted[:, None]).sum(-1)  # [batch, head]
        self._scratch[:, 0, layer, :n_heads] += credit
