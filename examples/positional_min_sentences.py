"""Why positional heads are tested only on at least 20 sentences: the bootstrap's coverage.

A head is positional when the one-sided test of ``share > 0.9`` (the share of its best
offset) passes after correction, from a bootstrap over **sentences**. On few sentences the
bootstrap barely varies (one sentence: every replicate is that sentence's share and the
interval has width 0; the normal test of earlier versions gave p = 0 whenever the share was
above 0.9, the t test has no degree of freedom there), so the test says more than the data
can. This simulates data sets whose true share is exactly the threshold
(0.9; a positional head must not be declared) and runs the library's own bootstrap and
test (``attnlens.stats.bootstrap``: Poisson weights, percentile interval, p from the
bootstrap standard error and Student's t with n - 1 degrees of freedom, n the sentences) on
each, and beside it the normal tail of earlier versions (``df = inf``).

Sentences of 10 query tokens (the sample treebank: 442 tokens / 43 sentences); per
sentence a share drawn from a Beta distribution of mean 0.9 and intra-sentence
correlation ``icc`` (0: tokens independent; on MiniLM / UD EWT dev the heads' positional
hits have a median icc of 0.00 and a largest of 0.21), then a binomial count. Printed per
number of sentences: the false-positive rate of one test at 0.05 and at 0.05 / 72 (what a
lone positional head among MiniLM's 72 heads must reach under BH or Holm), the same at
0.05 / 72 with the normal tail, the coverage of the 95 % interval, the share of zero-width
intervals, and the power at 0.05 / 72 of a head at share 0.97 (icc 0.05), t and normal.

    python examples/positional_min_sentences.py
"""

import math

import torch

from attnlens.stats.bootstrap import Inference, estimate_shares, p_above

TOKENS, THRESHOLD, SETS, CHUNKS = 10, 0.9, 1000, 5  # 5,000 data sets per cell


def simulate(n: int, share: float, icc: float) -> tuple[float, ...]:
    """P(p < 0.05), P(p < 0.05/72), the same two with the normal tail, coverage of the 95 %
    interval, zero-width share."""
    counts = torch.zeros(6)
    for chunk in range(CHUNKS):
        if icc > 0:  # Beta(share, icc) as a ratio of gammas
            a, b = share * (1 / icc - 1), (1 - share) * (1 / icc - 1)
            ga = torch.distributions.Gamma(torch.full((n, SETS), a), 1.0).sample()
            gb = torch.distributions.Gamma(torch.full((n, SETS), b), 1.0).sample()
            p = (ga / (ga + gb)).double()
        else:
            p = torch.full((n, SETS), share, dtype=torch.float64)
        hits = torch.binomial(torch.full_like(p, TOKENS), p)  # [sentence, data set]
        # each data set is one "share" column; every chunk has its own bootstrap seed
        est = estimate_shares(hits, torch.full_like(p, TOKENS), torch.arange(n),
                              Inference(bootstrap=1000, seed=chunk), keep_replicates=True)
        pv = p_above(est.value, est.reps, THRESHOLD, est.df)  # df = n - 1
        normal = p_above(est.value, est.reps, THRESHOLD, math.inf)
        counts += torch.tensor([float((pv < 0.05).sum()), float((pv < 0.05 / 72).sum()),
                                float((normal < 0.05).sum()), float((normal < 0.05 / 72).sum()),
                                float(((est.low <= share) & (share <= est.high)).sum()),
                                float((est.high == est.low).sum())])
    return tuple((counts / (SETS * CHUNKS)).tolist())


torch.manual_seed(0)
print("true share 0.9 = threshold: false positives (t, n - 1 df; normal), coverage; "
      "power of a 0.97 head")
print(f"{'sentences':>9} {'icc':>5} {'FP@0.05':>8} {'FP@0.05/72':>10} {'normal@0.05':>11} "
      f"{'normal@/72':>10} {'coverage':>8} {'width 0':>7} {'power':>6} {'normal':>6}")
for n in (1, 2, 3, 5, 10, 15, 20, 30, 50):
    power = simulate(n, 0.97, 0.05)
    for icc in (0.0, 0.05, 0.2):
        fp, fp72, nfp, nfp72, cover, zero = simulate(n, THRESHOLD, icc)
        shown = f"{power[1]:>6.3f} {power[3]:>6.3f}" if icc == 0.05 else ""
        print(f"{n:>9} {icc:>5.2f} {fp:>8.3f} {fp72:>10.4f} {nfp:>11.3f} {nfp72:>10.4f} "
              f"{cover:>8.3f} {zero:>7.3f} {shown}", flush=True)
