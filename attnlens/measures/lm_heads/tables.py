"""The measure's tables, pure functions of the analyzers' states (and of the weights).

- ``probe_scores``: ``layer, head, kv_head, measure, value, ci_low, ci_high, n_sequences``
  (and ``detail``) for the probe measures, ``retrieval`` and the copying scores;
- ``lm_role_tests``: the roles ``induction``, ``duplicate_token``, ``previous_token``,
  ``sink`` and ``retrieval`` as one-sided tests against ``ROLE_THRESHOLDS`` (the columns of
  ``attnlens.measures.heads.roles.role_tests``, so they join the other roles' table);
- ``sink_rows``: the ``sink`` measure as ``head_stats`` rows (sentence pooling);
- ``role_heads``: each role's heads, strongest first (what the causal checks ablate);
- ``original_numbers``: a table's heads and key/value heads by their numbers in the unpruned
  model (``attnlens.model.head_ids``); everything before it works on positions.
"""

from __future__ import annotations

import math

import pandas as pd

from attnlens.measures.lm_heads.probes import ProbeScores
from attnlens.measures.lm_heads.retrieval import RetrievalScores
from attnlens.measures.lm_heads.shares import SCORE_COLUMNS
from attnlens.measures.lm_heads.sinks import SINK_EPSILON, SinkScores
from attnlens.model.head_ids import HeadIds, renumber_heads

LM_ROLES = ("induction", "duplicate_token", "previous_token", "sink", "retrieval")
# A head has the role when its score is above the threshold (one-sided test, corrected over
# every head; docs/lm-heads.md says why each): 0.4 for the probe roles (more than ten times
# the ~0.03 a uniform head gives one key of a probe's second repeat, R = 24), Gu et al.'s
# eps = 0.3 for sinks, Wu et al.'s 0.1 for retrieval.
ROLE_THRESHOLDS = {"induction": 0.4, "duplicate_token": 0.4, "previous_token": 0.4,
                   "sink": SINK_EPSILON, "retrieval": 0.1}
ROLE_DETAILS = {"induction": "attention to i-R+1 (probes)",
                "duplicate_token": "attention to i-R (probes)",
                "previous_token": "attention to i-1 (probes)",
                "sink": "attention to the first token (corpus)",
                "retrieval": "copies the needle (haystacks)"}


def probe_scores(probes: ProbeScores | None, retrieval: RetrievalScores | None,
                 copying: pd.DataFrame | None, probe_detail: str = "",
                 retrieval_detail: str = "") -> pd.DataFrame:
    """The ``probe_scores`` table from whichever parts ran (see the module)."""
    parts = []
    if probes is not None:
        parts.append(probes.table().assign(detail=probe_detail))
    if retrieval is not None:
        parts.append(retrieval.table().assign(detail=retrieval_detail))
    if copying is not None:
        parts.append(copying)
    if not parts:
        return pd.DataFrame(columns=[*SCORE_COLUMNS, "detail"])
    return pd.concat(parts, ignore_index=True)[[*SCORE_COLUMNS, "detail"]]


def lm_role_tests(probes: ProbeScores | None, sinks: SinkScores | None,
                  retrieval: RetrievalScores | None, min_examples: int) -> pd.DataFrame:
    """Every head tested for every role whose data ran; one family per role."""
    parts = []
    if probes is not None:
        for role in ("induction", "duplicate_token", "previous_token"):
            parts.append(probes.role_tests(role, role, ROLE_THRESHOLDS[role], min_examples,
                                           ROLE_DETAILS[role]))
    if sinks is not None:
        parts.append(sinks.role_tests("sink", "sink", ROLE_THRESHOLDS["sink"], min_examples,
                                      ROLE_DETAILS["sink"]))
    if retrieval is not None:
        parts.append(retrieval.role_tests("retrieval", "retrieval",
                                          ROLE_THRESHOLDS["retrieval"], min_examples,
                                          ROLE_DETAILS["retrieval"]))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def sink_rows(sinks: SinkScores) -> pd.DataFrame:
    """``head_stats`` rows of measure ``sink``: layer, head, measure, value, level, ci_low,
    ci_high, pooling (always ``sentence``, Gu et al.'s definition)."""
    table = sinks.table()
    return pd.DataFrame({
        "layer": table["layer"], "head": table["head"], "measure": "sink",
        "value": table["value"], "level": "token", "ci_low": table["ci_low"],
        "ci_high": table["ci_high"], "pooling": "sentence",
    })


def sink_rate(sinks: SinkScores, epsilon: float = SINK_EPSILON) -> float:
    """Gu et al.'s Sink-rate: the share of heads whose sink score exceeds ``epsilon``."""
    values = sinks.table()["value"].to_numpy()
    return float((values > epsilon).mean()) if len(values) else math.nan


def role_heads(tests: pd.DataFrame, view: str = "tested") -> dict[str, list[tuple[int, int]]]:
    """Per LM role, the heads granted it (``tested``: q < alpha; ``uncorrected``: the point
    rule), strongest score first."""
    column = "passed" if view == "tested" else "above_rule"
    found: dict[str, list[tuple[int, int]]] = {}
    if tests.empty:
        return found
    for role in LM_ROLES:
        rows = tests[(tests["role"] == role) & tests[column].astype(bool)]
        rows = rows.sort_values("value", ascending=False, kind="stable")
        found[role] = [(int(a), int(b)) for a, b in zip(rows["layer"], rows["head"],
                                                          strict=True)]
    return found


def original_numbers(table: pd.DataFrame, head_ids: HeadIds | None,
                     group_sizes: list[int]) -> pd.DataFrame:
    """``table`` with its ``head`` column as original head numbers and its ``kv_head`` column
    as original key/value head numbers (``head // group_size``: a pruned grouped-query layer
    loses whole groups, so its group size is the unpruned one); unchanged without pruning."""
    renumbered = renumber_heads(table, head_ids)
    if head_ids is None or "kv_head" not in renumbered.columns or renumbered.empty:
        return renumbered
    sizes = renumbered["layer"].map(dict(enumerate(group_sizes)))
    renumbered["kv_head"] = (renumbered["head"] // sizes).astype(renumbered["kv_head"].dtype)
    return renumbered
