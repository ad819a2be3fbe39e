"""`attnlens prune`: head importance, pruning curves on a real metric, structural export."""

from __future__ import annotations

import time
from pathlib import Path

import typer
from attnlens.cli.prune_extras import ORDER_HELP
from attnlens.cli.runner import CommandRun, command

METRIC_HELP = (
    "auto (from the model's head and the data), sts (pairs CSV sentence1,sentence2,score), "
    "mlm / lm (text file), accuracy (CSV text,label), fidelity (text file, label-free) or "
    "seq2seq (encoder-decoder models: source<TAB>target lines)."
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
ExportStepOpt = typer.Option(
    None, "--export-step", show_default=False,
    help="Export the model after this step instead of the last.",
)
MetricOpt = typer.Option("auto", "--metric", help=METRIC_HELP)
EvalFractionOpt = typer.Option(
    0.5, "--eval-fraction", help="Share of --data held apart for evaluation when it is split."
)
SplitSeedOpt = typer.Option(0, "--split-seed", help="Seed of the split (and MLM masking).")
OrderOpt = typer.Option(None, "--order", help=ORDER_HELP, show_default=False)
MethodOpt = typer.Option(
    "curves", "--method",
    help="curves: prune step by step in each --order; l0: also train Hard Concrete head gates "
    "(Voita et al. 2019) for each --lambda and put them on the curves' chart.",
)
LambdaOpt = typer.Option(
    "0.001,0.003,0.01,0.03", "--lambda",
    help="--method l0: comma-separated penalties on the expected number of open gates.",
)
L0TemperatureOpt = typer.Option(
    2 / 3, "--l0-temperature", help="Hard Concrete temperature (Louizos: 2/3; Voita: 0.33).",
)
L0StretchOpt = typer.Option("-0.1,1.1", "--l0-stretch", help="Stretch interval l,r.")
L0StepsOpt = typer.Option(300, "--l0-steps", min=1, help="Gate training steps per lambda.")
L0LrOpt = typer.Option(0.05, "--l0-lr", help="Adam learning rate of log_alpha.")
L0InitOpt = typer.Option(
    3.0, "--l0-init", help="Initial log_alpha (3: every gate open with P ~ 0.99)."
)
RolesOpt = typer.Option(
    None, "--roles", show_default=False,
    help="--order roles: output folder of `attnlens heads` (its head_roles.csv).",
)
StepOpt = typer.Option(0.1, "--step", help="Fraction of all heads removed per step.")
MaxFractionOpt = typer.Option(0.9, "--max-fraction", help="Stop at this fraction.")
RescoreOpt = typer.Option(
    False, "--rescore", help="Recompute the order after every step (Michel's exact mode)."
)
MinHeadsOpt = typer.Option(1, "--min-heads-per-layer", min=0)
SeedsOpt = typer.Option(3, "--seeds", min=1, help="Seeds of the random order (a band).")
AbsModeOpt = typer.Option(
    "example", "--abs-mode", help="example: E|dL/dxi| per example (Michel's definition); "
    "batch: |sum over a batch| (their released code).",
)
NormalizeOpt = typer.Option(
    True, "--normalize/--no-normalize", help="L2-normalise importance within each layer."
)
ResumeOpt = typer.Option(
    False, "--resume", help="Continue an interrupted run in --out (same options)."
)


def _export(model, curve, order: str, step: int | None, export_dir: Path) -> str:
    """Structurally prune by one curve's mask, export it, and describe what was written."""
    from attnlens.loaders.export import export_hf
    from attnlens.pruning import final_mask, prune_heads

    mask = final_mask(model, curve, order, seed=0, step=step)
    pruned = prune_heads(model, mask)
    export_hf(pruned, export_dir)
    n_before = sum(p.numel() for p in model.parameters())
    n_after = sum(p.numel() for p in pruned.parameters())
    return (
        f"exported the {order} curve's model ({sum(pruned.heads_per_layer)} heads, per layer "
        f"{pruned.heads_per_layer}; {n_after:,} of {n_before:,} parameters) to {export_dir}/"
    )


def _check_options(metric: str, data: Path, importance_data: Path | None) -> None:
    """The metric name and data paths (before anything heavy is imported)."""
    from attnlens.errors import ConfigError
    from attnlens.io import check_input_file
    from attnlens.metrics import METRIC_NAMES

    if metric not in ("auto", *METRIC_NAMES):
        raise ConfigError(f"unknown --metric {metric!r}; choose auto or one of "
                          f"{', '.join(METRIC_NAMES)}.")
    check_input_file(data, "--data", "data")
    check_input_file(importance_data, "--importance-data", "data")


def _print_result(run: CommandRun, result, metrics, message: str | None, out: Path,
                  elapsed: float) -> None:
    label = metrics.evaluation.label
    run.note(f"unpruned {label}: {result.baseline:.4f} on {metrics.evaluation.n_examples} "
             f"held-out examples ({metrics.split})")
    for (order, seed), rows in result.curve.groupby(["order", "seed"], sort=False):
        last = rows.iloc[-1]
        run.note(f"  {order} (seed {seed}): {last['fraction_pruned']:.0%} pruned -> "
                 f"{last['metric']:.4f} ({last['change']:+.4f})")
    if message:
        run.note(message)
    run.note(f"wrote prune_curve.csv/.md, prune_scores.csv and the chart to {out}/ "
             f"in {elapsed:.0f} s")


def prune(
    run: CommandRun,
    metric: str = MetricOpt,
    data: Path = DataOpt,
    importance_data: Path | None = ImportanceDataOpt,
    eval_fraction: float = EvalFractionOpt,
    split_seed: int = SplitSeedOpt,
    order: str | None = OrderOpt,
    method: str = MethodOpt,
    lambdas: str = LambdaOpt,
    l0_temperature: float = L0TemperatureOpt,
    l0_stretch: str = L0StretchOpt,
    l0_steps: int = L0StepsOpt,
    l0_lr: float = L0LrOpt,
    l0_init: float = L0InitOpt,
    roles: Path | None = RolesOpt,
    step: float = StepOpt,
    max_fraction: float = MaxFractionOpt,
    rescore: bool = RescoreOpt,
    min_heads_per_layer: int = MinHeadsOpt,
    seeds: int = SeedsOpt,
    abs_mode: str = AbsModeOpt,
    normalize: bool = NormalizeOpt,
    export: Path | None = ExportOpt,
    export_step: int | None = ExportStepOpt,
    resume: bool = ResumeOpt,
) -> None:
    """Rank MODEL's heads, prune them step by step while tracking a metric, export the result.

    Layers and heads are numbered from 0; removed heads are written as layer.head.
    """
    from attnlens.cli import prune_extras as extras

    from attnlens.pruning.settings import PruneSettings

    _check_options(metric, data, importance_data)
    l0_settings = extras.l0_options(method, lambdas, l0_temperature, l0_stretch, l0_steps,
                                    l0_lr, l0_init, min_heads_per_layer, split_seed)
    settings = PruneSettings(orders=[o.strip() for o in (order or "importance").split(",")
                                     if o.strip()],
                             step=step, max_fraction=max_fraction, rescore=rescore,
                             min_heads_per_layer=min_heads_per_layer, seeds=seeds,
                             abs_mode=abs_mode, normalize=normalize,
                             roles=None if roles is None else str(roles))
    settings.validate()
    import json

    from attnlens.io import atomic_open, save_figure, write_table
    from attnlens.metrics.factory import auto_metric, build_metrics
    from attnlens.model.encoder_decoder import is_encoder_decoder
    from attnlens.plots import pruning_curves
    from attnlens.pruning import prune as run_prune

    started = time.perf_counter()
    ctx = run.start_processes()  # torchrun: evaluations spread over the processes
    model, tokenizer = run.load_model()
    if order is None:
        settings.orders = extras.default_orders(model, method)
    extras.check_model_options(model, settings.orders, export)
    name = auto_metric(model, data) if metric == "auto" else metric
    metrics = build_metrics(name, model, tokenizer, data, importance_data, eval_fraction,
                            split_seed, run.batch_size, run.max_length)
    out = run.prepare_output() if ctx.is_main else None
    description = {
        "model": model.cfg.source.get("path"), "metric": name, "data": str(data),
        "importance_data": None if importance_data is None else str(importance_data),
        "split": metrics.split, "eval_fraction": eval_fraction, "split_seed": split_seed,
        "batch_size": run.batch_size, "max_length": run.max_length, "dtype": run.model.dtype,
    }
    result = run_prune(model, metrics.importance, metrics.evaluation, settings, out,
                       resume=resume, description=description,
                       show_progress=run.show_progress and ctx.is_main, dist=ctx)
    run.end_processes()
    if not ctx.is_main:  # rank 0 writes the tables
        return
    write_table(result.curve, out, "prune_curve", formats=("md",))
    fig = pruning_curves(result.curve, metrics.evaluation.label,
                         f"{name} on held-out data vs heads pruned")
    save_figure(fig, out, "prune_curve", run.output.formats)
    if is_encoder_decoder(model):
        extras.write_attention_tables(run, model, result, out)
    l0_summary = None
    if l0_settings is not None:
        l0_summary = extras.write_l0(run, model, metrics, l0_settings, result, out, resume,
                                     description, name)
    message = None
    if export is not None:
        message = _export(model, result.curve, settings.curves()[0][0], export_step, export)
    elapsed = time.perf_counter() - started
    with atomic_open(out / "run.json") as handle:
        json.dump({**description, "baseline": result.baseline, "seconds": round(elapsed, 1),
                   "complete": True}, handle, indent=2)
    _print_result(run, result, metrics, message, out, elapsed)
    if l0_summary is not None:
        extras.note_l0(run, l0_summary)


def register(app: typer.Typer) -> None:
    command(app, "prune", out=Path("attnlens-prune"), batch_size=32, max_length=128,
            batch_unit="Examples")(prune)
