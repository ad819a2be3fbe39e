"""Power of the syntactic-head test: why `attnlens heads --min-examples` defaults to 100.

A head is syntactic for a relation when the one-sided test of ``accuracy - baseline >
margin`` passes after correction. This prints the test's power (normal approximation,
``attnlens.stats.multiple_testing.margin_test_power``) for a head right on 60 % of the
arcs against a 30 % offset baseline, margin 0.10, at three per-test levels: one test alone
(5 %), the Benjamini-Hochberg threshold seen on MiniLM / UD EWT dev (about 19 discoveries
among 4,176 tests: 19 x 0.05 / 4176 = 2.3e-4), and Holm's first step over those 4,176
tests (0.05 / 4176).

    python examples/heads_power.py
"""

from attnlens.stats.multiple_testing import margin_test_power

LEVELS = {"one test (0.05)": 0.05, "BH seen (2.3e-4)": 19 * 0.05 / 4176,
          "Holm first (1.2e-5)": 0.05 / 4176}

print("power of the syntactic-head test: accuracy 0.60, baseline 0.30, margin 0.10")
print(f"{'arcs':>6} " + " ".join(f"{name:>20}" for name in LEVELS))
for n in (10, 20, 50, 70, 100, 200, 300, 500, 1000):
    row = " ".join(f"{margin_test_power(n, 0.6, 0.3, 0.10, a):>20.3f}" for a in LEVELS.values())
    print(f"{n:>6} {row}")
