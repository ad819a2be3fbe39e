"""Before/after of issue 29's changes to analyzers' hot paths, interleaved in one process.

Each pair runs the analyzer as it was on main before the change (its module loaded from
``--before``, a checkout of main) and as it is now, over the same cached activations of the
first ``--sentences`` UD EWT dev sentences (batches of 16, MiniLM), fed as the runner feeds
them (``LayerFeeder``, in the forward's order), alternating batch by batch so that both see
the same load of a shared machine, with the report's settings (``Section.for_report``); then
compares the two states (``--only`` picks pairs):

- ``asymmetry``: pattern asymmetry;
- ``linear``: the linear-attention view (4 sentences per batch, 512 in all);
- ``sparse``: sparse-pattern coverage (4 sentences per batch, 512 in all);
- ``collapse``: rank-collapse variants (the fixed 32-sentence float64 sample, 4 per batch):
  main runs 5 variants per sampled batch; now the sample is held and each variant runs once
  per length bucket (``model_pass``, timed whole);
- ``sink_keys``, ``sink_scores``, ``streaming`` (the language-model heads' corpus
  analyzers) and ``rollout``.

    python benchmarks/hot_paths.py --before /work/main [--sentences 200] [--threads 2]
        [--only asymmetry,linear,sparse,collapse,sink_keys,...] [--batch-tokens 1024]
        [--report-sample] [--null]

``--batch-tokens N``: batches as ``analyze`` makes them (at most 64 sentences and N padded
tokens, by length) instead of runs of 16; ``--report-sample``: sparse coverage and the
linear view read ``analyze``'s sample (512 sentences by corpus index, any number per batch)
instead of 4 per batch; ``--null``: the analyzers read the null model's patterns (MiniLM
randomly initialised, seed 0) over the null pass's sample of the sentences (512 by corpus
index), as in ``analyze``'s null pass.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from corpus_pass import SHARED_UD, load_batches

from attnlens.measures.rollout.section import REPORT_MAX_ENTRIES, REPORT_SENTENCES

PAIRS = {  # name: (module path, class, section module, section class)
    "asymmetry": ("attnlens/measures/asymmetry/pattern_asymmetry.py", "PatternAsymmetry"),
    "linear": ("attnlens/measures/linear/linear_attention.py", "LinearAttentionView"),
    "sparse": ("attnlens/measures/sparse/sparse.py", "SparseCoverage"),
    "collapse": ("attnlens/measures/collapse/variant_collapse.py", "VariantCollapse"),
    "sink_keys": ("attnlens/measures/lm_heads/sinks.py", "SinkKeys"),
    "sink_scores": ("attnlens/measures/lm_heads/sinks.py", "SinkScores"),
    "streaming": ("attnlens/measures/lm_heads/streaming.py", "StreamingError"),
    "rollout": ("attnlens/measures/rollout/rollout.py", "RolloutAnalyzer"),
    "head_examples": ("attnlens/measures/heads/examples.py", "HeadExamples"),
    "positional": ("attnlens/measures/heads/positional.py", "PositionalHeads"),
}
NEEDS_TOKENIZER = {"head_examples"}  # for_model(model, tokenizer)
REPORT_OPTIONS = {"linear": {"per_batch": 4, "max_sentences": 512},
                  "sparse": {"per_batch": 4, "max_sentences": 512},
                  "collapse": {"per_batch": 4, "max_sentences": 32},
                  # the rollout section's own settings in analyze (RolloutSection.analyzers)
                  "rollout": {"residual": 0.5, "fusion": "mean", "keep": REPORT_SENTENCES,
                              "max_entries": REPORT_MAX_ENTRIES}}


def old_class(root: Path, relative: str, name: str):
    """``name`` from main's copy of the module (its own imports, relative ones too, come
    from this tree: the copy is loaded as a sibling of this tree's module)."""
    package = ".".join(Path(relative).parent.parts)
    spec = importlib.util.spec_from_file_location(f"{package}.old_{Path(relative).stem}",
                                                  root / relative)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, name)


def feed(model, analyzer, batch, cache) -> None:
    """One batch's cached activations to ``analyzer`` as the runner gives them."""
    if analyzer.needs_model_pass:
        analyzer.model_pass(model, batch)
        return
    feed_all(model, [analyzer], batch, cache)


def feed_all(model, analyzers: list, batch, cache) -> None:
    """One batch's cached activations to ``analyzers`` through one feeder, as the runner."""
    from attnlens.stream.feeder import LayerFeeder

    feeder = LayerFeeder(model, analyzers)
    feeder.begin(batch)
    wanted = set(feeder.names)
    for name, x in cache.items():  # the forward's order
        if name in wanted:
            feeder.save_as(name, x)
    feeder.end()


def same_state(a, b) -> tuple[bool, float]:
    """(every field equal within 1e-6 relative and 1e-9 absolute, largest difference)."""
    worst, ok = 0.0, True
    sa, sb = a.state_dict()["state"], b.state_dict()["state"]

    def compare(x, y):
        nonlocal worst, ok
        if isinstance(x, dict):
            for k in x:
                compare(x[k], y[k])
        elif isinstance(x, list) and x and isinstance(x[0], torch.Tensor):
            compare(torch.cat(x, -1), torch.cat(y, -1))
        elif isinstance(x, (list, tuple)):
            ok &= len(x) == len(y)
            for u, w in zip(x, y, strict=False):
                compare(u, w)
        elif isinstance(x, torch.Tensor):
            if x.numel():
                worst = max(worst, float((x.double() - y.double()).abs().max()))
            ok &= torch.allclose(x.double(), y.double(), rtol=1e-6, atol=1e-9, equal_nan=True)
        else:
            ok &= x == y

    compare(sa, sb)
    return ok, worst


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, required=True)
    parser.add_argument("--sentences", type=int, default=200)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--only", default=",".join(PAIRS))
    parser.add_argument("--batch-tokens", type=int, default=0)
    parser.add_argument("--report-sample", action="store_true")
    parser.add_argument("--null", action="store_true")
    parser.add_argument("--wall", action="store_true",
                        help="wall time instead of the process's CPU time (which counts the "
                        "threads' spinning waits on a loaded machine)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    import attnlens

    model, tokenizer = attnlens.load()
    if args.batch_tokens:
        batches, _ = load_batches(tokenizer, model, SHARED_UD, args.sentences, 64,
                                  args.batch_tokens)
    else:
        batches, _ = load_batches(tokenizer, model, SHARED_UD, args.sentences, 16)
    options = dict(REPORT_OPTIONS)
    if args.report_sample:
        for key in ("linear", "sparse"):
            options[key] = {"per_batch": None, "max_sentences": 512}
    if args.null:
        from attnlens.loaders.random_init import random_init_copy
        from attnlens.report.null_run import NullOptions, sample_batches

        model = random_init_copy(model, NullOptions().seed).model
        batches = sample_batches(batches, NullOptions().max_sentences)
    caches = []
    with torch.no_grad():
        for batch in batches:
            caches.append(model.run_with_cache(**batch.model_inputs())[1])
    clock = time.perf_counter if args.wall else time.process_time
    for key in args.only.split(","):
        relative, name = PAIRS[key]
        module = importlib.import_module(relative.removesuffix(".py").replace("/", "."))
        classes = (old_class(args.before, relative, name), getattr(module, name))
        extra = (tokenizer,) if key in NEEDS_TOKENIZER else ()
        pair = [c.for_model(model, *extra, **options.get(key, {})) for c in classes]
        spent = [0.0, 0.0]
        with torch.no_grad():
            for i, (batch, cache) in enumerate(zip(batches, caches, strict=True)):
                for j in ((0, 1) if i % 2 == 0 else (1, 0)):
                    start = clock()
                    feed(model, pair[j], batch, cache)
                    spent[j] += clock() - start
            for j in (0, 1):  # what an analyzer still holds runs here
                start = clock()
                pair[j].state_dict()
                spent[j] += clock() - start
        ok, worst = same_state(*pair)
        kind = "wall" if args.wall else "CPU"
        print(f"{key}: {spent[0]:.2f} s -> {spent[1]:.2f} s {kind} ({spent[0] / spent[1]:.2f}x), "
              f"{len(batches)} batches; states agree: {ok} (largest difference {worst:.2e})")


if __name__ == "__main__":
    main()
