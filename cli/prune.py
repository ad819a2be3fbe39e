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
DATA_KINDS = "pairs CSV, text or labelled CSV, see --metric"
PAIRS_KIND = "CSV of sentence1,sentence2,score"
PairsOpt = typer.Option(
    None, "--pairs", show_default=False,
    help="Sentence pairs, CSV sentence1,sentence2,score (--metric sts): the evaluation data "
    "(split in two unless --importance-data is given).",
)
DataOpt = typer.Option(
    None, "--data", show_default=False,
    help="Evaluation data that is not sentence pairs: text, labelled CSV or source<TAB>target "
    "lines (see --metric; split in two unless --importance-data is given).",
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
MinHeadsOpt = typer.Option(1, "--min-heads-per-layer", min=0,
                           help="Heads every layer keeps, whatever the order.")
SeedsOpt = typer.Option(3, "--seeds", min=1, help="Seeds of the random order (a band).")
AbsModeOpt = typer.Option(
    "example", "--abs-mode", help="example: E|dL/dxi| per example (Michel's definition); "
    "batch: |sum over a batch| (their released code).",
)
NormalizeOpt = typer.Option(
    True, "--normalize/--no-normalize", help="L2-normalise importance within each layer."
)
ScoreRangeOpt = typer.Option(
    None, "--score-range", show_default=False,
    help="LOW,HIGH: the scale of an STS pairs file's scores (default 0,5, STS-B's).",
)


def _export(model, curve, order: str, step: int | None, folder, force: bool) -> str:
    """Structurally prune by one curve's mask, export it, and describe what was written."""
    from attnlens.errors import ConfigError
    from attnlens.head_names import head_name
    from attnlens.loaders.export import export_hf, pad_heads_to_uniform, removed_heads
    from attnlens.measures.pruning import final_mask, prune_heads

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


def _check_model(model: str | None, settings, export_step: int | None, export: Path | None):
    """Checks that need the model's shape, read from config.json alone (no torch). Whether
    --export can write the model's family is checked by ``_export_folder``, after its folder:
    that check imports the converters (and torch), so the path checks must come first."""
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


def _check_exportable(model: str | None) -> None:
    """--export can write the model's family (imports the converter registry, hence torch)."""
    from attnlens.errors import ConfigError
    from attnlens.loaders.checkpoint import read_config, resolve_checkpoint
    from attnlens.loaders.registry import CONVERTERS

    model_type = read_config(resolve_checkpoint(model)).get("model_type")
    converter = CONVERTERS.get(model_type)
    if converter is None or converter.export is None:
        known = ", ".join(k for k, c in CONVERTERS.items() if c.export is not None)
        raise ConfigError(f"--export cannot write model_type {model_type!r}; "
                          f"export supports {known}: drop --export.")


def _export_folder(run: CommandRun, export: Path | None):
    """The --export folder, checked now (written after the run); then whether the model's
    family can be exported (the one --export check that imports torch, so it comes last)."""
    if export is None:
        return None
    from attnlens.errors import ConfigError
    from attnlens.runs.outputs import OutputFolder

    exp, out = Path(export).resolve(), Path(run.output.folder).resolve()
    if exp == out or out in exp.parents or exp in out.parents:
        raise ConfigError("--export and --out must be separate folders, neither inside the "
                          "other; choose another --export.")
    folder = OutputFolder(export, force=run.output.force, option="--export",
                          protected=run._protected()).check()
    _check_exportable(run.model.name)
    return folder


def _data_option(metric: str, pairs: Path | None, data: Path | None) -> tuple[str, Path, str]:
    """``(metric, data, option)``: --pairs (metric sts) or --data, exactly one of them."""
    from attnlens.errors import ConfigError

    if (pairs is None) == (data is None):
        raise ConfigError("give the evaluation data once: --pairs FILE for sentence pairs "
                          "(sentence1,sentence2,score), else --data FILE.")
    if pairs is None:
        return metric, data, "--data"
    from attnlens.metrics import METRIC_NAMES

    if metric in METRIC_NAMES and metric != "sts":  # an unknown name: _check_options says so
        raise ConfigError(f"--pairs holds sentence pairs, scored by --metric sts, not "
                          f"{metric!r}; give other data with --data.")
    return ("sts" if metric == "auto" else metric), pairs, "--pairs"


def _warn_pairs_as_data(name: str, option: str) -> None:
    """Sentence pairs given as --data (the old name): works, with a warning."""
    import sys

    if name == "sts" and option == "--data":
        print("Warning: --data with sentence pairs is the old spelling; use --pairs "
              "(it means the same).", file=sys.stderr)


def _check_options(metric: str, data: Path, importance_data: Path | None,
                   export: Path | None, export_step: int | None) -> None:
    """The metric name, data paths and --export-step (before anything heavy is imported)."""
    from attnlens.errors import ConfigError
    from attnlens.metrics import METRIC_NAMES
    from attnlens.runs.io import check_input_file

    if export_step is not None and export is None:
        raise ConfigError(f"--export-step {export_step} chooses the step --export writes, and "
                          "no --export folder was given; add --export DIR, or drop "
                          "--export-step.")
    if metric not in ("auto", *METRIC_NAMES):
        raise ConfigError(f"unknown --metric {metric!r}; choose auto or one of "
                          f"{', '.join(METRIC_NAMES)}.")
    check_input_file(importance_data, "--importance-data", "data")


def _print_result(run: CommandRun, result, metrics, message: str | None, out: Path,
                  elapsed: float) -> None:
    from attnlens.metrics.change import change_text

    label = metrics.evaluation.label
    run.note(f"unpruned {label}: {result.baseline:.4f} on {metrics.evaluation.n_examples} "
             f"held-out examples ({metrics.split})")
    for (order, seed), rows in result.curve.groupby(["order", "seed"], sort=False):
        last = rows.iloc[-1]
        run.note(f"  {order} (seed {seed}): {last['fraction_pruned']:.0%} pruned: {label} "
                 f"{change_text(result.baseline, last['metric'], last['change'])}")
    if message:
        run.note(message)
    run.note(f"wrote prune_curve.csv/.md, prune_scores.csv and the chart to {out}/ "
             f"in {elapsed:.0f} s")


def prune(
    run: CommandRun,
    metric: str = MetricOpt,
    pairs: Path | None = PairsOpt,
    data: Path | None = DataOpt,
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
    score_range: str | None = ScoreRangeOpt,
) -> None:
    """Rank MODEL's heads, prune them step by step while tracking a metric, export the result.

    Layers and heads are numbered from 0; heads are written L2H8 (layer 2, head 8).
    """
    metric, data, data_option = _data_option(metric, pairs, data)
    from attnlens.cli import prune_extras as extras

    from attnlens.data.pairs import parse_score_range
    from attnlens.data.shapes import check_metric_data

    _check_options(metric, data, importance_data, export, export_step)
    l0_settings = extras.l0_options(method, lambdas, l0_temperature, l0_stretch, l0_steps,
                                    l0_lr, l0_init, min_heads_per_layer, split_seed)
    settings = _settings(order, step, max_fraction, rescore, min_heads_per_layer, seeds,
                         abs_mode, normalize, roles, eval_fraction)
    scale = parse_score_range(score_range)
    check_metric_data(metric, data, data_option, scale)
    check_metric_data(metric, importance_data, "--importance-data", scale)
    _check_model(run.model.name, settings, export_step, export)
    export_folder = _export_folder(run, export)
    from attnlens.metrics.factory import auto_metric, build_metrics

    started = time.perf_counter()
    ctx = run.start_processes()  # torchrun: evaluations spread over the processes
    model, tokenizer = run.load_model()
    if order is None:
        settings.orders = extras.default_orders(model, method)
    extras.check_model_options(model, settings.orders, export)
    name = auto_metric(model, data) if metric == "auto" else metric
    _warn_pairs_as_data(name, data_option)
    metrics = build_metrics(name, model, tokenizer, data, importance_data, eval_fraction,
                            split_seed, run.batch_size, run.max_length, score_range=scale)
    description = _description(run, model, name, metrics, data, importance_data,
                               eval_fraction, split_seed)
    if not ctx.is_main:  # torchrun: the other ranks evaluate; rank 0 writes
        _evaluate_for_rank_0(run, ctx, model, metrics, settings, description)
        return
    with run.writing() as work:
        result, l0_summary = _run_curves(run, work, ctx, model, metrics, settings, description,
                                         l0_settings, started)
    message = None
    if export_folder is not None:
        message = _export(model, result.curve, settings.curves()[0][0], export_step,
                          export_folder, run.output.force)
    _print_result(run, result, metrics, message, run.output.folder,
                  time.perf_counter() - started)
    if l0_summary is not None:
        extras.note_l0(run, l0_summary, result.baseline, metrics.evaluation.label)


def _settings(order: str | None, step: float, max_fraction: float, rescore: bool,
              min_heads_per_layer: int, seeds: int, abs_mode: str, normalize: bool,
              roles: Path | None, eval_fraction: float):
    """The pruning options as checked ``PruneSettings`` (orders default to importance until
    the model is known), and the evaluation fraction checked beside them."""
    from attnlens.errors import ConfigError
    from attnlens.measures.pruning.settings import PruneSettings

    settings = PruneSettings(orders=[o.strip() for o in (order or "importance").split(",")
                                     if o.strip()],
                             step=step, max_fraction=max_fraction, rescore=rescore,
                             min_heads_per_layer=min_heads_per_layer, seeds=seeds,
                             abs_mode=abs_mode, normalize=normalize,
                             roles=None if roles is None else str(roles))
    settings.validate()
    if not 0.0 < eval_fraction < 1.0:
        raise ConfigError(f"evaluation fraction must be between 0 and 1, not {eval_fraction}.")
    return settings


def _description(run: CommandRun, model, name: str, metrics, data: Path,
                 importance_data: Path | None, eval_fraction: float, split_seed: int) -> dict:
    """What the run was asked (saved with the curves; --resume compares it)."""
    return {
        "model": model.cfg.source.get("path"), "metric": name, "data": str(Path(data).resolve()),
        "importance_data": None if importance_data is None else str(
            Path(importance_data).resolve()),
        "split": metrics.split, "eval_fraction": eval_fraction, "split_seed": split_seed,
        "batch_size": run.batch_size, "max_length": run.max_length, "dtype": run.model.dtype,
    }


def _evaluate_for_rank_0(run: CommandRun, ctx, model, metrics, settings,
                         description: dict) -> None:
    """A torchrun rank other than 0: evaluate its share of every step; rank 0 writes."""
    from attnlens.measures.pruning import prune as run_prune

    run_prune(model, metrics.importance, metrics.evaluation, settings, None,
              resume=run.output.resumes, description=description, show_progress=False,
              dist=ctx)
    run.end_processes()


def _run_curves(run: CommandRun, work: Path, ctx, model, metrics, settings, description: dict,
                l0_settings, started: float):
    """The curves into ``work`` (continuing saved steps on --resume), their tables and chart;
    returns ``(result, l0_summary)``."""
    import json

    from attnlens.cli import prune_extras as extras

    from attnlens.measures.pruning import prune as run_prune
    from attnlens.model.protocol import has_several_attention_types
    from attnlens.plots import pruning_curves
    from attnlens.runs.io import atomic_open, save_figure, write_table

    target, resume = run.output.target, run.output.resumes

    def kept(row: dict) -> None:  # what an interruption keeps, for its message
        target.progress = (f"the pruning curves up to step {row['step']} of the "
                           f"{row['order']} (seed {row['seed']}) curve")

    result = run_prune(model, metrics.importance, metrics.evaluation, settings, work,
                       resume=resume, description=description,
                       show_progress=run.show_progress, on_step=kept, dist=ctx)
    run.end_processes()
    name = description["metric"]
    write_table(result.curve, work, "prune_curve", formats=("md",))
    fig = pruning_curves(result.curve, metrics.evaluation.label,
                         f"{name} on held-out data vs heads pruned")
    save_figure(fig, work, "prune_curve", run.output.formats)
    if has_several_attention_types(model):
        extras.write_attention_tables(run, model, result, work)
    l0_summary = None
    if l0_settings is not None:
        l0_summary = extras.write_l0(run, model, metrics, l0_settings, result, work, resume,
                                     description, name)
    with atomic_open(work / "run.json") as handle:
        json.dump({**description, "baseline": result.baseline,
                   "seconds": round(time.perf_counter() - started, 1), "complete": True},
                  handle, indent=2)
    return result, l0_summary


def register(app: typer.Typer) -> None:
    command(app, "prune", out=Path("attnlens-prune"), batch_size=32,
            batch_unit="Examples", resumable=True,
            inputs={"pairs": PAIRS_KIND, "data": DATA_KINDS,
                    "importance_data": DATA_KINDS})(prune)
