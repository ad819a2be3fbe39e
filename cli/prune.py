"""`attnlens prune`: head importance, pruning curves on a real metric, structural export."""

from __future__ import annotations

from pathlib import Path

import typer
from attnlens.cli import options as opt
from rich.console import Console

console = Console(stderr=True)

METRIC_HELP = (
    "auto (from the model's head and the data), sts (pairs CSV sentence1,sentence2,score), "
    "mlm / lm (text file), accuracy (CSV text,label) or fidelity (text file, label-free)."
)

DataOpt = typer.Option(
    ..., "--data", help="Evaluation data (split in two unless --importance-data is given).",
    show_default=False,
)
ImportanceDataOpt = typer.Option(
    None, "--importance-data", show_default=False,
    help="Data for the importance scores; then --data is used whole for evaluation.",
)
ExportOpt = typer.Option(
    None, "--export", show_default=False,
    help="Write the structurally pruned model (first order, last step) as a Hugging Face "
    "checkpoint in this folder.",
)
PruneOutOpt = typer.Option(Path("attnlens-prune"), "--out", "-o", help="Output folder.")


def _export(model_obj, curve, order: str, step: int | None, export_dir: Path) -> str:
    """Structurally prune by one curve's mask, export it, and describe what was written."""
    from attnlens.loaders.export import export_hf
    from attnlens.pruning import final_mask, prune_heads

    mask = final_mask(model_obj, curve, order, seed=0, step=step)
    pruned = prune_heads(model_obj, mask)
    export_hf(pruned, export_dir)
    n_before = sum(p.numel() for p in model_obj.parameters())
    n_after = sum(p.numel() for p in pruned.parameters())
    return (
        f"exported the {order} curve's model ({sum(pruned.heads_per_layer)} heads, per layer "
        f"{pruned.heads_per_layer}; {n_after:,} of {n_before:,} parameters) to {export_dir}/"
    )


def prune(
    model: opt.OptionalStr = opt.ModelArg,
    metric: str = typer.Option("auto", "--metric", help=METRIC_HELP),
    data: Path = DataOpt,
    importance_data: opt.OptionalPath = ImportanceDataOpt,
    eval_fraction: float = typer.Option(
        0.5, "--eval-fraction", help="Share of --data held apart for evaluation when it is split."
    ),
    split_seed: int = typer.Option(0, "--split-seed", help="Seed of the split (and MLM masking)."),
    order: str = typer.Option(
        "importance,random,confidence", "--order",
        help="Comma-separated orders: importance, random, confidence, entropy, loo.",
    ),
    step: float = typer.Option(0.1, "--step", help="Fraction of all heads removed per step."),
    max_fraction: float = typer.Option(0.9, "--max-fraction", help="Stop at this fraction."),
    rescore: bool = typer.Option(
        False, "--rescore", help="Recompute the order after every step (Michel's exact mode)."
    ),
    min_heads_per_layer: int = typer.Option(1, "--min-heads-per-layer", min=0),
    seeds: int = typer.Option(3, "--seeds", min=1, help="Seeds of the random order (a band)."),
    abs_mode: str = typer.Option(
        "example", "--abs-mode", help="example: E|dL/dxi| per example (Michel's definition); "
        "batch: |sum over a batch| (their released code).",
    ),
    normalize: bool = typer.Option(
        True, "--normalize/--no-normalize", help="L2-normalise importance within each layer."
    ),
    export: opt.OptionalPath = ExportOpt,
    export_step: int | None = typer.Option(
        None, "--export-step", help="Export the model after this step instead of the last.",
        show_default=False,
    ),
    out: Path = PruneOutOpt,
    resume: bool = typer.Option(
        False, "--resume", help="Continue an interrupted run in --out (same options)."
    ),
    batch_size: int = typer.Option(32, "--batch-size", min=1, help="Examples per forward pass."),
    max_length: int = opt.MaxLengthOpt,
    device: str = opt.DeviceOpt,
    dtype: str = opt.DtypeOpt,
    allow_pickle: bool = opt.AllowPickleOpt,
    fmt: str = opt.FormatOpt,
    quiet: bool = opt.QuietOpt,
) -> None:
    """Rank MODEL's heads, prune them step by step while tracking a metric, export the result.

    Layers and heads are numbered from 0; removed heads are written as layer.head.
    """
    import json
    import time

    from attnlens import distributed
    from attnlens.errors import ConfigError
    from attnlens.loaders import load
    from attnlens.metrics.factory import METRIC_NAMES, auto_metric, build_metrics
    from attnlens.plots import pruning_curves
    from attnlens.pruning import PruneSettings
    from attnlens.pruning import prune as run_prune
    from attnlens.report.writer import atomic_open, check_output_dir, save_figure, write_table

    if metric not in ("auto", *METRIC_NAMES):
        raise ConfigError(f"unknown --metric {metric!r}; choose auto or one of "
                          f"{', '.join(METRIC_NAMES)}.")
    orders = [o.strip() for o in order.split(",") if o.strip()]
    settings = PruneSettings(orders=orders, step=step, max_fraction=max_fraction,
                             rescore=rescore, min_heads_per_layer=min_heads_per_layer,
                             seeds=seeds, abs_mode=abs_mode, normalize=normalize)
    settings.validate()
    formats = opt.figure_formats(fmt)
    started = time.perf_counter()
    ctx = distributed.context()  # torchrun: evaluations spread over the processes
    device = distributed.rank_device(device, ctx)
    distributed.init(ctx, device)
    model_obj, tokenizer = load(model, device=device, dtype=dtype, allow_pickle=allow_pickle)
    name = auto_metric(model_obj, data) if metric == "auto" else metric
    metrics = build_metrics(name, model_obj, tokenizer, data, importance_data, eval_fraction,
                            split_seed, batch_size, max_length)
    if ctx.is_main:
        check_output_dir(out)
    description = {
        "model": model_obj.cfg.source.get("path"),
        "metric": name,
        "data": str(data),
        "importance_data": None if importance_data is None else str(importance_data),
        "split": metrics.split,
        "eval_fraction": eval_fraction,
        "split_seed": split_seed,
        "batch_size": batch_size,
        "max_length": max_length,
        "dtype": dtype,
    }
    result = run_prune(model_obj, metrics.importance, metrics.evaluation, settings,
                       out if ctx.is_main else None, resume=resume, description=description,
                       show_progress=not quiet and ctx.is_main, dist=ctx)
    distributed.finish(ctx)
    if not ctx.is_main:
        return
    label = metrics.evaluation.label
    write_table(result.curve, out, "prune_curve", formats=("md",))
    fig = pruning_curves(result.curve, label, f"{name} on held-out data vs heads pruned")
    save_figure(fig, out, "prune_curve", formats)
    message = None
    if export is not None:
        message = _export(model_obj, result.curve, settings.curves()[0][0], export_step, export)
    elapsed = time.perf_counter() - started
    with atomic_open(out / "run.json") as handle:
        json.dump({**description, "baseline": result.baseline, "seconds": round(elapsed, 1),
                   "complete": True}, handle, indent=2)
    console.print(f"unpruned {label}: {result.baseline:.4f} on {metrics.evaluation.n_examples} "
                  f"held-out examples ({metrics.split})")
    for (o, seed), rows in result.curve.groupby(["order", "seed"], sort=False):
        last = rows.iloc[-1]
        console.print(f"  {o} (seed {seed}): {last['fraction_pruned']:.0%} pruned -> "
                      f"{last['metric']:.4f} ({last['change']:+.4f})")
    if message:
        console.print(message)
    console.print(f"wrote prune_curve.csv/.md, prune_scores.csv and the chart to {out}/ "
                  f"in {elapsed:.0f} s")


def register(app: typer.Typer) -> None:
    app.command("prune")(prune)
