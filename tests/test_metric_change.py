"""Metric changes are written in the metric's own direction (issue 28, item 6)."""

from __future__ import annotations

import pandas as pd

from attnlens.measures.pruning.findings import pruning
from attnlens.metrics.change import change_text


def test_a_rising_perplexity_is_plus_and_worse() -> None:
    # Metric.improvement is baseline - value for perplexity: -0.58 when it rises by 0.58
    assert change_text(2027.47, 2028.05, -0.58, digits=2) == "2027.47 → 2028.05, +0.58, worse"


def test_a_falling_perplexity_is_minus_and_better() -> None:
    assert change_text(10.0, 9.5, 0.5, digits=1) == "10.0 → 9.5, -0.5, better"


def test_accuracy_and_no_change() -> None:
    assert change_text(0.8, 0.75, -0.05, digits=2) == "0.80 → 0.75, -0.05, worse"
    assert change_text(0.8, 0.8, 0.0, digits=1) == "0.8 → 0.8, +0.0, unchanged"


def test_the_pruning_finding_names_the_direction() -> None:
    importance = pd.DataFrame({"layer": [0, 0], "head": [0, 1], "score": [2.0, 1.0]})
    curve = pd.DataFrame({"order": "importance", "seed": 0, "step": [0, 1, 2],
                          "n_pruned": [0, 1, 2], "fraction_pruned": [0.0, 0.5, 1.0],
                          "metric": [20.0, 21.5, 30.0], "change": [0.0, -1.5, -10.0]})
    (_, curve_finding) = pruning({"head_importance": importance, "prune_curve": curve})
    text = curve_finding.text()
    assert "(+1.5, worse)" in text, text
