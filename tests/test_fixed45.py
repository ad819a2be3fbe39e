"""fixed45: the syntactic tables' relation groups and p-values' standard errors, the same
bits as the code they replaced (kept here as references)."""

from __future__ import annotations

import pytest
import torch

from attnlens.measures.heads.syntactic_arcs import SentenceArcs, _members
from attnlens.stats.bootstrap import _se_and_count, bootstrap_se, p_above
from attnlens.stats.student_t import t_sf


def _old_bootstrap_se(reps: torch.Tensor) -> torch.Tensor:
    r = reps.double()
    valid = ~torch.isnan(r)
    count = valid.sum(0)
    mean = torch.where(valid, r, 0).sum(0) / count.clamp_min(1)
    return (torch.where(valid, (r - mean) ** 2, 0).sum(0) / (count - 1).clamp_min(1)).sqrt()


def _bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """The same bits (NaN included): floats compared as integers of their width."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.is_floating_point():
        ints = {torch.float64: torch.int64, torch.float32: torch.int32}[a.dtype]
        a, b = a.contiguous().view(ints), b.contiguous().view(ints)
    return torch.equal(a, b)


def _reps(shape, nan_share: float = 0.0, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    reps = torch.rand(shape, generator=gen, dtype=torch.float32) * 0.3 + 0.2
    reps[torch.rand(shape, generator=gen) < nan_share] = torch.nan
    return reps


@pytest.mark.parametrize("reps", [
    _reps((1000, 648)), _reps((1000, 37), 0.01), _reps((1000, 5), 1.0), _reps((1, 7)),
    _reps((0, 4)), _reps((3, 2000)).T, _reps((1000, 648))[:, ::3], torch.full((50, 3), 0.25),
])
def test_standard_error_and_count_as_before(reps):
    se, count = _se_and_count(reps)
    assert _bits(se, _old_bootstrap_se(reps))
    assert _bits(bootstrap_se(reps), _old_bootstrap_se(reps))
    assert _bits(count, (~torch.isnan(reps)).sum(0))


def _old_p_above(estimate, reps, reference, df):
    estimate = estimate.double()
    reference = torch.as_tensor(reference, dtype=torch.float64).expand_as(estimate)
    df = torch.as_tensor(df, dtype=torch.float64).expand_as(estimate)
    se = _old_bootstrap_se(reps)
    count = (~torch.isnan(reps)).sum(0)
    gap = estimate - reference
    nu = df.clamp_min(1.0)
    t = gap / (se * torch.sqrt(1 + 1 / nu)).clamp_min(1e-300)
    p = torch.where(se > 0, t_sf(t, nu), (gap <= 0).double())
    untestable = torch.isnan(estimate) | (count < 2) | ~(df >= 1)
    return torch.where(untestable, torch.nan, p)


@pytest.mark.parametrize("nan_share", [0.0, 0.05, 0.999])
def test_p_values_as_before(nan_share):
    reps = _reps((1000, 200), nan_share, seed=1)
    estimate = torch.linspace(0.2, 0.6, 200, dtype=torch.float64)
    df = torch.arange(200, dtype=torch.float64) % 7
    for reference, degrees in ((0.3, 40.0), (0.35, df), (0.3, float("inf"))):
        assert _bits(p_above(estimate, reps, reference, degrees),
                     _old_p_above(estimate, reps, reference, degrees))


def _random_arcs(n_sentences: int = 60, n_relations: int = 4, seed: int = 0) -> SentenceArcs:
    """Arcs of a random corpus: several relations per sentence, sentences out of order."""
    gen = torch.Generator().manual_seed(seed)
    order = torch.randperm(3 * n_sentences, generator=gen)[:n_sentences]  # corpus indices
    pair_sentence, pair_relation, arc_sentence, arc_relation = [], [], [], []
    for sentence in order.tolist():
        for relation in range(n_relations):
            arcs = int(torch.randint(0, 3, (1,), generator=gen))
            if arcs:
                pair_sentence.append(sentence)
                pair_relation.append(relation)
                arc_sentence += [sentence] * arcs
                arc_relation += [relation] * arcs
    n_pairs = len(pair_sentence)
    hits = torch.rand(n_pairs, 3, 2, 4, generator=gen) * 3
    return SentenceArcs(
        relations=[f"r{i}" for i in range(n_relations)],
        sentences=torch.sort(order).values,
        pair_sentence=torch.tensor(pair_sentence),
        pair_relation=torch.tensor(pair_relation),
        pair_arcs=torch.tensor([float(arc_sentence.count(s)) for s in pair_sentence],
                               dtype=torch.float64),
        pair_hits=hits,
        arc_sentence=torch.tensor(arc_sentence),
        arc_relation=torch.tensor(arc_relation),
        arc_offset=torch.randint(-5, 6, (len(arc_sentence),), generator=gen),
    )


def _old_group(data: SentenceArcs, relation: str | None, keep: torch.Tensor | None = None):
    """``SentenceArcs.group`` before fixed45: boolean masks, ``keep`` applied per call."""
    if relation is None:
        pairs = torch.ones_like(data.pair_sentence, dtype=torch.bool)
        arcs = torch.ones_like(data.arc_sentence, dtype=torch.bool)
    else:
        r = data.relations.index(relation)
        pairs, arcs = data.pair_relation == r, data.arc_relation == r
    if keep is not None:
        pairs &= _members(data.pair_sentence, keep)
        arcs &= _members(data.arc_sentence, keep)
    ids, rows = torch.unique(data.pair_sentence[pairs], return_inverse=True)
    hits = torch.zeros((len(ids), *data.pair_hits.shape[1:]), dtype=torch.float64)
    hits.index_add_(0, rows, data.pair_hits[pairs].double())
    n_arcs = torch.zeros(len(ids), dtype=torch.float64).index_add_(0, rows,
                                                                   data.pair_arcs[pairs])
    offsets, columns = torch.unique(data.arc_offset[arcs], return_inverse=True)
    arc_rows = torch.searchsorted(ids, data.arc_sentence[arcs])
    counts = torch.zeros(len(ids), len(offsets), dtype=torch.float64)
    counts.index_put_((arc_rows, columns), torch.ones(len(arc_rows), dtype=torch.float64),
                      accumulate=True)
    return ids, n_arcs, hits, offsets, counts


def _fields(group) -> tuple[torch.Tensor, ...]:
    return group.sentences, group.arcs, group.hits, group.offsets, group.offset_counts


def _same(a, b) -> bool:
    return all(_bits(x, y) for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_groups_as_before(seed):
    data = _random_arcs(seed=seed)
    for relation in [*data.relations, None]:
        assert _same(_fields(data.group(relation)), _old_group(data, relation))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_groups_of_kept_sentences_as_groups_restricted_per_call(seed):
    data = _random_arcs(seed=seed)
    gen = torch.Generator().manual_seed(seed)
    half = data.sentences[torch.randperm(len(data.sentences), generator=gen)[:25]]
    for keep in (half, data.sentences, data.sentences[:0], torch.tensor([10_000])):
        kept = data.kept(keep)
        assert kept.relations == data.relations
        assert torch.equal(kept.sentences, data.sentences[torch.isin(data.sentences, keep)])
        for relation in [*data.relations, None]:
            assert _same(_fields(kept.group(relation)), _old_group(data, relation, keep))
