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


ScoreRangeOpt = typer.Option(
    None, "--score-range", show_default=False,
    help="LOW,HIGH: the scale of an STS pairs file's scores (default 0,5, STS-B's).",
)


def _check_data(metric: str, path: Path | None, option: str, score_range) -> None:
    """Read the data file the way its metric will, so a bad file fails before the model."""
    from attnlens.data.files import check_input_file, read_utf8
    from attnlens.data.pairs import read_pairs
    from attnlens.data.text import read_text_file

    if path is None:
        return
    is_csv = str(path).lower().endswith(".csv")
    if metric == "sts":
        read_pairs(path, score_range, option=option)
    elif metric in ("mlm", "lm", "fidelity") or (metric == "auto" and not is_csv):
        read_text_file(path, option=option)
    else:  # accuracy, or auto on a CSV: its columns depend on the model's head
        read_utf8(check_input_file(path, "data file", option, "a CSV"))


def _check_model(model: str | None, settings, export_step: int | None, export: Path | None):
    """Checks that need the model's shape and family, read from config.json alone."""
    from attnlens.errors import ConfigError
    from attnlens.loaders.checkpoint import config_shape, read_config, resolve_checkpoint

    hf = read_config(resolve_checkpoint(model))
    shape = config_shape(hf)
    if shape is not None:
        n_layers, n_heads = shape
        settings.check_model(n_layers, n_heads)
        n_steps = len(settings.step_targets(n_layers * n_heads))
        if export_step is not None and not 0 <= export_step <= n_steps:
            raise ConfigError(f"--export-step {export_step} is outside the run, whose steps "
                              f"are 0 to {n_steps}; choose one of them.")
    if export is not None:
        from attnlens.loaders.registry import CONVERTERS

        converter = CONVERTERS.get(hf.get("model_type"))
        if converter is None or converter.export is None:
            known = ", ".join(k for k, c in CONVERTERS.items() if c.export is not None)
            raise ConfigError(f"--export cannot write model_type {hf.get('model_type')!r}; "
                              f"export supports {known}: drop --export.")


def _export_folder(export: Path | None, out: Path, force: bool, model, inputs):
    """The --export folder, checked now (written after the run)."""
    if export is None:
        return None
    from attnlens.cli.outputs import _protected

    from attnlens.errors import ConfigError
    from attnlens.outputs import OutputFolder

    exp, run = Path(export).resolve(), Path(out).resolve()
    if exp == run or run in exp.parents or exp in run.parents:
        raise ConfigError("--export and --out must be separate folders, neither inside the "
                          "other; choose another --export.")
    return OutputFolder(export, force=force, option="--export",
                        protected=_protected(model, inputs)).check()


def _export(model_obj, curve, order: str, step: int | None, folder, force: bool) -> str:
    """Structurally prune by one curve's mask, export it, and describe what was written."""
    from attnlens.errors import ConfigError
    from attnlens.loaders.export import export_hf
    from attnlens.pruning import final_mask, prune_heads

    last = int(curve[(curve["order"] == order) & (curve["seed"] == 0)]["step"].max())
    if step is not None and step > last:
        raise ConfigError(f"--export-step {step} is past the {order} curve's last step "
                          f"({last}: no more heads could be removed); the run is saved; rerun "
                          f"with --resume and --export-step 0 to {last}.")
    mask = final_mask(model_obj, curve, order, seed=0, step=step)
    pruned = prune_heads(model_obj, mask)
    export_hf(pruned, folder.given, overwrite=force)
    n_before = sum(p.numel() for p in model_obj.parameters())
    n_after = sum(p.numel() for p in pruned.parameters())
    return (
        f"exported the {order} curve's model ({sum(pruned.heads_per_layer)} heads, per layer "
        f"{pruned.heads_per_layer}; {n_after:,} of {n_before:,} parameters) to {folder.given}/"
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
    resume: bool = opt.ResumeOpt,
    force: bool = opt.ForceOpt,
    score_range: str | None = ScoreRangeOpt,
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
    import time

    from attnlens.cli.outputs import prepare_output

    from attnlens.data.pairs import parse_score_range
    from attnlens.errors import ConfigError
    from attnlens.metrics.factory import METRIC_NAMES
    from attnlens.pruning.loop import PruneSettings

    if metric not in ("auto", *METRIC_NAMES):
        raise ConfigError(f"unknown --metric {metric!r}; choose auto or one of "
                          f"{', '.join(METRIC_NAMES)}.")
    orders = [o.strip() for o in order.split(",") if o.strip()]
    settings = PruneSettings(orders=orders, step=step, max_fraction=max_fraction,
                             rescore=rescore, min_heads_per_layer=min_heads_per_layer,
                             seeds=seeds, abs_mode=abs_mode, normalize=normalize)
    settings.validate()
    if not 0.0 < eval_fraction < 1.0:
        raise ConfigError(f"evaluation fraction must be between 0 and 1, not {eval_fraction}.")
    formats = opt.figure_formats(fmt)
    scale = parse_score_range(score_range)
    _check_data(metric, data, "--data", scale)
    _check_data(metric, importance_data, "--importance-data", scale)
    _check_model(model, settings, export_step, export)
    inputs = {"data": data, "importance_data": importance_data}
    folder, manifest = prepare_output(out, force=force, resume=resume, resumable=True,
                                      inputs=inputs, model=model)
    export_folder = _export_folder(export, out, force, model, inputs)
    started = time.perf_counter()
    with folder.writing(manifest) as work:
        model_obj, result, metrics = _run(
            folder, work, settings, model=model, metric=metric, data=data,
            importance_data=importance_data, eval_fraction=eval_fraction,
            split_seed=split_seed, scale=scale, batch_size=batch_size, max_length=max_length,
            device=device, dtype=dtype, allow_pickle=allow_pickle, formats=formats,
            quiet=quiet, started=started,
        )
    message = None
    if export_folder is not None:
        message = _export(model_obj, result.curve, settings.curves()[0][0], export_step,
                          export_folder, force)
    label = metrics.evaluation.label
    console.print(f"unpruned {label}: {result.baseline:.4f} on {metrics.evaluation.n_examples} "
                  f"held-out examples ({metrics.split})")
    for (o, seed), rows in result.curve.groupby(["order", "seed"], sort=False):
        last = rows.iloc[-1]
        console.print(f"  {o} (seed {seed}): {last['fraction_pruned']:.0%} pruned -> "
                      f"{last['metric']:.4f} ({last['change']:+.4f})")
    if message:
        console.print(message)
    console.print(f"wrote prune_curve.csv/.md, prune_scores.csv and the chart to {out}/ "
                  f"in {time.perf_counter() - started:.0f} s")


def _run(folder, work: Path, settings, *, model, metric, data, importance_data, eval_fraction,
         split_seed, scale, batch_size, max_length, device, dtype, allow_pickle, formats, quiet,
         started):
    """Load the model, build the metrics, run the curves into ``work`` and write the chart."""
    import json
    import time

    from attnlens.loaders import load
    from attnlens.metrics.factory import auto_metric, build_metrics
    from attnlens.plots import pruning_curves
    from attnlens.pruning import prune as run_prune
    from attnlens.report.writer import atomic_open, save_figure, write_table

    model_obj, tokenizer = load(model, device=device, dtype=dtype, allow_pickle=allow_pickle)
    name = auto_metric(model_obj, data) if metric == "auto" else metric
    metrics = build_metrics(name, model_obj, tokenizer, data, importance_data, eval_fraction,
                            split_seed, batch_size, max_length, score_range=scale)
    description = {
        "model": model_obj.cfg.source.get("path"),
        "metric": name,
        "data": str(Path(data).resolve()),
        "importance_data": None if importance_data is None else str(
            Path(importance_data).resolve()),
        "split": metrics.split,
        "eval_fraction": eval_fraction,
        "split_seed": split_seed,
        "batch_size": batch_size,
        "max_length": max_length,
        "dtype": dtype,
    }

    def kept(row: dict) -> None:
        folder.progress = (f"the pruning curves up to step {row['step']} of the "
                           f"{row['order']} (seed {row['seed']}) curve")

    result = run_prune(model_obj, metrics.importance, metrics.evaluation, settings, work,
                       resume=folder.resumes_partial, description=description,
                       show_progress=not quiet, on_step=kept)
    label = metrics.evaluation.label
    write_table(result.curve, work, "prune_curve", formats=("md",))
    fig = pruning_curves(result.curve, label, f"{name} on held-out data vs heads pruned")
    save_figure(fig, work, "prune_curve", formats)
    with atomic_open(work / "run.json") as handle:
        json.dump({**description, "baseline": result.baseline,
                   "seconds": round(time.perf_counter() - started, 1), "complete": True},
                  handle, indent=2)
    return model_obj, result, metrics


def register(app: typer.Typer) -> None:
    app.command("prune")(prune)
