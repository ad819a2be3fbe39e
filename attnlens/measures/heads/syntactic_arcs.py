"""The arcs a ``SyntacticHeads`` analyzer counts, summed per sentence, and the directions and
relations its tables report (``syntactic`` measures, ``syntactic_tables`` tabulates)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

DIRECTIONS = ("dep->head", "head->dep", "head->dep (clark code)")
MAIN_DIRECTIONS = DIRECTIONS[:2]
ALL_RELATIONS = "all relations"
# Arcs of these relations are measured and tabled but never make a head "syntactic":
# punctuation attaches by convention, not by grammar, and its offset baseline is weak.
NOT_A_ROLE = ("punct",)
# Smallest relation the tables report and test; the power calculation in docs/heads.md
# (``multiple_testing.margin_test_power``) justifies it.
DEFAULT_MIN_EXAMPLES = 100


@dataclass
class SentenceArcs:
    """The analyzer's per-(sentence, relation) state, consolidated on the CPU.

    ``pair_*`` has one entry per (sentence, relation) with at least one arc: its sentence's
    corpus index, relation, arc count and hits ``[pair, direction, layer, head]``;
    ``arc_*`` one entry per arc (sentence, relation, offset ``head - dependent``).
    """

    relations: list[str]
    sentences: torch.Tensor  # [sentence] sorted corpus indices of every sentence seen
    pair_sentence: torch.Tensor  # [pair]
    pair_relation: torch.Tensor  # [pair] index into relations
    pair_arcs: torch.Tensor  # [pair] float64
    pair_hits: torch.Tensor  # [pair, direction, layer, head] float32
    arc_sentence: torch.Tensor  # [arc]
    arc_relation: torch.Tensor  # [arc]
    arc_offset: torch.Tensor  # [arc]

    def group(self, relation: str | None) -> RelationArcs:
        """Per-sentence data of one relation (``None``: every arc)."""
        if relation is None:
            pairs = torch.ones_like(self.pair_sentence, dtype=torch.bool)
            arcs = torch.ones_like(self.arc_sentence, dtype=torch.bool)
        else:
            r = self.relations.index(relation)
            pairs, arcs = self.pair_relation == r, self.arc_relation == r
        pick = pairs.nonzero()[:, 0]  # [pair chosen], ascending: the mask's rows, in order
        ids, rows = torch.unique(self.pair_sentence[pick], return_inverse=True)
        width = self.pair_hits.shape[1:]
        hits = torch.zeros((len(ids), *width), dtype=torch.float64)  # [sentence, dir, layer, head]
        # the chosen rows by index_select: the same rows as a boolean mask, ~2x faster
        hits.index_add_(0, rows, self.pair_hits.index_select(0, pick).double())
        n_arcs = torch.zeros(len(ids), dtype=torch.float64).index_add_(
            0, rows, self.pair_arcs[pick])
        offsets, columns = torch.unique(self.arc_offset[arcs], return_inverse=True)
        arc_rows = torch.searchsorted(ids, self.arc_sentence[arcs])
        counts = torch.zeros(len(ids), len(offsets), dtype=torch.float64)
        counts.index_put_((arc_rows, columns), torch.ones(len(arc_rows), dtype=torch.float64),
                          accumulate=True)  # [sentence, offset]
        return RelationArcs(ids, n_arcs, hits, offsets, counts)

    def kept(self, keep: torch.Tensor) -> SentenceArcs:
        """The pairs and arcs of the sentences ``keep`` only, in their order: every group of
        it is the group of those sentences (the masks made once, not once per relation)."""
        pairs = _members(self.pair_sentence, keep).nonzero()[:, 0]  # [pair kept]
        arcs = _members(self.arc_sentence, keep).nonzero()[:, 0]  # [arc kept]
        return SentenceArcs(
            relations=self.relations, sentences=self.sentences[_members(self.sentences, keep)],
            pair_sentence=self.pair_sentence[pairs], pair_relation=self.pair_relation[pairs],
            pair_arcs=self.pair_arcs[pairs], pair_hits=self.pair_hits.index_select(0, pairs),
            arc_sentence=self.arc_sentence[arcs], arc_relation=self.arc_relation[arcs],
            arc_offset=self.arc_offset[arcs])


def _members(values: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """``torch.isin(values, keep)`` for corpus indices, by a table of the kept ones."""
    if not len(values) or not len(keep) or min(int(values.min()), int(keep.min())) < 0:
        return torch.isin(values, keep)
    table = torch.zeros(max(int(values.max()), int(keep.max())) + 1, dtype=torch.bool)
    table[keep] = True
    return table[values]


@dataclass
class RelationArcs:
    """One relation's arcs summed per sentence: the inputs of every bootstrap."""

    sentences: torch.Tensor  # [sentence] corpus indices
    arcs: torch.Tensor  # [sentence] arcs in the sentence
    hits: torch.Tensor  # [sentence, direction, layer, head]
    offsets: torch.Tensor  # [offset] distinct values of head - dependent
    offset_counts: torch.Tensor  # [sentence, offset] arcs at each offset

    @property
    def examples(self) -> int:
        return int(self.arcs.sum())
