"""Head clustering (Clark et al. 2019, sec. 6): how differently two heads attend.

For every pair of heads (a, b), of the same layer or not, the mean Jensen-Shannon divergence
between their attention distributions over the same query token:

    JS(p, q) = H((p + q) / 2) - H(p) / 2 - H(q) / 2      (nats, 0 <= JS <= ln 2)

averaged over the rows of real, non-special query tokens (keys: every real token), pooled
per ``Inference.pooling`` (``token``: every row counts the same; ``sentence``: per-sentence
means averaged). ``sqrt(JS)`` is a metric (Endres & Schindelin 2003), so classical
(Torgerson) multidimensional scaling of the squared distances ``JS`` embeds the heads in 2-D.

Long inputs: JS couples heads of different layers, so the analysis needs every layer's whole
pattern of a batch at once; it reads whole matrices (``reads_blocks`` is False) and is
refused above the whole-matrix limit, or, built with ``skips_long_inputs=True`` (what
`attnlens heads` does unless --clusters is given), leaves such inputs out and counts them
(``long_skipped``; docs/long-context.md).

Streaming and mergeable: the state is the ``[head, head]`` sum of JS over rows. The runner
hands over one layer at a time, and JS couples heads of different layers, so while a batch
is analysed the analyzer keeps every earlier layer's patterns restricted to the real query
rows (``[head, row, key_pos]`` float32) and compares each new layer with them; they are
dropped at the end of the batch. That scratch costs ``4 * sum_l heads_l * rows * key_pos``
bytes per batch (MiniLM, 16 sentences of 40 tokens: 6 x 12 x 608 x 42 x 4 = 7.4 MB); the
pairwise product is computed in chunks of rows of at most ``chunk_elements`` floats.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import torch

from attnlens.hooks import ActivationCache
from attnlens.stats.bootstrap import Inference
from attnlens.stream.base import Batch
from attnlens.stream.head_patterns import HeadPatternAnalyzer


class HeadClustering(HeadPatternAnalyzer):
    """Streaming mean JS divergence between every pair of heads; MDS embedding in result."""

    name = "clustering"
    state_fields = ("js_sum", "js_sentence_sum", "rows", "sentences", "long_skipped")

    def __init__(
        self,
        n_layers: int,
        n_heads: int,
        heads_per_layer: Sequence[int] | None = None,
        inference: Inference | None = None,
        chunk_elements: int = 1 << 22,
        skips_long_inputs: bool = False,
    ) -> None:
        self.set_heads(heads_per_layer, n_layers, n_heads)
        self.inference = inference or Inference()
        self.chunk_elements = chunk_elements
        self.skips_long_inputs = skips_long_inputs
        self.long_skipped = 0  # sentences left out: longer than the whole-matrix limit
        self.whole_matrix_limit = 0  # the limit they exceeded (for the report's note)
        self.first = np.concatenate([[0], np.cumsum(self.heads_per_layer)]).tolist()
        total = self.first[-1]
        # sum over rows of JS [head, head] (heads numbered through the layers), float64
        self.js_sum = torch.zeros(total, total, dtype=torch.float64)
        self.js_sentence_sum = torch.zeros(total, total, dtype=torch.float64)  # of sentence means
        self.rows = 0
        self.sentences = 0
        self._kept: list[tuple[int, torch.Tensor, torch.Tensor]] = []

    def settings(self) -> dict:
        return {"n_layers": self.n_layers, "heads_per_layer": self.heads_per_layer,
                **self.inference.settings()}

    def skip_batch(self, batch: Batch, limit: int) -> None:
        self.long_skipped += batch.size
        self.whole_matrix_limit = limit

    def begin_batch(self, batch: Batch) -> None:
        real = batch.attention_mask.bool()  # [batch, pos]
        special = batch.special_mask if batch.special_mask is not None else torch.zeros_like(real)
        rows = real & ~special
        self._where = rows.nonzero(as_tuple=True)  # (sentence, query_pos) of each kept row
        per_sentence = rows.sum(1)  # [batch]
        # weight of a row in its sentence's mean (0 for sentences without rows)
        self._row_share = (1.0 / per_sentence.clamp_min(1).double())[self._where[0]]  # [row]
        self.rows += len(self._where[0])
        self.sentences += int((per_sentence > 0).sum())
        self._kept = []
        self.js_sum = self.js_sum.to(real.device)
        self.js_sentence_sum = self.js_sentence_sum.to(real.device)

    def update_layer(self, batch: Batch, layer: int, cache: ActivationCache) -> None:
        p = cache["pattern", layer].float()  # [batch, head, query_pos, key_pos]
        sent, query = self._where
        kept = p[sent, :, query, :].transpose(0, 1).contiguous()  # [head, row, key_pos]
        entropy = torch.special.entr(kept).sum(-1)  # [head, row]
        self._kept.append((layer, kept, entropy))
        for other, theirs, their_entropy in self._kept:
            self._add_pair(layer, kept, entropy, other, theirs, their_entropy)

    def _add_pair(self, layer, mine, my_entropy, other, theirs, their_entropy) -> None:
        """Add the JS sums between every head of ``layer`` and of ``other`` (both orders)."""
        n_mine, n_rows, n_keys = mine.shape
        n_theirs = theirs.shape[0]
        step = max(1, self.chunk_elements // max(1, n_mine * n_theirs * n_keys))
        token = torch.zeros(n_mine, n_theirs, dtype=torch.float64, device=mine.device)
        sentence = torch.zeros_like(token)
        for start in range(0, n_rows, step):
            rows = slice(start, start + step)
            mixed = (mine[:, None, rows] + theirs[None, :, rows]) / 2  # [mine, theirs, row, key]
            # (H(p) + H(q)) / 2 added in one commutative step: a same-layer block is
            # exactly symmetric, and identical heads give exactly 0
            halves = (my_entropy[:, None, rows] + their_entropy[None, :, rows]) / 2
            js = torch.special.entr(mixed).sum(-1) - halves  # [mine, theirs, row]
            token += js.sum(-1).double()
            sentence += (js.double() * self._row_share[rows]).sum(-1)
        a = slice(self.first[layer], self.first[layer + 1])
        b = slice(self.first[other], self.first[other + 1])
        self.js_sum[a, b] += token
        self.js_sentence_sum[a, b] += sentence
        if other != layer:
            self.js_sum[b, a] += token.T
            self.js_sentence_sum[b, a] += sentence.T

    def end_batch(self, batch: Batch) -> None:
        self._kept, self._where, self._row_share = [], None, None

    def state_dict(self) -> dict:
        state = super().state_dict()
        for field in ("js_sum", "js_sentence_sum"):
            state["state"][field] = state["state"][field].cpu()
        return state

    def mean_divergence(self) -> torch.Tensor:
        """``[head, head]`` mean JS divergence (nats), pooled per ``inference.pooling``."""
        if self.inference.pooling == "sentence":
            return self.js_sentence_sum.cpu() / max(self.sentences, 1)
        return self.js_sum.cpu() / max(self.rows, 1)

    def heads(self) -> list[tuple[int, int]]:
        return [(layer, head) for layer, n in enumerate(self.heads_per_layer)
                for head in range(n)]

    def skipped_note(self) -> str:
        """One line on the sentences left out, or ""."""
        if not self.long_skipped:
            return ""
        limit = f" ({self.whole_matrix_limit:,} tokens)" if self.whole_matrix_limit else ""
        return (f"Head clustering left out {self.long_skipped} sentence"
                f"{'' if self.long_skipped == 1 else 's'} longer than the whole-matrix limit"
                f"{limit}: it needs every layer's whole pattern at once (--whole-matrix-limit; "
                "docs/long-context.md).")

    def result(self) -> dict[str, pd.DataFrame]:
        if self.rows == 0 and self.long_skipped:
            return {}  # every sentence was left out: no distances to show
        js = self.mean_divergence().numpy()
        heads = self.heads()
        a, b = np.triu_indices(len(heads), k=1)
        distances = pd.DataFrame({
            "layer_a": [heads[i][0] for i in a], "head_a": [heads[i][1] for i in a],
            "layer_b": [heads[j][0] for j in b], "head_b": [heads[j][1] for j in b],
            "js_divergence": js[a, b], "js_distance": np.sqrt(np.clip(js[a, b], 0, None)),
            "pooling": self.inference.pooling,
        })
        coords, explained = classical_mds(js)
        embedding = pd.DataFrame({
            "layer": [h[0] for h in heads], "head": [h[1] for h in heads],
            "x": coords[:, 0], "y": coords[:, 1], "explained": explained,
        })
        return {"head_distances": distances, "head_embedding": embedding}


def classical_mds(squared: np.ndarray, dims: int = 2) -> tuple[np.ndarray, float]:
    """Classical (Torgerson) MDS of squared distances ``[n, n]``: (``[n, dims]``, share of
    the positive eigenvalues' sum the ``dims`` axes keep). Signs fixed: each axis' largest
    coordinate is positive."""
    n = len(squared)
    if n == 0:
        return np.zeros((0, dims)), float("nan")
    d2 = (np.clip(squared, 0, None) + np.clip(squared, 0, None).T) / 2  # symmetric, >= 0
    np.fill_diagonal(d2, 0.0)
    centre = np.eye(n) - np.ones((n, n)) / n
    gram = -0.5 * centre @ d2 @ centre
    values, vectors = np.linalg.eigh(gram)  # ascending
    order = np.argsort(values)[::-1][:dims]
    top = np.clip(values[order], 0, None)
    coords = vectors[:, order] * np.sqrt(top)
    if coords.shape[1] < dims:
        coords = np.pad(coords, ((0, 0), (0, dims - coords.shape[1])))
    for k in range(coords.shape[1]):
        if coords[np.argmax(np.abs(coords[:, k])), k] < 0:
            coords[:, k] = -coords[:, k]
    positive = values[values > 0].sum()
    return coords, float(top.sum() / positive) if positive > 0 else float("nan")
