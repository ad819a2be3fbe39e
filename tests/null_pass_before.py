"""The report's null-model pass as it was before null35 (6c762e5): the reference that
``tests/test_null35.py`` checks the new pass against and ``benchmarks/null_pass.py`` times
it against. Every null-control section's whole ``write`` on the null model, every forward
to the last layer."""

from __future__ import annotations

import copy
import dataclasses
import tempfile
from pathlib import Path

from attnlens.distributed import SINGLE, run_sharded
from attnlens.loaders import random_init
from attnlens.report.null_run import NullResult, sample_batches
from attnlens.runs.io import no_figures, no_table_files
from attnlens.runs.stopwatch import phase


def _old_cheap(section):
    twin = copy.copy(section)
    if hasattr(twin, "examples"):
        twin.examples = False
    inference = getattr(twin, "inference", None)
    if inference is not None and dataclasses.is_dataclass(inference):
        twin.inference = dataclasses.replace(inference, bootstrap=0)
    inner = getattr(twin, "section", None)
    if inner is not None:
        twin.section = _old_cheap(inner)
    return twin


def run_null_before(model, tokenizer, batches, sections, options, dist=SINGLE,
                    show_progress: bool = False) -> NullResult:
    """The null pass of 6c762e5 (its ``run_null`` less the distributed branches), timed in
    the same stopwatch phases as ``run_null``."""
    chosen = [_old_cheap(s) for s in sections if getattr(s, "null_control", False)]
    with phase("null model: initialisation"):
        null = random_init.random_init_copy(model, options.seed)
    sample = sample_batches(batches, options.max_sentences)
    n = sum(int(b.input_ids.shape[0]) for b in sample)
    with phase("null model: its pass over the corpus sample"):
        per_section = [s.analyzers(null.model, tokenizer) for s in chosen]
        run_sharded(null.model, sample, [a for g in per_section for a in g], dist, total=n,
                    show_progress=show_progress)
    result = NullResult(sections=[s.name for s in chosen], sentences=n)
    with (tempfile.TemporaryDirectory() as tmp, no_figures(), no_table_files(),
          phase("null model: its tables")):
        for section, group in zip(chosen, per_section, strict=True):
            staging = Path(tmp) / section.name
            staging.mkdir()
            result.tables.update(section.write(null.model, group, staging, ("svg",)).tables)
    return result
