"""The `attnlens analyze` pipeline: compute -> tables -> render.

One corpus pass feeds every section's analyzers; each section then writes its tables and
figures; they are filed under ``tables/`` and ``figures/``, ``run.json`` records the run,
and the page is rendered from those files alone (``attnlens.report.folder`` has the layout).
"""

from __future__ import annotations

import functools
import importlib
import json
import shutil
import tempfile
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from attnlens.data.batch import Batch
from attnlens.distributed import SINGLE, DistContext, run_sharded
from attnlens.measures.lm_heads.run import LmHeads
from attnlens.measures.registry import Measure, report_measures
from attnlens.model.protocol import has_several_attention_types
from attnlens.model.transformer import HookedTransformer
from attnlens.report.encoder_decoder import by_attention_type
from attnlens.report.figure_pool import figure_pool
from attnlens.report.folder import (
    FIGURES_DIR,
    NUMERIC_RECORD,
    RUN_FILE,
    TABLES_DIR,
    Report,
    SectionRecord,
    numeric_columns,
)
from attnlens.report.kv_heads import add_kv_head_column, grouped
from attnlens.report.null_run import NullOptions, NullResult, join_null, run_null
from attnlens.report.own_passes_beside import OwnPassesBeside
from attnlens.report.provenance import invoked_command, model_record, package_versions
from attnlens.report.sections import Section, SectionOutput
from attnlens.report.side_work import Claim, SideJob, side_job, side_workers_allowed
from attnlens.runs import stopwatch
from attnlens.runs.checkpointing import AnalysisCheckpoint
from attnlens.runs.io import atomic_open, check_output_dir, held_tables, write_table
from attnlens.stream.base import Analyzer

TIMED_METHODS = ("begin_batch", "update_layer", "end_batch", "update")


def section_class(measure: Measure) -> type[Section]:
    """The report section class a ``MEASURES`` entry names (in ``<measure>/section.py``)."""
    return getattr(importlib.import_module(measure.section_module), measure.section)


def default_sections(lm=None) -> list[Section]:
    """Every section `attnlens analyze` runs, in report order: the ``MEASURES`` entries with
    ``report=True``, each section built with its report defaults (``Section.for_report``);
    ``lm`` (an ``LmHeads`` with the command's options) replaces the language-model heads
    measure's defaults, and the head-roles section lists that measure's roles."""
    sections = [section_class(m).for_report() for m in report_measures()]
    by_name = {s.name: s for s in sections}
    lm_heads = by_name.get("lm_heads")
    if lm_heads is not None:
        if lm is not None:
            lm_heads.lm = lm
        if "heads" in by_name:
            by_name["heads"].lm = lm_heads
    return sections


@contextmanager
def timed(analyzers: Sequence[Analyzer], totals: dict[str, float], key: str) -> Iterator[None]:
    """Add the time ``analyzers`` spend in their update methods to ``totals[key]``."""
    totals.setdefault(key, 0.0)
    wrapped: list[tuple[Analyzer, str]] = []

    def wrap(method):
        def run(*args, **kwargs):
            start = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                totals[key] += time.perf_counter() - start
        return run

    for analyzer in analyzers:
        for name in TIMED_METHODS:
            if name not in vars(analyzer) and hasattr(analyzer, name):
                setattr(analyzer, name, wrap(getattr(analyzer, name)))
                wrapped.append((analyzer, name))
    try:
        yield
    finally:
        for analyzer, name in wrapped:
            delattr(analyzer, name)  # back to the class's method


def _file_outputs(staging: Path, out: Path, output: SectionOutput) -> tuple[list[str], list[str]]:
    """Move what a section wrote in ``staging`` into ``tables/`` and ``figures/``."""
    tables_dir, figures_dir = out / TABLES_DIR, out / FIGURES_DIR
    tables_dir.mkdir(exist_ok=True)
    figures_dir.mkdir(exist_ok=True)
    tables = list(output.tables)
    for path in sorted(staging.iterdir()):
        if path.name.startswith("."):
            continue
        target = tables_dir if path.suffix in (".csv", ".md", ".json") else figures_dir
        path.replace(target / path.name)
    output.figures = [figures_dir / p.name for p in output.figures]
    names = list(dict.fromkeys(p.stem for p in output.figures))
    return tables, names


def write_run_record(out: Path, record: dict[str, Any]) -> None:
    with atomic_open(out / RUN_FILE) as handle:
        json.dump(record, handle, indent=2, default=str)
        handle.write("\n")


def analyze(
    model: HookedTransformer,
    tokenizer,
    batches: Sequence[Batch],
    out_dir: str | Path,
    sections: Sequence[Section] | None = None,
    formats: tuple[str, ...] = ("svg",),
    show_progress: bool = True,
    corpus_name: str = "",
    options: dict[str, Any] | None = None,
    command: str = "",
    prune_dir: str | Path | None = None,
    dist: DistContext = SINGLE,
    checkpoint: AnalysisCheckpoint | None = None,
    null: NullOptions | None = None,
    example_pages: Callable[[HookedTransformer, Any, Path], list[Path]] | None = None,
    resolved_options: dict[str, Any] | None = None,
) -> list[SectionOutput]:
    """Run all sections' analyzers in one pass over ``batches``; write the report folder.

    Under ``torchrun`` (``dist`` active) each rank analyses its share of the batches; rank 0
    merges the states, writes and returns the outputs; other ranks return an empty list.
    ``checkpoint`` (one process only) saves the analyzers' states every N sentences and, when
    resuming, restores them and skips the batches they already hold. ``null`` (default:
    ``NullOptions()``, a random-init null model; ``NullOptions("none")`` turns it off) adds
    the null model's columns to every per-head table (``attnlens.report.null_run``).
    ``example_pages(model, tokenizer, out)``, when given, writes viewer pages of the head
    examples before the page is rendered (``attnlens.viewer.examples``; the commands pass it).
    ``resolved_options`` replace the recorded options' values where the command settled them
    after reading the model (``max_length`` and ``max_length_source`` for a defaulted
    ``--max-length``).
    """
    before = stopwatch.process_age()  # imports, model and tokenizer load, corpus
    out = check_output_dir(out_dir) if dist.is_main else Path(out_dir)
    if not command:  # inside any CLI command: its command line and options
        command, invoked = invoked_command()
        options = options or invoked
    sections = list(default_sections() if sections is None else sections)
    if has_several_attention_types(model):  # every section per attention type, tables with a column
        sections = [by_attention_type(s) for s in sections]
    start = time.perf_counter()
    # The language-model probes, the analyzers' own passes and what sections compute from
    # the weights alone (Section.start_beside) need nothing of the corpus pass: they run in
    # forked processes beside it (side_work.py, own_passes_beside.py)
    forked = side_workers_allowed(model, dist)
    per_section, probes = _analyzers_and_probes(model, tokenizer, sections, forked)
    beside, weights = None, []
    try:
        for section in sections:
            job = section.start_beside(model, forked)
            if job is not None:
                weights.append(job)
        everything = [a for group in per_section for a in group]
        beside = OwnPassesBeside(everything, model, batches,
                                 forked and _states_stay_in_memory(checkpoint)
                                 and not has_several_attention_types(model))
        in_pass = beside.in_pass(everything)
        n_sentences = sum(int(b.input_ids.shape[0]) for b in batches)
        seconds: dict[str, float] = {}
        if in_pass:
            with _all_timed(sections, per_section, seconds):
                pass_start = time.perf_counter()
                stream = batches if checkpoint is None else checkpoint.wrap(batches, in_pass)
                run_sharded(model, stream, in_pass, dist, total=n_sentences,
                            show_progress=show_progress, stop_when_fed=True)
                corpus_pass = time.perf_counter() - pass_start
        else:
            corpus_pass = 0.0
        null = NullOptions() if null is None else null
        null_result = None
        if null.on and batches:
            null_result = run_null(model, tokenizer, batches, sections, null, dist,
                                   show_progress=show_progress)
        if probes is not None and probes.claim is not None:
            probes.claim.open()  # this process's passes are over (_probes_beside)
        if not dist.is_main:
            return []
        last = _probe_readers(sections, probes) | {
            s.name for s, group in zip(sections, per_section, strict=True)
            if any(beside.holds(a) for a in group)}
        outputs, records = _write_sections(model, sections, per_section, out, formats, seconds,
                                           null_result, last, beside)
    finally:  # the children ended already, unless a failure came first
        if probes is not None:
            probes.cancel()
        if beside is not None:
            beside.cancel()
        for job in weights:
            job.cancel()
    with stopwatch.phase("example pages"):
        pages = example_pages(model, tokenizer, out) if example_pages is not None else []
    if prune_dir is not None:
        from attnlens.measures.pruning.section import attach_prune_run

        records.append(attach_prune_run(prune_dir, out / TABLES_DIR, out / FIGURES_DIR))
    total = time.perf_counter() - start
    record = {
        "attnlens": _version(),
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": command,
        "model": model_record(model),
        "corpus": corpus_name,
        "sentences": n_sentences,
        "processes": dist.world_size,
        "options": {**(options or {}), **(resolved_options or {})},
        "packages": package_versions(),
        "null": (null_result.record(total) if null_result is not None
                 else {"kind": "none" if not null.on else "not run (no corpus)"}),
        "timings": {
            "total": round(total, 2),
            "corpus pass (forward and every analyzer)": round(corpus_pass, 2),
            **({"null model pass (included in total)": round(null_result.seconds, 2)}
               if null_result is not None else {}),
            "fixed costs": fixed_costs(before, stopwatch.take()),
            "sections": {
                name: {"analyzers (inside the corpus pass)": round(
                    seconds.get(f"{name}.analyzers", 0.0), 2),
                    "tables and figures": round(seconds.get(f"{name}.write", 0.0), 2)}
                for name in (s.name for s in sections)},
        },
        "seconds": round(total, 2),
        "layers_and_heads_numbered_from": 0,
        "example_pages": len(pages),
        "sections": [r.to_json() for r in records],
        NUMERIC_RECORD: numeric_columns({n: t for o in outputs for n, t in o.tables.items()}),
    }
    write_run_record(out, record)
    began = time.perf_counter()
    Report(out).render()
    record["timings"]["fixed costs"]["page"] = round(
        time.perf_counter() - began, 2)
    write_run_record(out, record)
    return outputs


def _analyzers_and_probes(model, tokenizer, sections: Sequence[Section], forked: bool
                          ) -> tuple[list[list[Analyzer]], SideJob | None]:
    """Every section's analyzers (in report order) and the probes' job (``_probes_beside``),
    started as soon as the language-model heads' analyzers, which it reads, exist: before
    the other sections make theirs (``rarity``'s word list, ...). A failure after the start
    ends the job."""
    with stopwatch.phase("analyzers made"):
        made = {i: s.analyzers(model, tokenizer) for i, s in enumerate(sections)
                if s.name == "lm_heads"}
    probes = _probes_beside(model, sections, forked)
    try:
        with stopwatch.phase("analyzers made"):
            made.update({i: s.analyzers(model, tokenizer) for i, s in enumerate(sections)
                         if i not in made})
    except BaseException:
        if probes is not None:
            probes.cancel()
        raise
    return [made[i] for i in range(len(sections))], probes


def _probes_beside(model, sections, forked: bool) -> SideJob | None:
    """The language-model probes of the section that runs them (``LmHeads.synthetic_runs``)
    started in a forked process when ``forked``; that section's ``compute`` takes them from
    the job. Without a fork (None), ``compute`` runs them itself, as before. The null pass
    stays in this process: at one thread its float32 sums would round differently."""
    if not forked:
        return None
    for section in sections:
        lm = getattr(section, "lm", None)
        if (section.name == "lm_heads" and isinstance(lm, LmHeads) and lm.made_for(model)
                and lm.settings.probes):
            # The long probes go to whichever process reaches them first: the child after
            # the rest once this process's passes are over (``analyze`` opens the claim
            # then: at one thread beside them, the child would hold up their two-thread
            # products), while this process writes the tables that do not read them; or
            # this process when it needs them before that (the demo: the child is the one
            # it waits for). The same bits either way (one thread or two).
            long = Claim()
            job = side_job("language-model probes",
                           functools.partial(lm.synthetic_runs, model,
                                             long=long.take_when_open),
                           forked, claim=long)
            lm.use_synthetic_runs(job.result, long_here=long.take)
            return job
    return None


def _states_stay_in_memory(checkpoint: AnalysisCheckpoint | None) -> bool:
    """Whether no checkpoint saves or restores the analyzers' states (the analyzers run
    beside the pass would be missing from them)."""
    return checkpoint is None or (checkpoint.every is None and not checkpoint.resume)


def _probe_readers(sections: Sequence[Section], probes: SideJob | None) -> set[str]:
    """The sections whose tables wait for the probes run beside the pass (``probes``): the
    language-model heads section and those listing its roles (``lm``, the head roles)."""
    if probes is None:
        return set()
    lm = next((s for s in sections if s.name == "lm_heads"), None)
    return {s.name for s in sections
            if lm is not None and (s is lm or getattr(s, "lm", None) is lm)}


def fixed_costs(before: float | None, phases: dict[str, float]) -> dict[str, float]:
    """run.json's itemised fixed costs: what ran before ``analyze`` (the process's age at its
    start, less the phases the command timed: imports and start-up), then every phase timed
    (``attnlens.runs.stopwatch``)."""
    costs: dict[str, float] = {}
    if before is not None:
        timed = sum(phases.get(name, 0.0) for name in stopwatch.BEFORE_ANALYZE)
        costs["imports and start-up"] = round(max(0.0, before - timed), 2)
    return {**costs, **phases}


@contextmanager
def _all_timed(sections, per_section, seconds: dict[str, float]) -> Iterator[None]:
    with _nested([timed(group, seconds, f"{s.name}.analyzers")
                  for s, group in zip(sections, per_section, strict=True)]):
        yield


@contextmanager
def _nested(managers: list) -> Iterator[None]:
    if not managers:
        yield
        return
    with managers[0], _nested(managers[1:]):
        yield


def write_order(sections: Sequence[Section], last: Collection[str] = ()) -> list[int]:
    """The sections' indices in the order they write: report order, the sections named in
    ``last`` moved to the end (their own order kept)."""
    return sorted(range(len(sections)), key=lambda i: sections[i].name in last)


def _write_sections(model, sections, per_section, out: Path, formats, seconds,
                    null_result: NullResult | None = None, last: Collection[str] = (),
                    beside: OwnPassesBeside | None = None):
    """Each section writes into its own staging folder; then its files are filed.

    The sections named in ``last`` write after the others (``write_order``: those waiting
    for the language-model probes' side job or for analyzers run ``beside`` the pass, whose
    states a section takes just before it writes, so that the others' tables are made while
    they run); ``outputs`` and the records keep report order.

    Every table is written once, in its final form: a section's ``write_table`` calls are
    held back (``io.held_tables``) until the null columns (``join_null``) and a grouped-query
    model's ``kv_head`` column have been added to its tables."""
    staging_root = Path(tempfile.mkdtemp(dir=out, prefix=".sections-"))
    records: list[SectionRecord] = []
    kv = _kv_heads(model)
    joining = 0.0
    try:
        written: dict[int, tuple[SectionOutput, float, list[str]]] = {}
        with figure_pool():  # figures drawn in worker processes; all on disk after the block
            for i in write_order(sections, last):
                section = sections[i]
                staging = staging_root / section.name
                staging.mkdir()
                if beside is not None:
                    beside.take(per_section[i])
                began = time.perf_counter()
                with held_tables() as held:
                    output = section.write(model, per_section[i], staging, formats)
                joined = time.perf_counter()
                changed = [] if null_result is None else join_null(section, output, null_result)
                joining += time.perf_counter() - joined
                _write_held(output, held, changed, kv, staging)
                written[i] = output, time.perf_counter() - began, changed
            tables_done = time.perf_counter()
        in_order = [written[i] for i in range(len(sections))]
        outputs = [output for output, _, _ in in_order]
        write_times = [spent for _, spent, _ in in_order]
        if null_result is not None:  # run.json lists the null-joined tables in report order
            null_result.changed = [name for _, _, names in in_order for name in names]
        stopwatch.add("figures finished after the tables (figure workers)",
                      time.perf_counter() - tables_done)
        stopwatch.add("null columns added", joining)
        for section, output, spent in zip(sections, outputs, write_times, strict=True):
            tables, figures = _file_outputs(staging_root / section.name, out, output)
            notes = output.notes or [line.strip() for line in output.summary.splitlines()
                                     if line.strip() and not line.lstrip().startswith("|")]
            analyzers = seconds.get(f"{section.name}.analyzers", 0.0)
            seconds[f"{section.name}.write"] = spent
            records.append(SectionRecord(section.name, output.title or section.title,
                                         section.doc, tables, figures, notes,
                                         round(analyzers + spent, 2)))
    finally:
        shutil.rmtree(staging_root, ignore_errors=True)
    return outputs, records


def _kv_heads(model) -> tuple[Sequence[int], Sequence[int]] | None:
    """Query and key/value heads per layer of a grouped-query model (kv_heads.py), else None."""
    cfg = model.cfg
    heads = getattr(cfg, "heads_per_layer", None)
    kv = getattr(cfg, "kv_heads_per_layer", None)
    return (heads, kv) if grouped(heads, kv) else None


def _write_held(output: SectionOutput, held: dict, changed: Sequence[str], kv,
                staging: Path) -> None:
    """Write the tables a section's ``write_table`` calls held back (``held``: name ->
    {format: (table, folder)}), each once: those in ``changed`` as ``output.tables`` now has
    them (with null columns) as CSV, and as Markdown when the section wrote that; with a
    ``kv_head`` column (``kv``: grouped-query models) wherever a CSV is written; the others
    as the section gave them; a changed table the section did not write goes to ``staging``.
    The files are those the section's writes followed by rewrites of the changed tables
    would leave."""
    for name in list(dict.fromkeys([*held, *changed])):
        by_format = dict(held.get(name, {}))
        folder = next(reversed(by_format.values()))[1] if by_format else staging
        if name in changed:
            fresh = ("csv", "md") if "md" in by_format else ("csv",)
            by_format = {fmt: (output.tables[name], folder) for fmt in fresh}
        if kv is not None and "csv" in by_format and name in output.tables:
            table = output.tables[name]
            with_kv = add_kv_head_column(table, *kv)
            if with_kv is not table:
                output.tables[name] = with_kv
                fresh = ("csv", "md") if "md" in by_format else ("csv",)
                by_format = {fmt: (with_kv, folder) for fmt in fresh}
        for fmt, (table, where) in by_format.items():
            write_table(table, where, name, formats=(fmt,))


def _version() -> str:
    from attnlens import __version__

    return __version__

