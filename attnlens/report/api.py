"""``attnlens.analyze(...)``: the report of ``attnlens analyze`` from Python."""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path

from attnlens.report.folder import Report


def analyze(
    model=None,
    tokenizer=None,
    *,
    treebank: str | Path | None = None,
    text: str | Path | None = None,
    sentences: Sequence[str] | None = None,
    out: str | Path | None = None,
    sections: Sequence | None = None,
    batch_size: int | None = None,
    batch_tokens: int | None = None,
    max_length: int | None = None,
    formats: tuple[str, ...] = ("svg",),
    prune: str | Path | None = None,
    show_progress: bool = False,
    null: str = "random-init",
    null_seed: int = 0,
    **load_options,
) -> Report:
    """Analyse every attention head and write the report folder; return it as a ``Report``.

    ``model``: a HookedTransformer (with its ``tokenizer``), a checkpoint folder or cached hub
    id, or None for the embedded all-MiniLM-L6-v2. Corpus: ``treebank`` (CoNLL-U), ``text``
    (a file, one sentence per line), ``sentences`` (a list of strings), else the embedded
    sample treebank. ``out``: the report folder (a new temporary folder when None; the
    result's ``write(DIR)`` copies it). In Jupyter the result shows its summary and head map.
    ``null``: ``"random-init"`` (default) holds every per-head measure to a randomly
    initialised copy of the model (columns ``null_mean``, ``null_low``, ``null_high``;
    seeded by ``null_seed``), ``"none"`` leaves it out (docs/report.md). ``max_length`` None:
    the model's trained length, as the commands' default (run.json records the value used and
    its source). ``batch_size`` / ``batch_tokens``: at most that many sentences / padded
    tokens per forward pass (None: the command's defaults; ``batch_tokens=0``: no budget).
    """
    from attnlens.data.corpus import Corpus, load_corpus
    from attnlens.errors import ConfigError
    from attnlens.report.analyze import analyze as run_analysis
    from attnlens.report.null_run import NullOptions

    null_options = NullOptions(null, null_seed)
    given = [x is not None for x in (treebank, text, sentences)]
    if sum(given) > 1:
        raise ConfigError("give one corpus: treebank=, text= or sentences=.")
    if sentences is not None:
        texts = [str(s) for s in sentences if str(s).strip()]
        if not texts:
            raise ConfigError("sentences= holds no text.")
        corpus = Corpus(f"{len(texts)} given sentences", texts=texts)
    else:
        corpus = load_corpus(text=str(text) if text else None,
                             treebank=str(treebank) if treebank else None)
    if model is None or isinstance(model, str | Path):
        from attnlens.loaders import load

        model, tokenizer = load(None if model is None else str(model), **load_options)
    elif tokenizer is None and getattr(model, "tokenizer", None) is not None:
        tokenizer = model.tokenizer  # set by attnlens.load
    elif tokenizer is None:
        raise ConfigError("pass the model's tokenizer with a loaded model: "
                          "analyze(model, tokenizer, ...).")
    folder = Path(out) if out is not None else Path(tempfile.mkdtemp(prefix="attnlens-report-"))
    if max_length is None:  # the model's trained length, as every command's default
        from attnlens.loaders.trained_length import resolved_max_length

        found = resolved_max_length(model.cfg.source.get("path"))
        max_length, max_length_source = found.tokens, found.source
    else:
        max_length_source = "max_length="
    from attnlens.data.text import REPORT_BATCH_SIZE, REPORT_BATCH_TOKENS

    batch_size = REPORT_BATCH_SIZE if batch_size is None else batch_size
    batch_tokens = REPORT_BATCH_TOKENS if batch_tokens is None else batch_tokens
    batches = corpus.batches(tokenizer, batch_size=batch_size, max_length=max_length,
                             batch_tokens=batch_tokens or None)
    run_analysis(
        model, tokenizer, batches, folder, sections=sections, formats=formats,
        show_progress=show_progress, corpus_name=corpus.name, prune_dir=prune,
        command="attnlens.analyze(...)", null=null_options,
        options={"batch_size": batch_size, "batch_tokens": batch_tokens,
                 "max_length": max_length,
                 "max_length_source": max_length_source, "formats": list(formats),
                 "treebank": str(treebank) if treebank else None,
                 "text": str(text) if text else None, "prune": str(prune) if prune else None,
                 "null": null, "null_seed": null_seed},
    )
    return Report(folder)


def compare(a: str | Path | Report, b: str | Path | Report, out: str | Path | None = None,
            top: int = 50):
    """Compare two report folders head by head; write the page into ``out`` when given.

    Returns the ``Comparison`` (its ``tables``: largest_differences, role_changes,
    measure_differences, head_differences, differences).
    """
    from attnlens.report.compare import compare as run_compare
    from attnlens.report.compare_page import write_comparison

    comparison = run_compare(a, b, top=top)
    if out is not None:
        write_comparison(comparison, out)
    return comparison
