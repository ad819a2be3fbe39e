"""Syntactic heads (Clark et al. 2019, Voita et al. 2019) from a dependency treebank.

Word level (``attnlens.data.words``). For every arc ``dependent -> head`` with relation r:

- ``dep->head``: the dependent's row puts its maximum (excluding the dependent itself) on
  its head;
- ``head->dep``: the head word's own row puts its maximum (excluding the head itself) on the
  dependent;
- ``head->dep (clark code)``: the word attending most to the dependent (the dependent's own
  row excluded) is its head: the question Clark et al.'s released code asks, reported
  separately.

A head's accuracy for (r, direction) is the share of arcs it gets right; tied maxima share
the credit. The baseline is the best fixed relative offset for r and the direction, counted
from the same arcs ("always predict the word k positions away"). A head is syntactic for r
when its accuracy is at least the baseline + ``margin`` (Voita: 10 points), for relations
with at least ``min_examples`` arcs. "all relations" pools every arc.
"""

from __future__ import annotations

from collections import Counter

import pandas as pd
import torch

from attnlens.analysis.base import Analyzer, Batch, pattern_hook_names
from attnlens.data.conllu import base_relation
from attnlens.data.words import cached_word_attention
from attnlens.hooks import ActivationCache
from attnlens.model.transformer import HookedTransformer

DIRECTIONS = ("dep->head", "head->dep", "head->dep (clark code)")
MAIN_DIRECTIONS = DIRECTIONS[:2]
ALL_RELATIONS = "all relations"


class SyntacticHeads(Analyzer):
    """Streaming per-relation, per-direction hit counts of every head, and offset counts."""

    name = "syntactic"

    def __init__(
        self,
        n_layers: int,
        n_heads: int,
        min_examples: int = 20,
        margin: float = 0.10,
        base_relations: bool = False,
    ) -> None:
        self.n_layers, self.n_heads = n_layers, n_heads
        self.min_examples, self.margin, self.base_relations = min_examples, margin, base_relations
        self.hits: dict[str, torch.Tensor] = {}  # relation -> [direction, layer, head]
        self.offsets: dict[str, Counter[int]] = {}  # relation -> Counter(head - dependent)

    @classmethod
    def for_model(cls, model: HookedTransformer, **kwargs) -> SyntacticHeads:
        return cls(model.n_layers, max(model.heads_per_layer), **kwargs)

    def hook_names(self, model: HookedTransformer) -> list[str]:
        return pattern_hook_names(model)

    def _arcs(self, batch: Batch) -> tuple[torch.Tensor, list[str]]:
        """``[arc, 4]`` rows (sentence, dependent, head, relation index) and the relations."""
        relations: dict[str, int] = {}
        rows = []
        trees = zip(batch.extra["heads"], batch.extra["relations"], strict=True)
        for b, (heads, labels) in enumerate(trees):
            n_words = batch.extra["n_words"][b]
            for dep, (head, label) in enumerate(zip(heads, labels, strict=True)):
                if head < 0 or dep >= n_words or head >= n_words:
                    continue  # the root, or a word cut by truncation
                rel = base_relation(label) if self.base_relations else label
                rows.append((b, dep, head, relations.setdefault(rel, len(relations))))
                self.offsets.setdefault(rel, Counter())[head - dep] += 1
        arcs = torch.tensor(rows, dtype=torch.long).reshape(-1, 4)
        return arcs, list(relations)

    def update(self, batch: Batch, cache: ActivationCache) -> None:
        if "heads" not in batch.extra or batch.word_ids is None:
            return  # a corpus without dependency trees: nothing to count
        arcs, relations = self._arcs(batch)
        if not len(relations):
            return
        device = batch.word_ids.device
        sent, dep, head, rel = arcs.to(device).unbind(1)  # each [arc]
        hits = torch.zeros(len(relations), len(DIRECTIONS), self.n_layers, self.n_heads)
        for layer in range(self.n_layers):
            wa = cached_word_attention(cache, batch, layer)
            w = wa.weights  # [batch, head, query_word, key_word]
            n_heads = w.shape[1]
            n_padding = (~wa.valid).sum(-1)[:, None, None]  # [batch, 1, 1]
            masked = w.clone()
            masked.diagonal(dim1=-2, dim2=-1).fill_(-1.0)  # a word never picks itself
            top_row = masked.amax(-1, keepdim=True)  # [batch, head, query_word, 1]
            top_col = masked.amax(-2, keepdim=True)  # [batch, head, 1, key_word]
            row_max = masked == top_row  # maxima of each query's row
            col_max = masked == top_col  # maxima of each key's column
            # padding words hold exactly 0: they tie only with a zero maximum; uncount them
            row_n = (row_max.sum(-1) - (top_row[..., 0] == 0) * n_padding).clamp_min(1)
            col_n = (col_max.sum(-2) - (top_col[..., 0, :] == 0) * n_padding).clamp_min(1)
            credits = [
                row_max[sent, :, dep, head] / row_n[sent, :, dep],  # dependent's row -> head
                row_max[sent, :, head, dep] / row_n[sent, :, head],  # head's row -> dependent
                col_max[sent, :, head, dep] / col_n[sent, :, dep],  # dependent's column -> head
            ]  # each [arc, head]; tied maxima share the credit
            for d, credit in enumerate(credits):
                summed = torch.zeros(len(relations), n_heads, device=device)
                summed.index_add_(0, rel, credit.to(torch.float32))  # [relation, head]
                hits[:, d, layer, :n_heads] += summed.cpu()
        for r, relation in enumerate(relations):
            if relation not in self.hits:
                self.hits[relation] = torch.zeros_like(hits[r], dtype=torch.float64)
            self.hits[relation] += hits[r].double()

    def merge(self, other: SyntacticHeads) -> SyntacticHeads:
        for relation, hits in other.hits.items():
            if relation in self.hits:
                self.hits[relation] += hits
            else:
                self.hits[relation] = hits.clone()
        for relation, counts in other.offsets.items():
            self.offsets.setdefault(relation, Counter()).update(counts)
        return self

    def examples(self, relation: str) -> int:
        return sum(self.offsets[relation].values())

    def relations(self) -> list[str]:
        """Relations with at least ``min_examples`` arcs, most frequent first."""
        kept = [r for r in self.offsets if self.examples(r) >= self.min_examples]
        return sorted(kept, key=lambda r: (-self.examples(r), r))

    def _pooled(self) -> tuple[torch.Tensor, Counter[int]]:
        hits = sum(self.hits.values(), torch.zeros(len(DIRECTIONS), self.n_layers, self.n_heads))
        offsets: Counter[int] = Counter()
        for counts in self.offsets.values():
            offsets.update(counts)
        return hits.double(), offsets

    @staticmethod
    def baseline(offsets: Counter[int], direction: str) -> tuple[int, float]:
        """(best offset, its accuracy) of the fixed-offset guess for one direction.

        ``offsets`` counts ``head - dependent``. From the dependent (dep->head, and Clark's
        code, which predicts the head from the dependent) the guess is that offset; from the
        head (head->dep) it is its negation. Ties: the offset closest to 0, then negative.
        """
        total = sum(offsets.values())
        if not total:
            return 0, float("nan")
        offset, count = max(offsets.items(), key=lambda kv: (kv[1], -abs(kv[0]), -kv[0]))
        return (-offset if direction == "head->dep" else offset), count / total

    def _rows(self):
        """(relation, examples, hits [direction, layer, head], offsets) incl. all relations."""
        for relation in self.relations():
            yield relation, self.examples(relation), self.hits[relation], self.offsets[relation]
        if self.offsets:
            hits, offsets = self._pooled()
            yield ALL_RELATIONS, sum(offsets.values()), hits, offsets

    def result(self) -> dict[str, pd.DataFrame]:
        accuracy, best, baselines = [], [], []
        for relation, n, hits, offsets in self._rows():
            acc = (hits / n).numpy()  # [direction, layer, head]
            for d, direction in enumerate(DIRECTIONS):
                offset, base = self.baseline(offsets, direction)
                baselines.append(
                    {"relation": relation, "direction": direction, "examples": n,
                     "baseline_offset": offset, "baseline": base}
                )
                for layer in range(self.n_layers):
                    for head in range(self.n_heads):
                        a = float(acc[d, layer, head])
                        accuracy.append(
                            {"relation": relation, "direction": direction, "layer": layer,
                             "head": head, "accuracy": a, "baseline": base, "examples": n,
                             "syntactic": bool(a >= base + self.margin)}
                        )
                layer, head = divmod(int(acc[d].argmax()), self.n_heads)
                top = float(acc[d, layer, head])
                best.append(
                    {"relation": relation, "direction": direction, "examples": n,
                     "layer": layer, "head": head, "accuracy": top, "baseline": base,
                     "baseline_offset": offset, "margin": top - base,
                     "syntactic": bool(top >= base + self.margin)}
                )
        columns = {
            "syntactic_accuracy": ["relation", "direction", "layer", "head", "accuracy",
                                   "baseline", "examples", "syntactic"],
            "syntactic_best": ["relation", "direction", "examples", "layer", "head", "accuracy",
                               "baseline", "baseline_offset", "margin", "syntactic"],
            "syntactic_baselines": ["relation", "direction", "examples", "baseline_offset",
                                    "baseline"],
        }
        tables = {"syntactic_accuracy": accuracy, "syntactic_best": best,
                  "syntactic_baselines": baselines}
        return {k: pd.DataFrame.from_records(v, columns=columns[k]) for k, v in tables.items()}
