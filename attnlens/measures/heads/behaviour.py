"""Behaviour classes of heads (Clark et al. 2019, sec. 3; Kovaleva et al. 2019): how much of
a head's attention is vertical, diagonal or broad.

Token level, over the rows of real, non-special query tokens (as ``HeadStats``); keys are all
real tokens. Per head:

- ``vertical``: mean attention mass on the *vertical keys*: the special tokens ([CLS], [SEP],
  BOS/EOS) and the first token of the input (the key column every row can reach);
- ``diagonal``: mean attention mass on the keys at offsets -1, 0 and +1 from the query that
  are not vertical keys (the first word's previous token is [CLS]: that mass is vertical),
  so ``vertical + diagonal <= 1`` and the rest is ``1 - vertical - diagonal``;
- ``broad``: share of rows whose entropy is above the length-scaled threshold
  ``tau(n) = (3.8 / ln 128) * ln n`` nats, n the keys the row's mask lets it see (the
  sentence's real tokens; under a causal mask row i sees i + 1 of them). Clark et al.
  call heads broad above about 3.8 nats on their 128-token inputs; ``3.8 / ln 128 = 0.783``
  is that threshold as a fraction of the largest possible entropy ``ln n`` (uniform
  attention), so ``tau(128) = 3.8`` and a row is broad when its perplexity ``e^H`` exceeds
  ``n ** 0.783``.

``dominant`` names the largest of the three when it is at least 0.5, else ``mixed``. Sums
are kept per sentence, so every share has a bootstrap interval over sentences.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd
import torch

from attnlens.hooks import ActivationCache
from attnlens.model.transformer import HookedTransformer
from attnlens.stats.bootstrap import Inference, estimate_shares
from attnlens.stream.base import Batch, PatternBlock
from attnlens.stream.head_patterns import HeadPatternAnalyzer
from attnlens.stream.held_layers import HeldLayers, add_to_layers
from attnlens.stream.per_sentence import PerSentenceRows, sentence_ids_of

BEHAVIOURS = ("vertical", "diagonal", "broad")
BROAD_ENTROPY = 3.8  # nats, Clark et al.'s broad heads on 128-token inputs
BROAD_LENGTH = 128


def broad_threshold(n_keys: torch.Tensor | int, entropy: float = BROAD_ENTROPY,
                    length: int = BROAD_LENGTH) -> torch.Tensor:
    """``tau(n) = entropy / ln(length) * ln(n)`` nats for rows over ``n`` keys."""
    n = torch.as_tensor(n_keys, dtype=torch.float32)
    return entropy / math.log(length) * torch.log(n.clamp_min(1))


class HeadBehaviour(PerSentenceRows, HeadPatternAnalyzer):
    """Streaming per-sentence vertical, diagonal and broad attention per head."""

    name = "behaviour"
    reads_blocks = True
    state_fields = ("sentences", "sentence_sums", "sentence_rows")
    row_fields = ("sentence_sums", "sentence_rows")

    def __init__(
        self,
        n_layers: int,
        n_heads: int,
        heads_per_layer: Sequence[int] | None = None,
        broad_entropy: float = BROAD_ENTROPY,
        broad_length: int = BROAD_LENGTH,
        inference: Inference | None = None,
        causal: bool = False,
    ) -> None:
        self.set_heads(heads_per_layer, n_layers, n_heads)
        self.causal = causal  # a row sees keys 0..i only: its threshold counts those
        self.broad_entropy, self.broad_length = broad_entropy, broad_length
        self.inference = inference or Inference()
        self.sentences: list[int] = []
        self.sentence_sums: list[torch.Tensor] = []  # per batch [sentence, behaviour, layer, head]
        self.sentence_rows: list[torch.Tensor] = []  # per batch [sentence]

    @classmethod
    def model_options(cls, model: HookedTransformer) -> dict:
        return {**cls.head_shape(model), "causal": bool(getattr(model.cfg, "causal", False))}

    def row_width(self, field: str) -> tuple[int, ...]:
        if field == "sentence_sums":
            return (len(BEHAVIOURS), self.n_layers, self.n_heads)
        return ()

    def settings(self) -> dict:
        return {"n_layers": self.n_layers, "heads_per_layer": self.heads_per_layer,
                "broad_entropy": self.broad_entropy, "broad_length": self.broad_length,
                "causal": self.causal, **self.inference.settings()}

    def begin_batch(self, batch: Batch) -> None:
        real = batch.attention_mask.bool()  # [batch, pos]
        special = batch.special_mask if batch.special_mask is not None else torch.zeros_like(real)
        pos = torch.arange(real.shape[1], device=real.device)
        vertical = real & (special | (pos == 0)[None])  # [batch, key_pos]
        self._vertical = vertical.to(torch.float32)[:, None, :, None]  # [batch, 1, key, 1]
        self._diagonal_keys = (real & ~vertical)[:, None, :]  # [batch, 1, key_pos]
        self._near: dict[tuple[int, int], torch.Tensor] = {}  # per query rows (start, stop)
        if self.causal:  # the keys each row's mask lets it see
            n_keys = real.to(torch.int64).cumsum(1)[:, None, :]  # [batch, 1, query_pos]
        else:
            n_keys = real.sum(1)[:, None, None]  # [batch, 1, 1]
        self._threshold = broad_threshold(n_keys, self.broad_entropy, self.broad_length).to(
            real.device)
        rows = real & ~special
        self._row_weight = rows.to(torch.float32)[:, None, :]  # [batch, 1, query_pos]
        self.sentences += sentence_ids_of(batch, self.next_sentence_id())
        self.sentence_rows.append(rows.sum(1))
        self._scratch = torch.zeros(batch.size, len(BEHAVIOURS), self.n_layers, self.n_heads,
                                    dtype=torch.float64, device=real.device)
        # [sentence, behaviour, layer, head], float64: sums over thousands of rows
        self._held = HeldLayers()

    def update_block(self, batch: Batch, layer: int, block: PatternBlock,
                     cache: ActivationCache) -> None:
        p = block.p  # [batch, head, rows, key_pos]
        rows = (block.start, block.stop)
        diagonal_keys = self._near.get(rows)  # the same for every layer's block of these rows
        if diagonal_keys is None:
            near = block.distance <= 1  # [rows, key_pos]
            diagonal_keys = self._near[rows] = (
                near[None] & self._diagonal_keys).to(torch.float32)[:, None]
        vertical = (p @ self._vertical)[..., 0]  # [batch, head, rows]
        diagonal = (p * diagonal_keys).sum(-1)  # diagonal_keys: [batch, 1, rows, key_pos]
        threshold = block.query_rows(self._threshold) if self.causal else self._threshold
        broad = (block.entropy > threshold).to(torch.float32)  # threshold: [batch, 1, rows|1]
        per_row = torch.stack([vertical, diagonal, broad], 1)  # [batch, behaviour, head, rows]
        if block.is_whole:  # held, then weighed and summed for several layers at once
            if self._held.add(layer, per_row):
                self._fold_held()
            return
        row_weight = block.query_rows(self._row_weight)[:, None]  # [batch, 1, 1, rows]
        self._scratch[:, :, layer, : block.n_heads] += (per_row.double() * row_weight).sum(-1)

    def _fold_held(self) -> None:
        """The held layers' rows ``[batch, behaviour, layer * head, query_pos]``, each
        (sentence, behaviour, head) summed over its own rows as per layer, into the scratch."""
        by_layer = self._scratch.permute(2, 0, 1, 3)  # [layer, batch, behaviour, head] (a view)
        for layers, (per_row,) in self._held.take(dims=(2,)):
            sums = (per_row.double() * self._row_weight[:, None]).sum(-1)  # [b, beh, l * h]
            sums = sums.unflatten(2, (len(layers), -1))  # [batch, behaviour, layer, head]
            add_to_layers(by_layer, layers, sums.permute(2, 0, 1, 3))

    def end_batch(self, batch: Batch) -> None:
        if self._held:
            self._fold_held()
        self.sentence_sums.append(self._scratch)  # stays on the model's device
        self._scratch = None
        self._near = {}

    def head_exists(self) -> np.ndarray:
        exists = np.zeros((self.n_layers, self.n_heads), dtype=bool)
        for layer, n in enumerate(self.heads_per_layer):
            exists[layer, :n] = True
        return exists

    def result(self) -> dict[str, pd.DataFrame]:
        sums = self.field_rows("sentence_sums")
        rows = self.field_rows("sentence_rows")
        shape = (len(BEHAVIOURS), self.n_layers, self.n_heads)
        est = estimate_shares(sums.reshape(len(rows), -1), rows,
                              torch.tensor(self.sentences, dtype=torch.long), self.inference)
        value, low, high = (t.reshape(shape).numpy() for t in (est.value, est.low, est.high))
        layer, head = np.nonzero(self.head_exists())
        n = len(BEHAVIOURS)
        tidy = pd.DataFrame({
            "layer": np.tile(layer, n), "head": np.tile(head, n),
            "measure": np.repeat(BEHAVIOURS, len(layer)),
            "value": value[:, layer, head].reshape(-1), "ci_low": low[:, layer, head].reshape(-1),
            "ci_high": high[:, layer, head].reshape(-1), "pooling": self.inference.pooling,
        })
        per_head = value[:, layer, head]  # [behaviour, head]
        top = per_head.argmax(0)
        dominant = np.where(per_head.max(0) >= 0.5, np.array(BEHAVIOURS)[top], "mixed")
        classes = pd.DataFrame({"layer": layer, "head": head,
                                **{b: per_head[i] for i, b in enumerate(BEHAVIOURS)},
                                "dominant": dominant})
        return {"head_behaviour": tidy, "head_behaviour_classes": classes}
