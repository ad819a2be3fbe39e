"""`attnlens heads`: positional, syntactic and rare-word heads, with Clark's statistics."""

from __future__ import annotations

from pathlib import Path

import typer
from attnlens.cli import lm_options as lm
from attnlens.cli.analyze import DEFAULT_OUT
from attnlens.cli.options import (
    AllowPickle,
    Backend,
    BatchSize,
    BatchTokens,
    CheckpointEvery,
    Device,
    Dtype,
    Force,
    Format,
    MaxLength,
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

PositionalThresholdOpt = typer.Option(
    0.9, "--positional-threshold", min=0.0, max=1.0,
    help="Share of tokens one offset must win for a positional head.",
)
MinExamplesOpt = typer.Option(
    100, "--min-examples", min=1,
    help="Arcs a relation needs to be reported and tested; attending words and query "
    "tokens the corpus needs before rare-word and positional heads are tested (positional "
    "heads also need 20 sentences; see docs/heads.md: power).",
)
MarginOpt = typer.Option(
    0.10, "--margin", min=0.0, max=1.0,
    help="Accuracy above the fixed-offset baseline for a syntactic head.",
)
RareThresholdOpt = typer.Option(
    0.5, "--rare-threshold", min=0.0, max=1.0,
    help="Share of words attending most to the rarest word for a rare-word head.",
)
RarityCorpusOpt = typer.Option(
    None, "--rarity-corpus",
    help="Text file whose word counts define rarity (default: wordfreq English).",
    show_default=False,
)
BaseRelationsOpt = typer.Option(
    False, "--base-relations", help="Merge subtypes (nmod:poss -> nmod)."
)
BootstrapOpt = typer.Option(
    1000, "--bootstrap", min=0,
    help="Bootstrap replicates over sentences for intervals and role tests (0: off).",
)
SeedOpt = typer.Option(0, "--seed", help="Seed of the bootstrap and of the held-out split.")
AlphaOpt = typer.Option(
    0.05, "--alpha", min=0.0, max=1.0,
    help="False discovery rate (bh) or family-wise error (holm) of each family of role tests.",
)
CorrectionOpt = typer.Option(
    "bh", "--correction", help="Multiple-testing correction: bh (Benjamini-Hochberg) or holm."
)
PoolingOpt = typer.Option(
    "token", "--pooling",
    help="token: every arc/token/word counts the same (Clark et al.); sentence: per-sentence "
    "shares averaged.",
)
RareSelfOpt = typer.Option(
    "include", "--rare-self",
    help="Whether the attending word itself competes for its row's maximum: include|exclude.",
)
SelectOnOpt = typer.Option(
    None, "--select-on",
    help="CoNLL-U treebank on which each relation's best head is chosen (reported on the "
    "analysed corpus). Default: a seeded half of the analysed sentences.",
    show_default=False,
)
SelectFractionOpt = typer.Option(
    0.5, "--select-fraction", min=0.0, max=1.0,
    help="Without --select-on: share of the sentences that choose the best heads.",
)
ClustersOpt = typer.Option(
    None, "--clusters/--no-clusters",
    help="Jensen-Shannon distances between every pair of heads and their MDS embedding. "
    "Default: on, leaving out inputs above --whole-matrix-limit (it needs every layer's "
    "whole pattern); --clusters refuses them.",
    show_default=False,
)


def heads(
    run: CommandRun,
    model: Model = None,
    positional_threshold: float = PositionalThresholdOpt,
    min_examples: int = MinExamplesOpt,
    margin: float = MarginOpt,
    rare_threshold: float = RareThresholdOpt,
    rarity_corpus: Path | None = RarityCorpusOpt,
    base_relations: bool = BaseRelationsOpt,
    bootstrap: int = BootstrapOpt,
    seed: int = SeedOpt,
    alpha: float = AlphaOpt,
    correction: str = CorrectionOpt,
    pooling: str = PoolingOpt,
    rare_self: str = RareSelfOpt,
    select_on: Path | None = SelectOnOpt,
    select_fraction: float = SelectFractionOpt,
    clusters: bool | None = ClustersOpt,
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
    null: Null = "random-init",
    null_seed: NullSeed = 0,
    quiet: Quiet = False,
) -> None:
    """Find the heads of MODEL and their roles (layers/heads from 0).

    Positional, syntactic and rare-word heads on the corpus: with --treebank (or the
    embedded sample) everything, with --text statistics, positional and rare-word heads (add
    --parse for syntactic heads via spaCy). Language-model heads on synthetic probes and the
    corpus: previous-token, duplicate-token, induction, sink and retrieval heads, streaming
    heads, and each role's heads ablated against random heads (docs/lm-heads.md). Roles are
    tested claims: bootstrap intervals, corrected for every head and relation tried
    (docs/heads.md).
    """
    settings = lm.lm_heads_settings(probe_sequences, probe_length, probe_seed, probe_file,
                                    probes, sink_tokens, window, streaming_threshold, context,
                                    controls, ablation, sts_data)
    if rarity_corpus is None:
        from attnlens.data.wordfreq_import import import_wordfreq

        import_wordfreq()  # rare-word heads' frequencies: cheaper before torch loads
    from attnlens.measures.heads.settings import head_inference

    inference = head_inference(bootstrap, seed, alpha, correction, pooling, rare_self,
                               select_fraction)
    from attnlens.runs.io import check_input_file

    check_input_file(select_on, "--select-on", "CoNLL-U treebank")
    check_input_file(rarity_corpus, "--rarity-corpus", "text, one sentence per line")
    from attnlens.data.corpus import load_corpus
    from attnlens.data.rarity import WordRarity
    from attnlens.data.text import read_text_file
    from attnlens.measures.heads.section import HeadRolesSection
    from attnlens.measures.lm_heads.run import LmHeads
    from attnlens.measures.lm_heads.section import LmHeadsSection

    pairs = lm.sts_pairs(settings)
    corpus = run.read_corpus()
    chooser = load_corpus(treebank=select_on) if select_on else None
    rarity = None
    if rarity_corpus:
        rarity = WordRarity.from_texts(read_text_file(rarity_corpus, "--rarity-corpus"),
                                      source=str(rarity_corpus))
    section = HeadRolesSection(
        positional_threshold=positional_threshold,
        min_examples=min_examples,
        margin=margin,
        rare_threshold=rare_threshold,
        rarity=rarity,
        base_relations=base_relations,
        inference=inference,
        rare_self=rare_self,
        select_on=chooser,
        select_on_name=chooser.name if chooser else "",
        select_fraction=select_fraction,
        clusters=clusters,
        corpus_name=corpus.name,
        lm=LmHeadsSection(LmHeads(settings, inference, min_examples, pairs)),
    )
    run.write_report([section, section.lm], corpus=corpus)


def register(app: typer.Typer) -> None:
    command(app, "heads",
            inputs={"rarity_corpus": "text, one sentence per line",
                    "select_on": "CoNLL-U treebank", **lm.INPUTS})(heads)
