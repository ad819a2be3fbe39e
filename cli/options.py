"""Options shared by several commands, spelled once (``runner.command`` adds them to a command).

Each function returns the ``inspect.Parameter`` objects of one group; the runner appends them
to a command's own parameters, so every command spells, checks and documents them alike.
Panels group them in ``--help``.
"""

from __future__ import annotations

import inspect
from pathlib import Path

import typer

KW = inspect.Parameter.KEYWORD_ONLY
MODEL_PANEL, CORPUS_PANEL, OUTPUT_PANEL = "Model", "Corpus", "Output"
METHOD_PANEL = "Method"  # a command's own options (runner.command puts them there)
MAX_LENGTH_HELP = ("Truncate inputs to this many tokens. Default: the length the model was "
                   "trained on, from its checkpoint (sentence_bert_config.json, else "
                   "config.json positions; 512 when it states none).")


def _param(name: str, annotation, default) -> inspect.Parameter:
    return inspect.Parameter(name, KW, default=default, annotation=annotation)


def model_argument() -> list[inspect.Parameter]:
    return [_param("model", str | None, typer.Argument(
        None, metavar="[MODEL]", show_default=False,
        help="Model folder (config.json + safetensors) or a hub id in the local HF cache. "
        "Default: the embedded all-MiniLM-L6-v2.",
    ))]


def model_loading() -> list[inspect.Parameter]:
    return [
        _param("device", str, typer.Option(
            "cpu", "--device", help="cpu, cuda, cuda:N or auto.", rich_help_panel=MODEL_PANEL)),
        _param("dtype", str, typer.Option(
            "float32", "--dtype", help="float32, bfloat16 or float16.",
            rich_help_panel=MODEL_PANEL)),
        _param("allow_pickle", bool, typer.Option(
            False, "--allow-pickle", rich_help_panel=MODEL_PANEL,
            help="Allow pickle (pytorch_model.bin) weights; only if trusted.")),
        _param("backend", str, typer.Option(
            "auto", "--backend", rich_help_panel=MODEL_PANEL,
            help="native (attnlens' own model: SDPA fast path, structural pruning), hf (the "
            "Hugging Face model through its attention interface: any architecture), or auto: "
            "native when a converter accepts the checkpoint, else hf.")),
    ]


def device_map() -> list[inspect.Parameter]:
    return [
        _param("device_map", str | None, typer.Option(
            None, "--device-map", show_default=False, rich_help_panel=MODEL_PANEL,
            help="auto: spread a model larger than one device over the GPUs and CPU memory "
            "(needs the extra accelerate).")),
        _param("max_memory", str | None, typer.Option(
            None, "--max-memory", show_default=False, rich_help_panel=MODEL_PANEL,
            help="With --device-map auto: memory per device, e.g. 0=20GiB,1=20GiB,cpu=60GiB.")),
    ]


def corpus() -> list[inspect.Parameter]:
    return [
        _param("text", Path | None, typer.Option(
            None, "--text", show_default=False, rich_help_panel=CORPUS_PANEL,
            help="Text file, one sentence per line (split into words).")),
        _param("treebank", Path | None, typer.Option(
            None, "--treebank", show_default=False, rich_help_panel=CORPUS_PANEL,
            help="CoNLL-U treebank. Without --text or --treebank: the embedded sample treebank "
            "(43 English sentences).")),
        _param("parse", bool, typer.Option(
            False, "--parse", rich_help_panel=CORPUS_PANEL,
            help="Dependency-parse the --text file with spaCy (optional extra).")),
        _param("max_sentences", int | None, typer.Option(
            None, "--max-sentences", min=1, show_default=False, rich_help_panel=CORPUS_PANEL,
            help="Read at most the first N sentences of the corpus (default: all).")),
    ]


def batching(batch_size: int, unit: str) -> list[inspect.Parameter]:
    return [
        _param("batch_size", int, typer.Option(
            batch_size, "--batch-size", min=1, help=f"{unit} per forward pass.",
            rich_help_panel=MODEL_PANEL)),
        _param("max_length", int | None, typer.Option(
            None, "--max-length", min=4, show_default=False, help=MAX_LENGTH_HELP,
            rich_help_panel=MODEL_PANEL)),
        _param("query_block", int | None, typer.Option(
            None, "--query-block", min=1, show_default=False, rich_help_panel=MODEL_PANEL,
            help="Long inputs: attention patterns are computed and analysed this many query "
            "rows at a time (default: from free memory; docs/long-context.md).")),
        _param("whole_matrix_limit", int, typer.Option(
            4096, "--whole-matrix-limit", min=0, rich_help_panel=MODEL_PANEL,
            help="Longest input (tokens) an analysis needing whole attention matrices "
            "(rollout, flow, pattern asymmetry, head clustering, full spectra) may read; "
            "longer inputs are refused with the analysis named.")),
    ]


def hidden_alias(old: str, annotation) -> inspect.Parameter:
    """A hidden option kept under an old name (``runner.command``'s ``aliases``: it warns and
    passes the value to the new option)."""
    name = "alias_" + old.lstrip("-").replace("-", "_")
    return _param(name, annotation | None, typer.Option(None, old, hidden=True,
                                                       show_default=False))


def output(default: Path, figures: bool) -> list[inspect.Parameter]:
    params = [_param("out", Path, typer.Option(
        default, "--out", "-o", help="Output folder.", rich_help_panel=OUTPUT_PANEL))]
    if figures:
        params.append(_param("fmt", str, typer.Option(
            "png", "--format", rich_help_panel=OUTPUT_PANEL,
            help="Figure formats, comma-separated: png,svg,pdf.")))
    params.append(_param("force", bool, typer.Option(
        False, "--force", rich_help_panel=OUTPUT_PANEL,
        help="Replace a non-empty output folder as a whole (its files are deleted).")))
    return params


def resuming(checkpoints: bool) -> list[inspect.Parameter]:
    params = [_param("resume", bool, typer.Option(
        False, "--resume", rich_help_panel=OUTPUT_PANEL,
        help="Continue an interrupted run of the same command, inputs and options in --out."))]
    if checkpoints:
        params.append(_param("checkpoint_every", int | None, typer.Option(
            None, "--checkpoint-every", min=1, show_default=False, rich_help_panel=OUTPUT_PANEL,
            help="Save the analyzers' state every N sentences, so --resume continues from "
            "there.")))
    return params


def quiet() -> list[inspect.Parameter]:
    return [_param("quiet", bool, typer.Option(False, "--quiet", "-q", help="No progress bars.",
                                               rich_help_panel=OUTPUT_PANEL))]


def null_model() -> list[inspect.Parameter]:
    return [
        _param("null", str, typer.Option(
            "random-init", "--null", rich_help_panel=METHOD_PANEL,
            help="Null model every finding is held to: random-init (the same architecture, "
            "randomly initialised; one more pass over up to 512 sentences) or none.")),
        _param("null_seed", int, typer.Option(
            0, "--null-seed", min=0, rich_help_panel=METHOD_PANEL,
            help="Seed of the null model's initialisation.")),
    ]
