"""A prune folder: the pruning curves of a ``PruneJob`` with their tables, chart, run record
and, on request, the structurally pruned model.

``prune_folder(model, tokenizer, job, out)`` is what `attnlens prune` writes, for a Python
user: ``prune_curve.csv/.md``, ``prune_scores.csv``, the ``prune_curve`` chart, per attention
type tables for encoder-decoder models, the L0 tables and charts (``--method l0``) and
``run.json``; ``job.export`` is written after. The command runs the same steps
(``prepare``, ``write_prune_folder``, ``export_pruned``) inside its own output folder.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attnlens.errors import ConfigError
from attnlens.measures.pruning.job import PruneJob, warn_pairs_as_data

Note = Callable[[str], None]


@dataclass
class PruneFolder:
    """What a pruning run produced: the curves (``result``: a ``PruneResult``), its metrics,
    the L0 summary (``--method l0``) and what the export wrote (None: no export)."""

    result: Any
    metrics: Any
    description: dict
    l0_summary: Any = None
    export_message: str | None = None


def default_orders(model, method: str) -> list[str]:
    """The orders when none is given: per attention type for encoder-decoder models."""
    from attnlens.model.protocol import has_several_attention_types

    if has_several_attention_types(model):
        return ["importance", "importance:encoder", "importance:decoder", "importance:cross",
                "random"]
    return ["importance", "random"] if method == "l0" else ["importance", "random", "confidence"]


def check_model_options(model, orders: list[str], export: Path | None) -> None:
    """Refuse what an encoder-decoder model cannot do (attention-statistic orders, export)."""
    from attnlens.model.protocol import has_several_attention_types, missing_parts

    if export is not None:
        missing = missing_parts(model, ["blocks"])
        if missing:
            raise ConfigError(f"--export removes heads from attnlens' own (native) model; "
                              f"{missing['blocks']}.")
    if not has_several_attention_types(model):
        return
    bad = [o for o in orders if o.partition(":")[0] in ("confidence", "entropy")]
    if bad:
        raise ConfigError(f"order {bad[0]!r} reads one stack's attention statistics; on an "
                          "encoder-decoder model use importance, random, loo or roles.")
    if export is not None:
        raise ConfigError("--export: structural pruning of encoder-decoder models is not "
                          "supported yet; prune_curve.csv lists the heads removed.")


def prepare(job: PruneJob, model, tokenizer, batch_size: int, max_length: int,
            dtype: str | None = None):
    """The loaded model's orders and checks, then the metrics: ``(metrics, description)``,
    the description being what the run was asked (saved with the curves; a resumed run
    compares it). ``dtype``: as the model was loaded (None: its parameters')."""
    from attnlens.metrics.factory import auto_metric, build_metrics

    if job.default_orders:
        job.settings.orders = default_orders(model, job.method)
    check_model_options(model, job.settings.orders, job.export)
    name = auto_metric(model, job.data) if job.metric == "auto" else job.metric
    warn_pairs_as_data(name, job.data_option)
    metrics = build_metrics(name, model, tokenizer, job.data, job.importance_data,
                            job.eval_fraction, job.split_seed, batch_size, max_length,
                            score_range=job.score_range)
    description = {
        "model": model.cfg.source.get("path"), "metric": name,
        "data": str(Path(job.data).resolve()),
        "importance_data": None if job.importance_data is None else str(
            Path(job.importance_data).resolve()),
        "split": metrics.split, "eval_fraction": job.eval_fraction,
        "split_seed": job.split_seed, "batch_size": batch_size, "max_length": max_length,
        "dtype": dtype or _dtype_name(model),
    }
    return metrics, description


def _dtype_name(model) -> str:
    return str(next(model.parameters()).dtype).removeprefix("torch.")


def write_prune_folder(job: PruneJob, model, metrics, description: dict, work: Path | None, *,
                       formats: Sequence[str] = ("svg",), resume: bool = False,
                       show_progress: bool = False, on_step: Callable[[dict], None] | None = None,
                       dist=None, started: float | None = None, note: Note | None = None):
    """Run the curves into ``work`` (continuing saved steps when ``resume``), then write
    their tables, chart, the L0 gates' tables (``job.l0``) and ``run.json``; returns a
    ``PruneFolder``. Under torchrun (``dist``) every rank evaluates its share and only rank 0
    (the one given ``work``) writes; the others get None."""
    from attnlens import distributed
    from attnlens.measures.pruning.pipeline import prune
    from attnlens.model.protocol import has_several_attention_types
    from attnlens.plots import pruning_curves
    from attnlens.runs.io import atomic_open, save_figure, write_table

    started = time.perf_counter() if started is None else started
    main = dist is None or dist.is_main
    result = prune(model, metrics.importance, metrics.evaluation, job.settings,
                   work if main else None, resume=resume, description=description,
                   show_progress=show_progress and main, on_step=on_step if main else None,
                   dist=dist)
    if dist is not None:
        distributed.finish(dist)
    if not main:
        return None
    name = description["metric"]
    write_table(result.curve, work, "prune_curve", formats=("md",))
    fig = pruning_curves(result.curve, metrics.evaluation.label,
                         f"{name} on held-out data vs heads pruned")
    save_figure(fig, work, "prune_curve", formats)
    if has_several_attention_types(model):
        write_attention_tables(model, result, work, note)
    l0_summary = None
    if job.l0 is not None:
        l0_summary = write_l0(model, metrics, job.l0, result, work, resume, description,
                              formats, show_progress)
    with atomic_open(work / "run.json") as handle:
        json.dump({**description, "baseline": result.baseline,
                   "seconds": round(time.perf_counter() - started, 1), "complete": True},
                  handle, indent=2)
    return PruneFolder(result, metrics, description, l0_summary)


def write_attention_tables(model, result, out: Path, note: Note | None = None) -> None:
    """Which attention type's heads go first (encoder-decoder models)."""
    from attnlens.measures.pruning.attention_tables import (
        attention_first,
        describe_rows,
        removed_by_attention,
    )
    from attnlens.runs.io import write_table

    write_table(describe_rows(model), out, "prune_rows")
    write_table(removed_by_attention(model, result.curve), out, "prune_by_attention")
    first = attention_first(model, result.scores)
    write_table(first, out, "prune_attention_first")
    for row in first.itertuples(index=False):
        (note or _silent)(
            f"  {row.order}: {row.attention} heads at mean rank {row.mean_rank:.2f} "
            f"(0 = pruned first); {row.first_quarter} of the first quarter "
            f"({row.first_quarter_if_even:.1f} if mixed evenly)")


def write_l0(model, metrics, settings, result, out: Path, resume: bool, description: dict,
             formats: Sequence[str], show_progress: bool):
    """Train the L0 gates for every lambda; tables and the chart beside the curves."""
    from attnlens.measures.pruning.l0_run import compare_with_curves, run_l0
    from attnlens.plots import l0_against_curves, l0_training_curves
    from attnlens.runs.io import save_figure, write_table

    summary, heads, curve = run_l0(model, metrics.importance, metrics.evaluation, settings,
                                   result.baseline, out, resume, description, show_progress)
    write_table(compare_with_curves(summary, result.curve), out, "l0_comparison")
    for table_name, table in (("l0_summary", summary), ("l0_heads", heads)):
        write_table(table, out, table_name, formats=("md",))
    fig = l0_against_curves(result.curve, summary, metrics.evaluation.label,
                            f"{description['metric']} on held-out data: L0 gates vs pruning "
                            "orders")
    save_figure(fig, out, "prune_l0", formats)
    save_figure(l0_training_curves(curve, "L0 gate training"), out, "l0_training", formats)
    return summary


def export_pruned(model, job: PruneJob, curve, folder, force: bool = False) -> str:
    """Structurally prune by the first order's curve (seed 0) after ``job.export_step`` (None:
    the last step), export it into ``folder`` (an ``OutputFolder``), and describe what was
    written."""
    from attnlens.head_names import head_name
    from attnlens.loaders.export import export_hf, pad_heads_to_uniform, removed_heads
    from attnlens.measures.pruning import final_mask, prune_heads

    order, step = job.settings.curves()[0][0], job.export_step
    last = int(curve[(curve["order"] == order) & (curve["seed"] == 0)]["step"].max())
    if step is not None and step > last:
        raise ConfigError(f"--export-step {step} is past the {order} curve's last step "
                          f"({last}: no more heads could be removed); the run is saved; rerun "
                          f"with --resume and --export-step 0 to {last}.")
    mask = final_mask(model, curve, order, seed=0, step=step)
    pruned = prune_heads(model, mask)
    export_hf(pruned, folder.given, overwrite=force)
    n_full = sum(p.numel() for p in pad_heads_to_uniform(pruned).parameters())
    n_after = sum(p.numel() for p in pruned.parameters())
    removed = removed_heads(pruned)
    listed = ", ".join(head_name(layer, head) for layer, heads in removed.items()
                       for head in heads) or "none"
    return (
        f"exported the {order} curve's model ({sum(pruned.heads_per_layer)} heads kept, per "
        f"layer {pruned.heads_per_layer}) to {folder.given}/: the folder holds it padded to full "
        f"size for transformers ({n_full:,} parameters; removed heads are zero heads, listed "
        f"in config.json's pruned_heads: {listed}); attnlens loads it compact ({n_after:,} "
        "parameters), each head keeping its number."
    )


def summary_lines(run: PruneFolder, out: Path, elapsed: float) -> list[str]:
    """What the command prints when the run ends (stderr)."""
    from attnlens.metrics.change import change_text

    result, label = run.result, run.metrics.evaluation.label
    lines = [f"unpruned {label}: {result.baseline:.4f} on "
             f"{run.metrics.evaluation.n_examples} held-out examples ({run.metrics.split})"]
    for (order, seed), rows in result.curve.groupby(["order", "seed"], sort=False):
        last = rows.iloc[-1]
        lines.append(f"  {order} (seed {seed}): {last['fraction_pruned']:.0%} pruned: {label} "
                     f"{change_text(result.baseline, last['metric'], last['change'])}")
    if run.export_message:
        lines.append(run.export_message)
    lines.append(f"wrote prune_curve.csv/.md, prune_scores.csv and the chart to {out}/ "
                 f"in {elapsed:.0f} s")
    if run.l0_summary is not None:
        for row in run.l0_summary.itertuples(index=False):
            lines.append(f"  L0 lambda {row[0]:g}: {row.n_kept} heads kept (per layer "
                         f"{row.kept_per_layer}): {label} "
                         f"{change_text(result.baseline, row.metric, row.change)}")
    return lines


def prune_folder(model, tokenizer, job: PruneJob, out: str | Path, *, batch_size: int = 32,
                 max_length: int | None = None, formats: Sequence[str] = ("svg",),
                 force: bool = False, show_progress: bool = False,
                 note: Note | None = None) -> PruneFolder:
    """Run ``job`` on ``model`` and write the prune folder ``out`` as `attnlens prune` does
    (published whole when the run ends; ``force`` replaces a non-empty folder), then the
    export if ``job.export`` is set. ``max_length`` None: the model's trained length."""
    from attnlens.loaders.checkpoint import resolve_checkpoint
    from attnlens.runs.outputs import OutputFolder

    started = time.perf_counter()
    job.check()
    source = model.cfg.source.get("path")
    protected = ([("the source model", resolve_checkpoint(source))]
                 if source and Path(source).is_dir() else [])
    target = OutputFolder(out, force=force, protected=protected).check()
    exporting = _export_folder(job, out, source, force, protected)
    if max_length is None:
        from attnlens.loaders.trained_length import default_max_length

        max_length = default_max_length(source)
    metrics, description = prepare(job, model, tokenizer, batch_size, max_length)
    with target.writing() as work:
        run = write_prune_folder(job, model, metrics, description, work, formats=formats,
                                 show_progress=show_progress, started=started, note=note)
    if exporting is not None:
        run.export_message = export_pruned(model, job, run.result.curve, exporting, force)
    return run


def _export_folder(job: PruneJob, out, source: str | None, force: bool, protected):
    """``job.export``'s folder, checked; its family too when the model came from a folder."""
    from attnlens.measures.pruning.job import export_target

    from_folder = bool(source) and Path(source).is_dir()
    return export_target(job, Path(out), source, force=force, protected=protected,
                         check_family=from_folder)


def _silent(message: str) -> None:
    pass
