"""`attnlens prune`: head importance, pruning curves on a real metric, structural export."""

from __future__ import annotations

import time
from pathlib import Path

import typer
from attnlens.cli.options import (
    AllowPickle,
    Backend,
    Device,
    Dtype,
    ExampleBatchSize,
    Force,
    Format,
    MaxLength,
    Model,
    Out,
    QueryBlock,
    Quiet,
    Resume,
    WholeMatrixLimit,
)
from attnlens.cli.runner import CommandRun, command

ORDER_HELP = (
    "Comma-separated orders: importance, random, confidence, entropy, loo, roles (heads with "
    "a tested role from --roles kept, the others first). Encoder-decoder models: ORDER:encoder, "
    "ORDER:decoder, ORDER:cross prune one attention type only. Default: importance,random,"
    "confidence; encoder-decoder: importance and importance per type, random; --method l0: "
    "importance,random."
)
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


def prune(
    run: CommandRun,
    model: Model = None,
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
    batch_size: ExampleBatchSize = 32,
    max_length: MaxLength = None,
    query_block: QueryBlock = None,
    whole_matrix_limit: WholeMatrixLimit = 4096,
    out: Out = Path("attnlens-prune"),
    fmt: Format = "svg",
    force: Force = False,
    resume: Resume = False,
    device: Device = "cpu",
    dtype: Dtype = "float32",
    allow_pickle: AllowPickle = False,
    backend: Backend = "auto",
    quiet: Quiet = False,
) -> None:
    """Rank MODEL's heads, prune them step by step while tracking a metric, export the result.

    Layers and heads are numbered from 0; heads are written L2H8 (layer 2, head 8).
    """
    from attnlens.measures.pruning.job import PruneJob, check_model_shape, export_target

    job = PruneJob.from_options(
        metric=metric, pairs=pairs, data=data, importance_data=importance_data,
        eval_fraction=eval_fraction, split_seed=split_seed, order=order, method=method,
        lambdas=lambdas, l0_temperature=l0_temperature, l0_stretch=l0_stretch,
        l0_steps=l0_steps, l0_lr=l0_lr, l0_init=l0_init, roles=roles, step=step,
        max_fraction=max_fraction, rescore=rescore, min_heads_per_layer=min_heads_per_layer,
        seeds=seeds, abs_mode=abs_mode, normalize=normalize, export=export,
        export_step=export_step, score_range=score_range)
    check_model_shape(job, run.model.name)
    export_folder = export_target(job, run.output.folder, run.model.name,
                                  force=run.output.force, protected=run._protected())
    from attnlens.measures.pruning import folder

    started = time.perf_counter()
    ctx = run.start_processes()  # torchrun: evaluations spread over the processes
    loaded, tokenizer = run.load_model()
    metrics, description = folder.prepare(job, loaded, tokenizer, run.batch_size,
                                          run.max_length, dtype=run.model.dtype)
    target = run.output.target

    def kept(row: dict) -> None:  # what an interruption keeps, for its message
        target.progress = (f"the pruning curves up to step {row['step']} of the "
                           f"{row['order']} (seed {row['seed']}) curve")

    with run.writing() as work:
        result = folder.write_prune_folder(
            job, loaded, metrics, description, work, formats=run.output.formats,
            resume=run.output.resumes, show_progress=run.show_progress, on_step=kept,
            dist=ctx, started=started, note=run.note)
    if result is None:  # torchrun: the other ranks evaluate; rank 0 writes
        return
    if export_folder is not None:
        result.export_message = folder.export_pruned(loaded, job, result.result.curve,
                                                     export_folder, run.output.force)
    for line in folder.summary_lines(result, run.output.folder,
                                     time.perf_counter() - started):
        run.note(line)


def register(app: typer.Typer) -> None:
    command(app, "prune", inputs={"pairs": PAIRS_KIND, "data": DATA_KINDS,
                                  "importance_data": DATA_KINDS})(prune)
