"""`attnlens analyze`: the full report for one model on one corpus."""

from __future__ import annotations

from pathlib import Path

import typer
from attnlens.cli import lm_options as lm
from attnlens.cli.options import (
    AllowPickle,
    Backend,
    BatchSize,
    BatchTokens,
    CheckpointEvery,
    Device,
    DeviceMap,
    Dtype,
    Force,
    Format,
    MaxLength,
    MaxMemory,
    MaxSentences,
    Model,
    Null,
    NullSeed,
    Out,
    Parse,
    QueryBlock,
    Quiet,
    Resume,
    Text,
    Treebank,
    WholeMatrixLimit,
)
from attnlens.cli.runner import CommandRun, command

from attnlens.data.text import REPORT_BATCH_SIZE, REPORT_BATCH_TOKENS

DEFAULT_OUT = Path("attnlens-report")

PruneOpt = typer.Option(
    None, "--prune", help="A pruning run folder (attnlens prune --out DIR): adds head importance.",
    show_default=False,
)
SpectrumSentencesOpt = typer.Option(
    256, "--spectrum-sentences", min=0,
    help="The attention spectrum reads N sentences of the corpus, evenly spaced by corpus "
    "index (its exact singular values cost more than every other analysis together; 0: "
    "every sentence).",
)


def analyze(
    run: CommandRun,
    model: Model = None,
    prune: Path | None = PruneOpt,
    probe_sequences: int = lm.ProbeSequencesOpt,
    probe_length: int = lm.ProbeLengthOpt,
    probe_seed: int = lm.ProbeSeedOpt,
    probe_file: Path | None = lm.ProbeFileOpt,
    probes: bool = lm.ProbesOpt,
    sink_tokens: int = lm.SinkTokensOpt,
    window: int = lm.WindowOpt,
    streaming_threshold: float = lm.StreamingThresholdOpt,
    context: int = lm.ContextOpt,
    controls: int = lm.ControlsOpt,
    ablation: str = lm.AblationOpt,
    sts_data: Path | None = lm.StsDataOpt,
    spectrum_sentences: int = SpectrumSentencesOpt,
    text: Text = None,
    treebank: Treebank = None,
    parse: Parse = False,
    max_sentences: MaxSentences = None,
    batch_size: BatchSize = REPORT_BATCH_SIZE,
    batch_tokens: BatchTokens = REPORT_BATCH_TOKENS,
    max_length: MaxLength = None,
    query_block: QueryBlock = None,
    whole_matrix_limit: WholeMatrixLimit = 4096,
    out: Out = DEFAULT_OUT,
    fmt: Format = "svg",
    force: Force = False,
    resume: Resume = False,
    checkpoint_every: CheckpointEvery = None,
    device: Device = "cpu",
    dtype: Dtype = "float32",
    allow_pickle: AllowPickle = False,
    backend: Backend = "auto",
    device_map: DeviceMap = None,
    max_memory: MaxMemory = None,
    null: Null = "random-init",
    null_seed: NullSeed = 0,
    quiet: Quiet = False,
) -> None:
    """Analyse every attention head of MODEL on a corpus and write a report folder.

    The folder holds index.html (open it in a browser), run.json, tables/ and figures/;
    `attnlens report DIR` rebuilds the page from them.
    """
    if prune is not None and not (prune / "prune_scores.csv").is_file():
        from attnlens.errors import DataError

        raise DataError(f"--prune {prune}: not a pruning run folder (no prune_scores.csv); "
                        "give the --out folder of `attnlens prune`.")
    settings = lm.lm_heads_settings(probe_sequences, probe_length, probe_seed, probe_file,
                                    probes, sink_tokens, window, streaming_threshold, context,
                                    controls, ablation, sts_data)
    from attnlens.data.wordfreq_import import import_wordfreq

    import_wordfreq()  # rare-word heads' frequencies: cheaper before torch loads
    from attnlens.measures.lm_heads.run import LmHeads
    from attnlens.report.analyze import default_sections

    sections = default_sections(LmHeads(settings, sts_pairs=lm.sts_pairs(settings)))
    for section in sections:
        if section.name == "spectrum":
            section.max_sentences = spectrum_sentences or None
    run.write_report(sections=sections, print_summaries=False, prune_dir=prune)


def register(app: typer.Typer) -> None:
    command(app, "analyze", inputs=lm.INPUTS)(analyze)
