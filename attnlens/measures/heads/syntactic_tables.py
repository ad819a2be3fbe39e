"""Tables of ``SyntacticHeads``: accuracies with intervals, tested roles, held-out selection.

For every relation (with at least ``min_examples`` arcs) and "all relations":

- accuracy of every head and direction, pooled per ``Inference.pooling``, with a percentile
  interval from the bootstrap over sentences (``attnlens.stats.bootstrap``);
- the baseline (best fixed offset) and its interval; each replicate re-selects the best
  offset, so the baseline's own selection is part of its uncertainty;
- ``excess = accuracy - baseline`` with a **paired** interval (same sentences, same
  replicates) and the one-sided p-value of ``excess > margin`` (``p_above``: Student's t
  with as many degrees of freedom as the relation has sentences with arcs, minus 1);
- q-values over the family of every (head, relation, direction) tested: the two main
  directions of every relation except ``NOT_A_ROLE``; a head is syntactic when q < alpha.

Held-out selection (``held_out_selection``): the best head of each relation is chosen on
one set of sentences (another treebank, or a seeded half) and its accuracy reported on the
other, beside the head chosen on the reporting set itself.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import pandas as pd
import torch

from attnlens.measures.heads.syntactic_arcs import (
    ALL_RELATIONS,
    DIRECTIONS,
    MAIN_DIRECTIONS,
    NOT_A_ROLE,
    RelationArcs,
    SentenceArcs,
)
from attnlens.stats.bootstrap import (
    Inference,
    p_above,
    percentile_interval,
    poisson_weights,
    pooled,
    replicates,
)
from attnlens.stats.multiple_testing import adjust


class SyntacticCounts(Protocol):
    """What the tables read: a ``SyntacticHeads`` analyzer's counts and settings."""

    inference: Inference
    margin: float
    offsets: dict[str, Counter[int]]  # relation -> Counter(head - dependent)

    def relations(self) -> list[str]: ...

    def head_exists(self) -> torch.Tensor: ...

    def per_sentence(self) -> SentenceArcs: ...


ACCURACY_COLUMNS = [
    "relation", "direction", "layer", "head", "accuracy", "ci_low", "ci_high", "baseline",
    "excess", "excess_ci_low", "excess_ci_high", "min_excess", "examples", "n_sentences",
    "tested",
    "p_value", "q_value", "above_margin", "syntactic",
]
BEST_COLUMNS = [
    "relation", "direction", "examples", "n_sentences", "layer", "head", "accuracy", "ci_low",
    "ci_high", "baseline", "baseline_offset", "margin", "tested", "p_value", "q_value",
    "above_margin", "syntactic",
]
BASELINE_COLUMNS = ["relation", "direction", "examples", "n_sentences", "baseline_offset",
                    "baseline", "ci_low", "ci_high", "pooling"]
HELDOUT_COLUMNS = [
    "relation", "direction", "selected_on", "evaluated_on", "select_examples", "layer", "head",
    "select_accuracy", "examples", "n_sentences", "heldout_accuracy", "ci_low", "ci_high",
    "baseline", "eval_best_layer", "eval_best_head", "eval_best_accuracy",
]


@dataclass
class RelationStats:
    """Every estimate of one relation; arrays are ``[direction, layer, head]``."""

    accuracy: np.ndarray
    ci_low: np.ndarray
    ci_high: np.ndarray
    excess_low: np.ndarray
    excess_high: np.ndarray
    p_value: np.ndarray
    baseline: float
    baseline_offset: int  # head - dependent; head->dep reads it negated
    baseline_low: float
    baseline_high: float
    examples: int
    n_sentences: int


def best_offset(offsets: torch.Tensor, shares: torch.Tensor) -> tuple[int, float]:
    """The offset of highest share; ties: closest to 0, then negative (``baseline`` rule)."""
    pairs = zip(offsets.tolist(), shares.tolist(), strict=True)
    offset, share = max(pairs, key=lambda kv: (kv[1], -abs(kv[0]), -kv[0]))
    return int(offset), float(share)


def relation_stats(
    group: RelationArcs, inference: Inference, weights: torch.Tensor | None, margin: float,
    tests: bool = True,
) -> RelationStats:
    """Accuracies, baseline and the paired test of one relation's per-sentence arcs.

    ``tests=False`` leaves out what only the tests read (NaN): the excess intervals, the
    p-values and the baseline's interval (held-out selection reports accuracies only)."""
    n = len(group.sentences)
    shape = group.hits.shape[1:]  # [direction, layer, head]
    if not n:  # no arc on these sentences
        nan = np.full(shape, np.nan)
        return RelationStats(nan, nan, nan, nan, nan, nan, float("nan"), 0, float("nan"),
                             float("nan"), 0, 0)
    hits = group.hits.reshape(n, -1)  # [sentence, direction * layer * head]
    accuracy = pooled(hits, group.arcs, inference.pooling)
    offset_shares = pooled(group.offset_counts, group.arcs, inference.pooling)
    offset, base = best_offset(group.offsets, offset_shares)
    nan = torch.full_like(accuracy, torch.nan)
    low, high, ex_low, ex_high = nan, nan, nan, nan
    df = float((group.arcs > 0).sum()) - 1  # the sentences holding the relation's arcs - 1
    p = nan.clone()
    base_low = base_high = float("nan")
    if weights is not None and n:
        acc_reps = replicates(hits, group.arcs, weights, inference.pooling)  # [rep, share]
        low, high = percentile_interval(acc_reps, inference.level)
    if weights is not None and n and tests:
        base_reps = replicates(group.offset_counts, group.arcs, weights,
                               inference.pooling).amax(1)  # [rep]: best offset per replicate
        excess_reps = acc_reps - base_reps[:, None]
        ex_low, ex_high = percentile_interval(excess_reps, inference.level)
        p = p_above(accuracy - base, excess_reps, margin, df)
        b_low, b_high = percentile_interval(base_reps[:, None], inference.level)
        base_low, base_high = float(b_low[0]), float(b_high[0])

    def grid(t: torch.Tensor) -> np.ndarray:
        return t.reshape(shape).numpy()

    return RelationStats(grid(accuracy), grid(low), grid(high), grid(ex_low), grid(ex_high),
                         grid(p), base, offset, base_low, base_high, group.examples, n)


def _columns_of(sentences: torch.Tensor, weights: torch.Tensor | None, ids: torch.Tensor):
    if weights is None:
        return None
    return weights.index_select(1, torch.searchsorted(sentences, ids))  # weights[:, ...]


def all_relation_stats(
    analyzer: SyntacticCounts, data: SentenceArcs | None = None
) -> dict[str, RelationStats]:
    """``RelationStats`` of every reported relation, then ``ALL_RELATIONS``."""
    data = data if data is not None else analyzer.per_sentence()
    inference = analyzer.inference
    weights = (poisson_weights(data.sentences, inference.bootstrap, inference.seed)
               if inference.bootstrap else None)
    out = {}
    names = analyzer.relations() + ([ALL_RELATIONS] if analyzer.offsets else [])
    for relation in names:
        group = data.group(None if relation == ALL_RELATIONS else relation)
        cols = _columns_of(data.sentences, weights, group.sentences)
        out[relation] = relation_stats(group, inference, cols, analyzer.margin)
    return out


def _accuracy_frame(relation: str, stats: RelationStats, exists: np.ndarray,
                    margin: float) -> pd.DataFrame:
    d, layer, head = np.nonzero(np.broadcast_to(exists, stats.accuracy.shape))
    acc = stats.accuracy[d, layer, head]
    excess = acc - stats.baseline
    directions = np.array(DIRECTIONS)[d]
    return pd.DataFrame({
        "relation": relation, "direction": directions, "layer": layer, "head": head,
        "accuracy": acc, "ci_low": stats.ci_low[d, layer, head],
        "ci_high": stats.ci_high[d, layer, head], "baseline": stats.baseline,
        "excess": excess, "excess_ci_low": stats.excess_low[d, layer, head],
        "excess_ci_high": stats.excess_high[d, layer, head], "min_excess": margin,
        "examples": stats.examples,
        "n_sentences": stats.n_sentences, "tested": False,
        "p_value": stats.p_value[d, layer, head], "q_value": np.nan,
        "above_margin": acc >= stats.baseline + margin, "syntactic": False,
    })


def frames_eligible(accuracy: pd.DataFrame) -> np.ndarray:
    """Rows that can make a head syntactic: main directions of relations outside NOT_A_ROLE."""
    return (accuracy["direction"].isin(MAIN_DIRECTIONS)
            & ~accuracy["relation"].isin([*NOT_A_ROLE, ALL_RELATIONS])).to_numpy()


def syntactic_tables(analyzer: SyntacticCounts) -> dict[str, pd.DataFrame]:
    """``syntactic_accuracy``, ``syntactic_best`` and ``syntactic_baselines``."""
    inference = analyzer.inference
    stats = all_relation_stats(analyzer)
    exists = analyzer.head_exists().numpy()
    frames = [_accuracy_frame(r, s, exists, analyzer.margin) for r, s in stats.items()]
    accuracy = (pd.concat(frames, ignore_index=True) if frames
                else pd.DataFrame(columns=ACCURACY_COLUMNS))
    if frames:
        # a relation held by one sentence has no degree of freedom: NaN p, not in the family
        tested = (frames_eligible(accuracy) & (inference.bootstrap > 0)
                  & ~np.isnan(accuracy["p_value"].to_numpy()))
        accuracy["tested"] = tested
        q = np.full(len(accuracy), np.nan)
        q[tested] = adjust(accuracy["p_value"].to_numpy()[tested], inference.correction)
        accuracy["q_value"] = q
        if inference.bootstrap:
            accuracy["syntactic"] = tested & (q < inference.alpha)
        else:  # no bootstrap, no test: the point-estimate rule on the role-eligible rows
            eligible = frames_eligible(accuracy)
            accuracy["syntactic"] = eligible & accuracy["above_margin"].to_numpy()
    best, baselines = [], []
    # the table is ordered relation, direction, layer, head: the first row of each group's
    # maximum is the lowest (layer, head) among tied best heads
    top_rows = accuracy.loc[accuracy.groupby(["relation", "direction"], sort=False)[
        "accuracy"].idxmax()].set_index(["relation", "direction"])
    for relation, s in stats.items():
        for direction in DIRECTIONS:
            offset = -s.baseline_offset if direction == "head->dep" else s.baseline_offset
            baselines.append({
                "relation": relation, "direction": direction, "examples": s.examples,
                "n_sentences": s.n_sentences, "baseline_offset": offset, "baseline": s.baseline,
                "ci_low": s.baseline_low, "ci_high": s.baseline_high,
                "pooling": inference.pooling})
            top = top_rows.loc[(relation, direction)]
            best.append({
                "relation": relation, "direction": direction, "examples": s.examples,
                "n_sentences": s.n_sentences, "layer": int(top["layer"]),
                "head": int(top["head"]), "accuracy": top["accuracy"], "ci_low": top["ci_low"],
                "ci_high": top["ci_high"], "baseline": s.baseline, "baseline_offset": offset,
                "margin": top["accuracy"] - s.baseline, "tested": bool(top["tested"]),
                "p_value": top["p_value"], "q_value": top["q_value"],
                "above_margin": bool(top["above_margin"]), "syntactic": bool(top["syntactic"])})
    return {
        "syntactic_accuracy": accuracy[ACCURACY_COLUMNS],
        "syntactic_best": pd.DataFrame.from_records(best, columns=BEST_COLUMNS),
        "syntactic_baselines": pd.DataFrame.from_records(baselines, columns=BASELINE_COLUMNS),
    }


def split_sentences(
    sentences: torch.Tensor, fraction: float, seed: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """A seeded split of sorted corpus indices: (selection part, evaluation part), sorted."""
    gen = torch.Generator().manual_seed(seed)
    order = torch.randperm(len(sentences), generator=gen)
    n_select = round(fraction * len(sentences))
    first, second = sentences[order[:n_select]], sentences[order[n_select:]]
    return torch.sort(first).values, torch.sort(second).values


def _best_heads(accuracy: torch.Tensor, exists: torch.Tensor) -> list[tuple[int, int, float]]:
    """Per direction, (layer, head, accuracy) of the best existing head (lowest on ties)."""
    masked = torch.where(exists, accuracy, -torch.inf)  # [direction, layer, head]
    out = []
    for d in range(masked.shape[0]):
        flat = masked[d].reshape(-1)
        if not torch.isfinite(flat).any():
            out.append((-1, -1, float("nan")))
            continue
        layer, head = divmod(int(flat.argmax()), masked.shape[2])
        out.append((layer, head, float(flat.max())))
    return out


def held_out_selection(
    evaluate: SyntacticCounts,
    select: SyntacticCounts | None = None,
    fraction: float = 0.5,
    selected_on: str = "",
    evaluated_on: str = "",
) -> pd.DataFrame:
    """Best head per relation chosen on one set of sentences and reported on another.

    With ``select`` (the same model run on another treebank) heads are chosen on its arcs
    and reported on all of ``evaluate``'s; without it, ``evaluate``'s sentences are split
    (seeded by ``Inference.seed``): ``fraction`` of them choose, the rest report.
    """
    inference = evaluate.inference
    data = evaluate.per_sentence()
    exists = evaluate.head_exists()
    if select is None:
        keep_select, keep_eval = split_sentences(data.sentences, fraction, inference.seed)
        select_data = data.kept(keep_select)
        selected_on = selected_on or f"{len(keep_select)} sentences (seed {inference.seed})"
        evaluated_on = evaluated_on or f"the other {len(keep_eval)} sentences"
    else:
        select_data, keep_eval = select.per_sentence(), None
    eval_data = data if keep_eval is None else data.kept(keep_eval)
    all_weights = (poisson_weights(data.sentences, inference.bootstrap, inference.seed)
                   if inference.bootstrap else None)  # keyed by sentence: any subset's columns
    rows = []
    for relation in evaluate.relations() + ([ALL_RELATIONS] if evaluate.offsets else []):
        key = None if relation == ALL_RELATIONS else relation
        if key is not None and key not in select_data.relations:
            chosen_group = None
        else:
            chosen_group = select_data.group(key)
        ev = eval_data.group(key)
        weights = _columns_of(data.sentences, all_weights, ev.sentences)
        ev_stats = relation_stats(ev, inference, weights, evaluate.margin, tests=False)
        ev_best = _best_heads(torch.from_numpy(ev_stats.accuracy), exists)
        if chosen_group is not None and chosen_group.examples:
            acc = pooled(chosen_group.hits.reshape(len(chosen_group.sentences), -1),
                         chosen_group.arcs, inference.pooling)
            chosen = _best_heads(acc.reshape(chosen_group.hits.shape[1:]), exists)
            select_examples = chosen_group.examples
        else:
            chosen, select_examples = [(-1, -1, float("nan"))] * len(DIRECTIONS), 0
        for d, direction in enumerate(DIRECTIONS):
            if direction not in MAIN_DIRECTIONS:
                continue
            layer, head, select_acc = chosen[d]
            found = layer >= 0 and ev.examples > 0
            rows.append({
                "relation": relation, "direction": direction, "selected_on": selected_on,
                "evaluated_on": evaluated_on, "select_examples": select_examples,
                "layer": layer, "head": head, "select_accuracy": select_acc,
                "examples": ev.examples, "n_sentences": len(ev.sentences),
                "heldout_accuracy": ev_stats.accuracy[d, layer, head] if found else np.nan,
                "ci_low": ev_stats.ci_low[d, layer, head] if found else np.nan,
                "ci_high": ev_stats.ci_high[d, layer, head] if found else np.nan,
                "baseline": ev_stats.baseline, "eval_best_layer": ev_best[d][0],
                "eval_best_head": ev_best[d][1], "eval_best_accuracy": ev_best[d][2],
            })
    return pd.DataFrame.from_records(rows, columns=HELDOUT_COLUMNS)
