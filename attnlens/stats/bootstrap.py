"""Uncertainty by a bootstrap over sentences: seeded weights, pooled shares, intervals, tests.

Arcs, tokens and words of one sentence are not independent, so the resampling unit is the
**sentence**. Analyzers keep, per sentence, the numerators (hits, summed per sentence and
head) and the denominator (arcs, tokens or words) of every share they report; a replicate
re-weights the sentences, so all replicates of every share cost one matrix product
``weights [replicate, sentence] @ numerators [sentence, share]`` instead of N passes.

Weights: the Poisson bootstrap (Hanley & MacGibbon 2006; Chamandy et al. 2012). Replicate
``b`` gives sentence ``s`` the weight ``w[b, s] ~ Poisson(1)``, drawn from a generator keyed
by the seed and ``s // BLOCK`` (``s`` the sentence's index in the corpus). A sentence's weight
therefore depends only on the seed and its index: every analyzer of a run, every shard of a
split run and every subset (a held-out half) sees the same draws, so intervals are paired
wherever two shares come from the same sentences. Like the multinomial bootstrap it is
asymptotically exact for smooth statistics of i.i.d. sentences.

Pooling (``--pooling``): ``token`` pools every example of every sentence (``sum hits / sum
examples``: Clark et al.'s and Voita et al.'s definition); ``sentence`` averages per-sentence
shares over the sentences that have at least one example (every sentence counts the same).
"""

from __future__ import annotations

import collections
import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from attnlens.errors import ConfigError
from attnlens.stats.student_t import t_sf

BLOCK = 256  # sentences per generator key
POOLINGS = ("token", "sentence")
CORRECTIONS = ("bh", "holm")


@dataclass(frozen=True)
class Inference:
    """How shares are pooled, resampled and tested (the statistics options of a run)."""

    bootstrap: int = 1000  # replicates; 0 turns intervals and tests off
    seed: int = 0
    level: float = 0.95  # two-sided interval level
    alpha: float = 0.05  # FDR (bh) or family-wise error (holm) of each family of role tests
    correction: str = "bh"
    pooling: str = "token"

    def __post_init__(self) -> None:
        if self.bootstrap < 0:
            raise ConfigError(f"--bootstrap must be 0 or more, not {self.bootstrap}.")
        if not 0 < self.level < 1 or not 0 < self.alpha < 1:
            raise ConfigError("the interval level and --alpha must lie strictly between 0 and 1.")
        if self.correction not in CORRECTIONS:
            raise ConfigError(f"--correction must be one of {', '.join(CORRECTIONS)}, "
                              f"not {self.correction!r}.")
        if self.pooling not in POOLINGS:
            raise ConfigError(f"--pooling must be one of {', '.join(POOLINGS)}, "
                              f"not {self.pooling!r}.")

    def settings(self) -> dict:
        return {"bootstrap": self.bootstrap, "seed": self.seed, "level": self.level,
                "alpha": self.alpha, "correction": self.correction, "pooling": self.pooling}


def _block_seed(seed: int, block: int) -> int:
    # one 63-bit generator seed per (seed, block); distinct for every pair in range
    return (seed * 1_000_003 + block) % (2**63 - 1)


# Poisson(1) cumulative probabilities P(K <= k), k = 0..24 (P(K > 24) < 1e-25): draws by
# inverse transform of float64 uniforms, an exact sampler several times faster than
# torch.poisson
_POISSON_CDF = torch.tensor(
    [sum(math.exp(-1) / math.factorial(j) for j in range(k + 1)) for k in range(25)],
    dtype=torch.float64,
)


@functools.lru_cache(maxsize=32)  # a pure function of its arguments: 1 MB per block
def _block_draws(seed: int, block: int, n: int) -> torch.Tensor:
    """``[n, BLOCK]`` Poisson(1) weights of the sentences ``block * BLOCK + 0..BLOCK-1``."""
    gen = torch.Generator().manual_seed(_block_seed(seed, block))
    uniform = torch.rand(n, BLOCK, generator=gen, dtype=torch.float64)  # [rep, BLOCK]
    draws = torch.zeros(n, BLOCK, dtype=torch.float32)
    for below in _POISSON_CDF[uniform.max() > _POISSON_CDF]:  # K = #{k: F(k) < u}
        draws += uniform > below
    return draws


# The last weights drawn, by (sentence indices, n, seed): a report's analyzers resample the
# same sentences one after another (head statistics, positional, rare-word, behaviour and
# syntactic heads: every sentence seen). Entries of at most _KEEP_ELEMENTS floats (32 MB).
_RECENT: collections.OrderedDict[tuple[bytes, int, int], torch.Tensor] = (
    collections.OrderedDict())
_KEEP = 2
_KEEP_ELEMENTS = 1 << 23


def poisson_weights(sentence_ids: torch.Tensor | Sequence[int], n: int, seed: int) -> torch.Tensor:
    """``[n, sentence]`` float32 Poisson(1) weights of the given corpus sentence indices
    (a copy of the last ones drawn when asked for the same again)."""
    ids = torch.as_tensor(sentence_ids, dtype=torch.long).reshape(-1).cpu()
    if n == 0 or not len(ids):
        return torch.empty(n, len(ids), dtype=torch.float32)
    if int(ids.min()) < 0:
        raise ConfigError("sentence indices must be non-negative.")
    key = (ids.numpy().tobytes(), n, seed)
    kept = _RECENT.get(key)
    if kept is not None:
        _RECENT.move_to_end(key)
        return kept.clone()
    out = _draw_weights(ids, n, seed)
    if out.numel() <= _KEEP_ELEMENTS:
        _RECENT[key] = out.clone()
        while len(_RECENT) > _KEEP:
            _RECENT.popitem(last=False)
    return out


def _draw_weights(ids: torch.Tensor, n: int, seed: int) -> torch.Tensor:
    """``poisson_weights`` of non-negative ``ids [sentence]``, from the blocks' draws."""
    out = torch.empty(n, len(ids), dtype=torch.float32)
    blocks = ids // BLOCK
    for block in torch.unique(blocks).tolist():
        cols = (blocks == block).nonzero()[:, 0]
        # out[:, cols] = draws[:, ids[cols] % BLOCK], by index ops (the same copies, ~3x faster)
        out.index_copy_(1, cols, _block_draws(seed, block, n).index_select(1, ids[cols] % BLOCK))
    return out


def pooled(num: torch.Tensor, den: torch.Tensor, pooling: str = "token") -> torch.Tensor:
    """Point estimate ``[share]`` (float64) from ``num [sentence, share]`` and ``den [sentence]``.

    ``den`` may also be ``[sentence, share]`` (a denominator per share).
    """
    num, den = num.double(), den.double()
    den2 = den if den.dim() == 2 else den[:, None].expand_as(num)
    if pooling == "token":
        return num.sum(0) / den2.sum(0)
    has = den2 > 0
    ratio = torch.where(has, num / den2.clamp_min(1e-300), torch.zeros_like(num))
    return ratio.sum(0) / has.sum(0)


def replicates(
    num: torch.Tensor, den: torch.Tensor, weights: torch.Tensor, pooling: str = "token"
) -> torch.Tensor:
    """``[replicate, share]`` bootstrap replicates of ``pooled(num, den)`` (float32 product).

    ``weights [replicate, sentence]`` from ``poisson_weights``; a replicate whose resampled
    sentences hold no example of a share is NaN there.
    """
    w = weights.to(torch.float32)
    num = num.to(torch.float32)
    den = den.to(torch.float32)
    if den.dim() == 1:
        if pooling == "token":
            return (w @ num) / (w @ den)[:, None]
        has = den > 0
        ratio = num[has] / den[has][:, None]  # [sentence with examples, share]
        return (w[:, has] @ ratio) / w[:, has].sum(1)[:, None]
    if pooling == "token":
        return (w @ num) / (w @ den)
    has = den > 0
    ratio = torch.where(has, num / den.clamp_min(1e-30), torch.zeros_like(num))
    return (w @ ratio) / (w @ has.to(torch.float32))


def percentile_interval(reps: torch.Tensor, level: float = 0.95) -> tuple[torch.Tensor, ...]:
    """(low, high) ``[share]`` percentile interval of ``reps [replicate, share]``; NaN-aware.

    Linear interpolation between order statistics (``numpy.nanquantile``'s default), from
    one sort of the replicates as computed (float32 products): NaN replicates sort last and
    are left out of each column's count.
    """
    # [share, replicate]: a C-ordered copy of the transpose sorted along its rows (the same
    # order statistics as a sort along the replicates' axis, ~1.5x faster), NaN last
    ordered = np.array(reps.detach().cpu().numpy().T, order="C")
    ordered.sort(axis=1)
    valid = (~np.isnan(ordered)).sum(1)  # [share]
    last = np.maximum(valid - 1, 0)
    columns = np.arange(ordered.shape[0])
    bounds = []
    for q in ((1 - level) / 2, (1 + level) / 2):
        pos = last * q  # fractional rank of the quantile
        lo = np.floor(pos).astype(np.int64)
        hi = np.minimum(lo + 1, last)
        below = ordered[columns, lo].astype(np.float64)
        above = ordered[columns, hi].astype(np.float64)
        value = below + (above - below) * (pos - lo)
        bounds.append(torch.from_numpy(np.where(valid > 0, value, np.nan)))
    return bounds[0], bounds[1]


def contributing_sentences(den: torch.Tensor, n_shares: int) -> torch.Tensor:
    """``[share]`` number of sentences with at least one example of each share.

    ``den`` is ``[sentence]`` (one denominator for every share) or ``[sentence, share]``.
    These are the clusters a share's bootstrap resamples: its test has one degree of
    freedom fewer (``p_above``).
    """
    has = den > 0
    if den.dim() == 1:
        return has.sum().expand(n_shares).clone()
    return has.sum(0)


def p_above(
    estimate: torch.Tensor,
    reps: torch.Tensor,
    reference: torch.Tensor | float,
    df: torch.Tensor | float,
) -> torch.Tensor:
    """One-sided p-values ``[share]`` for ``estimate > reference`` from the bootstrap.

    ``t = (estimate - reference) / se``, ``p = P(T_df > t)``: Student's t with ``df``
    degrees of freedom, the number ``n`` of sentences that hold an example of the share
    minus 1 (``contributing_sentences``; the share is a ratio of sentence sums, and the
    sentences are the clusters the bootstrap resamples). ``se`` is the standard deviation of
    the replicates times ``sqrt(n / (n - 1))``: the bootstrap's variance is a plug-in one
    (for a mean, ``(n - 1) / n`` times the unbiased ``s^2 / n`` whose ratio is exactly t
    with ``n - 1`` degrees of freedom), the small-sample factor that cluster-robust tests
    use with ``n - 1`` degrees of freedom. ``df = inf`` gives the normal tail ``1 - Phi(t)``
    with the bootstrap standard error as is, the test of earlier versions: with an error
    estimated from 20 to 50 sentences its tail is far too thin at the quantiles a
    correction over many tests needs (docs/heads.md). A tail count of replicates could not
    resolve p-values below ``1 / (N + 1)``; the standard error can
    (``attnlens.stats.student_t`` is accurate down to 1e-300). Where the replicates do
    not vary (``se = 0``), ``p`` is 0 when the estimate is above the reference and 1
    otherwise (the claim is strict). With ``df < 1`` (a share held by one sentence) there
    is nothing to test: NaN, as with fewer than two replicates.
    """
    estimate = estimate.double()
    reference = torch.as_tensor(reference, dtype=torch.float64).expand_as(estimate)
    df = torch.as_tensor(df, dtype=torch.float64).expand_as(estimate)
    se, count = _se_and_count(reps)
    gap = estimate - reference
    nu = df.clamp_min(1.0)
    t = gap / (se * torch.sqrt(1 + 1 / nu)).clamp_min(1e-300)  # sqrt(n / (n - 1))
    p = torch.where(se > 0, t_sf(t, nu), (gap <= 0).double())
    untestable = torch.isnan(estimate) | (count < 2) | ~(df >= 1)
    return torch.where(untestable, torch.nan, p)


def bootstrap_se(reps: torch.Tensor) -> torch.Tensor:
    """Standard deviation ``[share]`` of the replicates (NaN replicates left out)."""
    return _se_and_count(reps)[0]


def _se_and_count(reps: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(``bootstrap_se``, non-NaN replicates) ``[share]`` of ``reps``, from one NaN check."""
    r = reps.double()
    valid = ~torch.isnan(r)
    if bool(valid.all()):  # no NaN: the same sums without the masks (where(True, v, 0) is v)
        count = torch.full(r.shape[1:], r.shape[0], dtype=torch.long, device=r.device)
        mean = r.sum(0) / count.clamp_min(1)
        return (((r - mean) ** 2).sum(0) / (count - 1).clamp_min(1)).sqrt(), count
    count = valid.sum(0)
    mean = torch.where(valid, r, 0).sum(0) / count.clamp_min(1)
    se = (torch.where(valid, (r - mean) ** 2, 0).sum(0) / (count - 1).clamp_min(1)).sqrt()
    return se, count


@dataclass
class Shares:
    """Point estimates of shares with their bootstrap interval (NaN when bootstrap is off)."""

    value: torch.Tensor  # [share] float64
    low: torch.Tensor
    high: torch.Tensor
    reps: torch.Tensor | None  # [replicate, share] or None
    sentences: torch.Tensor  # [share] sentences with an example (contributing_sentences)

    @property
    def df(self) -> torch.Tensor:
        """``[share]`` degrees of freedom of each share's test: its sentences minus 1."""
        return self.sentences.double() - 1


def estimate_shares(
    num: torch.Tensor,
    den: torch.Tensor,
    sentence_ids: torch.Tensor | Sequence[int],
    inference: Inference,
    keep_replicates: bool = False,
) -> Shares:
    """Pooled shares of ``num [sentence, share] / den [sentence]`` with percentile intervals.

    ``den`` may also be ``[sentence, share]`` (a denominator per share).
    """
    value = pooled(num, den, inference.pooling)
    sentences = contributing_sentences(den, len(value))
    if inference.bootstrap == 0 or not len(value):
        nan = torch.full_like(value, torch.nan)
        return Shares(value, nan, nan.clone(), None, sentences)
    weights = poisson_weights(sentence_ids, inference.bootstrap, inference.seed)
    reps = replicates(num, den, weights, inference.pooling)
    low, high = percentile_interval(reps, inference.level)
    return Shares(value, low, high, reps if keep_replicates else None, sentences)


def threshold_tests(
    value: torch.Tensor,
    reps: torch.Tensor | None,
    threshold: float,
    inference: Inference,
    df: torch.Tensor | float,
    testable: bool = True,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(p, q, passed) ``[share]``: one family of one-sided tests ``share > threshold``.

    ``testable = False`` (the corpus holds too little for the family, a rule of the caller):
    nothing is tested, p and q are NaN and nothing passes.

    ``df`` ``[share]``: each share's contributing sentences minus 1 (``Shares.df``, taken
    at the same columns as ``value`` and ``reps``). Without replicates (``--bootstrap 0``)
    nothing is tested: p and q are NaN and ``passed`` is the point-estimate rule
    ``share >= threshold``.
    """
    from attnlens.stats.multiple_testing import adjust

    if reps is None or not testable:
        nan = torch.full_like(value, torch.nan, dtype=torch.float64)
        return nan, nan.clone(), (value >= threshold) & testable
    p = p_above(value, reps, threshold, df)
    q = torch.from_numpy(adjust(p.numpy(), inference.correction))
    return p, q, q < inference.alpha
