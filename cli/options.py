"""Options shared by several commands, spelled once as ``Annotated`` type aliases.

A command lists the ones it takes in its own signature, with their defaults (as
huggingface_hub's CLI does), so reading the command's file shows every option it has::

    def heads(run: CommandRun, model: Model = None, ..., treebank: Treebank = None, ...)

``runner.command`` builds the run's shared option groups (``CommandRun``) from the names it
finds; each group is taken whole (``GROUPS``). Panels group the options in ``--help``; a
command's own options without a panel go to the Method panel.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

MODEL_PANEL, CORPUS_PANEL, OUTPUT_PANEL = "Model", "Corpus", "Output"
METHOD_PANEL = "Method"  # a command's own options (runner.command puts them there)
MAX_LENGTH_HELP = ("Truncate inputs to this many tokens. Default: the length the model was "
                   "trained on, from its checkpoint (sentence_bert_config.json, else "
                   "config.json positions; 512 when it states none).")

# Model ---------------------------------------------------------------------------------------
Model = Annotated[str | None, typer.Argument(
    metavar="[MODEL]", show_default=False,
    help="Model folder (config.json + safetensors) or a hub id in the local HF cache. "
    "Default: the embedded all-MiniLM-L6-v2.")]
Device = Annotated[str, typer.Option(
    "--device", help="cpu, cuda, cuda:N or auto.", rich_help_panel=MODEL_PANEL)]
Dtype = Annotated[str, typer.Option(
    "--dtype", help="float32, bfloat16 or float16.", rich_help_panel=MODEL_PANEL)]
AllowPickle = Annotated[bool, typer.Option(
    "--allow-pickle", rich_help_panel=MODEL_PANEL,
    help="Allow pickle (pytorch_model.bin) weights; only if trusted.")]
Backend = Annotated[str, typer.Option(
    "--backend", rich_help_panel=MODEL_PANEL,
    help="native (attnlens' own model: SDPA fast path, structural pruning), hf (the "
    "Hugging Face model through its attention interface: any architecture), or auto: "
    "native when a converter accepts the checkpoint, else hf.")]
DeviceMap = Annotated[str | None, typer.Option(
    "--device-map", show_default=False, rich_help_panel=MODEL_PANEL,
    help="auto: spread a model larger than one device over the GPUs and CPU memory "
    "(needs the extra accelerate).")]
MaxMemory = Annotated[str | None, typer.Option(
    "--max-memory", show_default=False, rich_help_panel=MODEL_PANEL,
    help="With --device-map auto: memory per device, e.g. 0=20GiB,1=20GiB,cpu=60GiB.")]

# Corpus --------------------------------------------------------------------------------------
Text = Annotated[Path | None, typer.Option(
    "--text", show_default=False, rich_help_panel=CORPUS_PANEL,
    help="Text file, one sentence per line (split into words).")]
Treebank = Annotated[Path | None, typer.Option(
    "--treebank", show_default=False, rich_help_panel=CORPUS_PANEL,
    help="CoNLL-U treebank. Without --text or --treebank: the embedded sample treebank "
    "(43 English sentences).")]
Parse = Annotated[bool, typer.Option(
    "--parse", rich_help_panel=CORPUS_PANEL,
    help="Dependency-parse the --text file with spaCy (optional extra).")]
MaxSentences = Annotated[int | None, typer.Option(
    "--max-sentences", min=1, show_default=False, rich_help_panel=CORPUS_PANEL,
    help="Read at most the first N sentences of the corpus (default: all).")]

# Batching ------------------------------------------------------------------------------------
BatchSize = Annotated[int, typer.Option(
    "--batch-size", min=1, help="Sentences per forward pass (at most, with --batch-tokens).",
    rich_help_panel=MODEL_PANEL)]
ExampleBatchSize = Annotated[int, typer.Option(
    "--batch-size", min=1, help="Examples per forward pass.", rich_help_panel=MODEL_PANEL)]
BatchTokens = Annotated[int, typer.Option(
    "--batch-tokens", min=0, rich_help_panel=MODEL_PANEL,
    help="Token budget per forward pass: sentences of similar length are batched together "
    "while a batch's padded tokens (sentences x its longest) stay within N, up to "
    "--batch-size sentences (0: --batch-size sentences per batch, whatever their length).")]
MaxLength = Annotated[int | None, typer.Option(
    "--max-length", min=4, show_default=False, help=MAX_LENGTH_HELP,
    rich_help_panel=MODEL_PANEL)]
QueryBlock = Annotated[int | None, typer.Option(
    "--query-block", min=1, show_default=False, rich_help_panel=MODEL_PANEL,
    help="Long inputs: attention patterns are computed and analysed this many query "
    "rows at a time (default: from free memory; docs/long-context.md).")]
WholeMatrixLimit = Annotated[int, typer.Option(
    "--whole-matrix-limit", min=0, rich_help_panel=MODEL_PANEL,
    help="Longest input (tokens) an analysis needing whole attention matrices "
    "(rollout, flow, pattern asymmetry, head clustering, full spectra) may read; "
    "longer inputs are refused with the analysis named.")]

# Output --------------------------------------------------------------------------------------
Out = Annotated[Path, typer.Option(
    "--out", "-o", help="Output folder.", rich_help_panel=OUTPUT_PANEL)]
Format = Annotated[str, typer.Option(
    "--format", rich_help_panel=OUTPUT_PANEL,
    help="Figure formats, comma-separated: svg (drawn by attnlens itself, fast), png, pdf "
    "(drawn by matplotlib).")]
Force = Annotated[bool, typer.Option(
    "--force", rich_help_panel=OUTPUT_PANEL,
    help="Replace a non-empty output folder as a whole (its files are deleted).")]
Resume = Annotated[bool, typer.Option(
    "--resume", rich_help_panel=OUTPUT_PANEL,
    help="Continue an interrupted run of the same command, inputs and options in --out.")]
CheckpointEvery = Annotated[int | None, typer.Option(
    "--checkpoint-every", min=1, show_default=False, rich_help_panel=OUTPUT_PANEL,
    help="Save the analyzers' state every N sentences, so --resume continues from there.")]
Quiet = Annotated[bool, typer.Option(
    "--quiet", "-q", help="No progress bars.", rich_help_panel=OUTPUT_PANEL)]

# Null model (commands that write a report of per-head measures) -----------------------------
Null = Annotated[str, typer.Option(
    "--null", rich_help_panel=METHOD_PANEL,
    help="Null model every finding is held to: random-init (the same architecture, "
    "randomly initialised; one more pass over up to 512 sentences) or none.")]
NullSeed = Annotated[int, typer.Option(
    "--null-seed", min=0, rich_help_panel=METHOD_PANEL,
    help="Seed of the null model's initialisation.")]


def hidden_alias(old: str):
    """A hidden option kept under an old name: ``alias_x: Annotated[int | None,
    hidden_alias("--x")] = None`` with ``command(..., aliases={"alias_x": "new_name"})``
    (it warns and passes the value to the new option)."""
    return typer.Option(old, hidden=True, show_default=False)


# The shared groups: parameter names a command takes all or none of (``runner.command`` checks
# it). The first name of each marks the group; the rest follow it.
GROUPS: dict[str, tuple[str, ...]] = {
    "model": ("model",),
    "loading": ("device", "dtype", "allow_pickle", "backend"),
    "device_map": ("device_map", "max_memory"),
    "corpus": ("text", "treebank", "parse", "max_sentences"),
    "batching": ("batch_size", "max_length", "query_block", "whole_matrix_limit"),
    "token_budget": ("batch_tokens",),
    "output": ("out", "force"),
    "figures": ("fmt",),
    "resume": ("resume",),
    "checkpoints": ("checkpoint_every",),
    "null": ("null", "null_seed"),
    "quiet": ("quiet",),
}
SHARED = tuple(name for names in GROUPS.values() for name in names)
