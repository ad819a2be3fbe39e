"""A report's null-model pass: every section's tables on a randomly initialised copy of the
model, and the ``null_mean`` / ``null_low`` / ``null_high`` columns they give the real tables.

``--null random-init`` (the default of every command that writes a report) builds the copy
(``attnlens.loaders.random_init``: same config and tokenizer, transformers' own
initialisation, seeded), runs the sections that describe heads (``Section.null_control``)
over at most ``NULL_SENTENCES`` sentences evenly spaced by corpus index (any batching)
with bootstrap replicates off (only the point values are used), each forward stopped once
the analyzers have what they read (``stop_when_fed``: the last layer's output projection and
MLP are not run), and computes their tables without figures: only the tables a null column
can come from where a section says which (``Section.null_twin``, ``Section.null_tables``:
the heads section leaves out its role tests, held-out selection, Table 1 and clustering;
rollout its whole-sentence matrices and attention flow). ``join_null`` then adds the null
columns (``attnlens.stats.null``) to each per-head and per-layer table the two runs share,
before that table is written (once). ``--null none`` leaves all of this out. What it cost
is recorded in ``run.json`` (``null``) and on the page.
"""

from __future__ import annotations

import copy
import dataclasses
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attnlens.errors import ConfigError

if TYPE_CHECKING:
    import pandas as pd

NULL_KINDS = ("random-init", "none")
NULL_SENTENCES = 512  # sentences of the null pass: its heads' spread, not the corpus, matters


@dataclass(frozen=True)
class NullOptions:
    """``--null`` and ``--null-seed``."""

    kind: str = "random-init"
    seed: int = 0
    max_sentences: int = NULL_SENTENCES

    def __post_init__(self) -> None:
        if self.kind not in NULL_KINDS:
            raise ConfigError(f"--null must be one of {', '.join(NULL_KINDS)}, not "
                              f"{self.kind!r}.")
        if self.max_sentences < 1:
            raise ConfigError("the null model needs at least one sentence.")

    @property
    def on(self) -> bool:
        return self.kind != "none"


@dataclass
class NullResult:
    """The null pass's tables (by name) and what it was."""

    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    describe: str = ""
    initialisation: str = ""
    seed: int = 0
    sentences: int = 0
    seconds: float = 0.0
    sections: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)

    def record(self, total: float | None = None) -> dict[str, Any]:
        """The ``null`` entry of run.json."""
        entry = {"kind": "random-init", "seed": self.seed, "initialisation": self.describe,
                 "sentences": self.sentences, "sections": self.sections,
                 "tables": self.changed, "seconds": round(self.seconds, 2)}
        if total:
            entry["share_of_run"] = round(self.seconds / total, 3)
        return entry


def sample_batches(batches: Sequence, max_sentences: int) -> list:
    """At most ``max_sentences`` sentences of ``batches`` (all when fewer): those evenly
    spaced by corpus index (``stream.sentence_sample``, the same for any batching), each
    batch cut to its sampled sentences; batches without a sampled sentence are left out."""
    from attnlens.stream.sentence_sample import sample_batch

    batches = list(batches)
    if sum(int(b.input_ids.shape[0]) for b in batches) <= max_sentences:
        return batches
    chosen, seen = [], 0
    for batch in batches:
        sub, _ = sample_batch(batch, None, max_sentences, seen)
        seen += batch.size
        if sub.size:
            chosen.append(sub)
    return chosen


def _cheap(section):
    """A copy of ``section``'s null twin (``Section.null_twin``) with bootstrap replicates
    and examples off (the null needs point values)."""
    twin = copy.copy(section.null_twin())
    if hasattr(twin, "examples"):
        twin.examples = False  # example sentences are the model's, not the null's
    inference = getattr(twin, "inference", None)
    if inference is not None and dataclasses.is_dataclass(inference):
        twin.inference = dataclasses.replace(inference, bootstrap=0)
    inner = getattr(twin, "section", None)
    if inner is not None:
        twin.section = _cheap(inner)
    return twin


def run_null(model, tokenizer, batches: Sequence, sections: Sequence, options: NullOptions,
             dist, show_progress: bool = False) -> NullResult | None:
    """The null pass (module docstring); None on ranks other than 0 of a torchrun run."""
    from attnlens.distributed import run_sharded
    from attnlens.loaders.random_init import random_init_copy
    from attnlens.runs.io import no_figures, no_table_files
    from attnlens.runs.stopwatch import phase

    start = time.perf_counter()
    chosen = [_cheap(s) for s in sections if getattr(s, "null_control", False)]
    if not chosen:
        return NullResult(seed=options.seed)
    with phase("null model: initialisation"):
        null = random_init_copy(model, options.seed)
    sample = sample_batches(batches, options.max_sentences)
    n = sum(int(b.input_ids.shape[0]) for b in sample)
    with phase("null model: its pass over the corpus sample"):
        per_section = [s.analyzers(null.model, tokenizer) for s in chosen]
        everything = [a for group in per_section for a in group]
        if everything:
            run_sharded(null.model, sample, everything, dist, total=n,
                        show_progress=show_progress, stop_when_fed=True)
    if not dist.is_main:
        return None
    result = NullResult(describe=null.describe, initialisation=null.initialisation,
                        seed=options.seed, sentences=n, sections=[s.name for s in chosen])
    # Tables stay in memory, figures are not drawn: only the tables' values are used.
    with (tempfile.TemporaryDirectory(prefix="attnlens-null-") as tmp, no_figures(),
          no_table_files(), phase("null model: its tables")):
        for section, group in zip(chosen, per_section, strict=True):
            staging = Path(tmp) / section.name
            staging.mkdir()
            result.tables.update(section.null_tables(null.model, group, staging))
    result.seconds = time.perf_counter() - start
    return result


def null_value_column(table: pd.DataFrame, declared: str) -> str | None:
    """The column the null describes: the declared one, else ``value`` of a long table."""
    if declared == "none":
        return None
    if declared:
        return declared if declared in table.columns else None
    if "layer" in table.columns and {"measure", "value"} <= set(table.columns):
        return "value"
    return None


def join_null(section, output, result: NullResult) -> list[str]:
    """Give every table of ``output`` (``section``'s) that the null pass also wrote its null
    columns, in memory (``report.analyze`` then writes each table once). Returns the names of
    the tables changed, also added to ``result.changed``."""
    from attnlens.stats.null import add_null_columns

    if section.name not in result.sections:
        return []
    changed = []
    for name, table in list(output.tables.items()):
        if name not in result.tables or "layer" not in table.columns:
            continue
        doc = section.doc.table_doc(name)
        value = null_value_column(table, doc.null)
        if value is None:
            continue
        with_null = add_null_columns(table, result.tables[name], value, doc.keys)
        if "null_high" not in with_null.columns:
            continue
        output.tables[name] = with_null
        changed.append(name)
    result.changed += changed
    return changed


def null_note(run: dict[str, Any]) -> str:
    """One line on a report's null model and what it cost (from its run.json), or ''."""
    null = run.get("null") or {}
    if "seconds" not in null:
        return ""
    share = (f", {100 * null['share_of_run']:.0f} % of the run" if null.get("share_of_run")
             else "")
    return (f"Null model: {null.get('initialisation', 'random-init')}; "
            f"{null.get('sentences', 0)} sentences; {null['seconds']:.1f} s{share} "
            "(--null none leaves it out).")
