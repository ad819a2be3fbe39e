"""`attnlens prune`: head importance, pruning curves on a real metric, structural export."""

from __future__ import annotations

from pathlib import Path

import typer
from attnlens.cli import options as opt
from rich.console import Console

console = Console(stderr=True)

METRIC_HELP = (
    "auto (from the model's head and the data), sts (pairs CSV sentence1,sentence2,score), "
    "mlm / lm (text file), accuracy (CSV text,label), fidelity (text file, label-free) or "
    "seq2seq (encoder-decoder models: source<TAB>target lines)."
)
ORDER_HELP = (
    "Comma-separated orders: importance, random, confidence, entropy, loo, roles (heads with "
    "a tested role from --roles kept, the others first). Encoder-decoder models: ORDER:encoder, "
    "ORDER:decoder, ORDER:cross prune one attention type only. Default: importance,random,"
    "confidence; encoder-decoder: importance and importance per type, random; --method l0: "
    "importance,random."
)
MethodOpt = typer.Option(
    "curves", "--method",
    help="curves: prune step by step in each --order; l0: also train Hard Concrete head gates "
    "(Voita et al. 2019) for each --lambda and put them on the curves' chart.",
)
LambdaOpt = typer.Option(
    "0.001,0.003,0.01,0.03", "--lambda",
    help="--method l0: comma-separated penalties on the expected number of open gates.",
)
RolesOpt = typer.Option(
    None, "--roles", show_default=False,
    help="--order roles: output folder of `attnlens heads` (its head_roles.csv).",
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


def l0_options(lambdas: str, temperature: float, stretch: str, steps: int, lr: float,
               init: float, min_heads_per_layer: int, seed: int):
    """``L0Settings`` from the command line (checked before the model is loaded)."""
    from attnlens.errors import ConfigError
    from attnlens.pruning.l0 import L0Settings

    try:
        values = tuple(float(x) for x in lambdas.split(",") if x.strip())
        low, high = (float(x) for x in stretch.split(","))
    except ValueError:
        raise ConfigError(f"--lambda takes numbers like 0.001,0.01 and --l0-stretch two "
                          f"numbers like -0.1,1.1 (got {lambdas!r}, {stretch!r}).") from None
    settings = L0Settings(lambdas=values, temperature=temperature, stretch=(low, high),
                          steps=steps, learning_rate=lr, init_log_alpha=init,
                          min_heads_per_layer=min_heads_per_layer, seed=seed)
    settings.validate()
    return settings


def default_orders(model_obj, method: str) -> list[str]:
    from attnlens.model.encoder_decoder import is_encoder_decoder

    if is_encoder_decoder(model_obj):
        return ["importance", "importance:encoder", "importance:decoder", "importance:cross",
                "random"]
    return ["importance", "random"] if method == "l0" else ["importance", "random", "confidence"]


def check_orders(model_obj, orders: list[str]) -> None:
    from attnlens.errors import ConfigError
    from attnlens.model.encoder_decoder import is_encoder_decoder

    if is_encoder_decoder(model_obj):
        bad = [o for o in orders if o.partition(":")[0] in ("confidence", "entropy")]
        if bad:
            raise ConfigError(f"order {bad[0]!r} reads one stack's attention statistics; on an "
                              "encoder-decoder model use importance, random, loo or roles.")


def write_attention_tables(model_obj, result, out: Path) -> None:
    """Which attention type's heads go first (encoder-decoder models)."""
    from attnlens.pruning.attention_tables import (
        attention_first,
        describe_rows,
        removed_by_attention,
    )
    from attnlens.report.writer import write_table

    write_table(describe_rows(model_obj), out, "prune_rows")
    write_table(removed_by_attention(model_obj, result.curve), out, "prune_by_attention")
    first = attention_first(model_obj, result.scores)
    write_table(first, out, "prune_attention_first")
    for row in first.itertuples(index=False):
        console.print(f"  {row.order}: {row.attention} heads at mean rank {row.mean_rank:.2f} "
                      f"(0 = pruned first); {row.first_quarter} of the first quarter "
                      f"({row.first_quarter_if_even:.1f} if mixed evenly)")


def write_l0(model_obj, metrics, settings, result, out: Path, resume: bool, description: dict,
             formats, label: str, name: str, quiet: bool):
    """Train the L0 gates for every lambda; tables and the chart beside the curves."""
    from attnlens.pruning.l0_plot import l0_against_curves, l0_training_curves
    from attnlens.pruning.l0_run import compare_with_curves, run_l0
    from attnlens.report.writer import save_figure, write_table

    summary, heads, curve = run_l0(model_obj, metrics.importance, metrics.evaluation, settings,
                                   result.baseline, out, resume, description, not quiet)
    write_table(compare_with_curves(summary, result.curve), out, "l0_comparison")
    for table_name, table in (("l0_summary", summary), ("l0_heads", heads)):
        write_table(table, out, table_name, formats=("md",))
    fig = l0_against_curves(result.curve, summary, label,
                            f"{name} on held-out data: L0 gates vs pruning orders")
    save_figure(fig, out, "prune_l0", formats)
    save_figure(l0_training_curves(curve, "L0 gate training"), out, "l0_training", formats)
    return summary


def prune(
    model: opt.OptionalStr = opt.ModelArg,
    metric: str = typer.Option("auto", "--metric", help=METRIC_HELP),
    data: Path = DataOpt,
    importance_data: opt.OptionalPath = ImportanceDataOpt,
    eval_fraction: float = typer.Option(
        0.5, "--eval-fraction", help="Share of --data held apart for evaluation when it is split."
    ),
    split_seed: int = typer.Option(0, "--split-seed", help="Seed of the split (and MLM masking)."),
    order: str | None = typer.Option(None, "--order", help=ORDER_HELP, show_default=False),
    method: str = MethodOpt,
    lambdas: str = LambdaOpt,
    l0_temperature: float = typer.Option(
        2 / 3, "--l0-temperature", help="Hard Concrete temperature (Louizos: 2/3; Voita: 0.33).",
    ),
    l0_stretch: str = typer.Option("-0.1,1.1", "--l0-stretch", help="Stretch interval l,r."),
    l0_steps: int = typer.Option(300, "--l0-steps", min=1, help="Gate training steps per lambda."),
    l0_lr: float = typer.Option(0.05, "--l0-lr", help="Adam learning rate of log_alpha."),
    l0_init: float = typer.Option(
        3.0, "--l0-init", help="Initial log_alpha (3: every gate open with P ~ 0.99)."
    ),
    roles: opt.OptionalPath = RolesOpt,
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

    from attnlens.errors import ConfigError
    from attnlens.loaders import load
    from attnlens.metrics.factory import METRIC_NAMES, auto_metric, build_metrics
    from attnlens.model.encoder_decoder import is_encoder_decoder
    from attnlens.plots import pruning_curves
    from attnlens.pruning import PruneSettings
    from attnlens.pruning import prune as run_prune
    from attnlens.report.writer import atomic_open, check_output_dir, save_figure, write_table

    if metric not in ("auto", *METRIC_NAMES):
        raise ConfigError(f"unknown --metric {metric!r}; choose auto or one of "
                          f"{', '.join(METRIC_NAMES)}.")
    if method not in ("curves", "l0"):
        raise ConfigError(f"unknown --method {method!r}; choose curves or l0.")
    l0_settings = l0_options(lambdas, l0_temperature, l0_stretch, l0_steps, l0_lr, l0_init,
                             min_heads_per_layer, split_seed) if method == "l0" else None
    orders = [o.strip() for o in (order or "importance").split(",") if o.strip()]
    settings = PruneSettings(orders=orders, step=step, max_fraction=max_fraction,
                             rescore=rescore, min_heads_per_layer=min_heads_per_layer,
                             seeds=seeds, abs_mode=abs_mode, normalize=normalize,
                             roles=None if roles is None else str(roles))
    settings.validate()
    formats = opt.figure_formats(fmt)
    started = time.perf_counter()
    model_obj, tokenizer = load(model, device=device, dtype=dtype, allow_pickle=allow_pickle)
    if order is None:
        settings.orders = default_orders(model_obj, method)
    check_orders(model_obj, settings.orders)
    if export is not None and is_encoder_decoder(model_obj):
        raise ConfigError("--export: structural pruning of encoder-decoder models is not "
                          "supported yet; prune_curve.csv lists the heads removed.")
    name = auto_metric(model_obj, data) if metric == "auto" else metric
    metrics = build_metrics(name, model_obj, tokenizer, data, importance_data, eval_fraction,
                            split_seed, batch_size, max_length)
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
    result = run_prune(model_obj, metrics.importance, metrics.evaluation, settings, out,
                       resume=resume, description=description, show_progress=not quiet)
    label = metrics.evaluation.label
    write_table(result.curve, out, "prune_curve", formats=("md",))
    fig = pruning_curves(result.curve, label, f"{name} on held-out data vs heads pruned")
    save_figure(fig, out, "prune_curve", formats)
    if is_encoder_decoder(model_obj):
        write_attention_tables(model_obj, result, out)
    l0_summary = None
    if l0_settings is not None:
        l0_summary = write_l0(model_obj, metrics, l0_settings, result, out, resume,
                              description, formats, label, name, quiet)
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
    if l0_summary is not None:
        for row in l0_summary.itertuples(index=False):
            console.print(f"  L0 lambda {row[0]:g}: {row.n_kept} heads kept (per layer "
                          f"{row.kept_per_layer}) -> {row.metric:.4f} ({row.change:+.4f})")
    if message:
        console.print(message)
    console.print(f"wrote prune_curve.csv/.md, prune_scores.csv and the chart to {out}/ "
                  f"in {elapsed:.0f} s")


def register(app: typer.Typer) -> None:
    app.command("prune")(prune)
