"""The per-row analyzers of issue 29 (branch rows29) as on main and now, interleaved.

The heads section's analyzers (head statistics, head examples, positional, syntactic, rare
words, head behaviour) and the language-model heads' corpus analyzers (sink scores, sink
keys, streaming error) are fed, through each version's own ``LayerFeeder``, the activations
of the first ``--sentences`` UD EWT dev sentences cached beforehand (MiniLM, the command's
length-sorted batches of ``--batch-size``). ``--before`` is a checkout of main: its
``attnlens`` package is copied under the name ``attnlens_before`` (imports rewritten), so the
old analyzers run with their old helpers (``PatternBlock``, ``TokenMeasures``, word pooling).
The two versions alternate batch by batch (order swapped every batch), so both see the same
load; each analyzer's seconds in its feeding methods are printed for both, with the largest
difference between their states (``state_dict``) field by field.

    python benchmarks/rows_pass.py --before /work/main [--sentences 400] [--cpu]
        [--batch-size 16] [--batch-tokens 0] [--profile]
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
import corpus_pass
from corpus_pass import SHARED_UD, load_batches, timed_methods

CLOCK = time.perf_counter


def before_package(root: Path, into: Path) -> str:
    """Copy ``root/attnlens`` to ``into/attnlens_before`` with its imports renamed."""
    target = into / "attnlens_before"
    shutil.copytree(root / "attnlens", target, ignore=shutil.ignore_patterns("__pycache__"))
    pattern = re.compile(r"\battnlens\.")
    for path in target.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        text = pattern.sub("attnlens_before.", text)
        text = re.sub(r"^(\s*)(from|import) attnlens(\s)", r"\1\2 attnlens_before\3", text,
                      flags=re.M)
        path.write_text(text, encoding="utf-8")
    sys.path.insert(0, str(into))
    return "attnlens_before"


def analyzers_of(package: str, model, tokenizer) -> dict:
    """The per-row analyzers of ``package`` (``attnlens`` or its copy), as the sections
    make them (one shared word-level context)."""
    import importlib

    heads = importlib.import_module(f"{package}.measures.heads.head_stats")
    examples = importlib.import_module(f"{package}.measures.heads.examples")
    positional = importlib.import_module(f"{package}.measures.heads.positional")
    syntactic = importlib.import_module(f"{package}.measures.heads.syntactic")
    rare = importlib.import_module(f"{package}.measures.heads.rare_words")
    behaviour = importlib.import_module(f"{package}.measures.heads.behaviour")
    sinks = importlib.import_module(f"{package}.measures.lm_heads.sinks")
    streaming = importlib.import_module(f"{package}.measures.lm_heads.streaming")
    words = importlib.import_module(f"{package}.data.words").WordAttentionContext()
    found = {
        "head statistics": heads.HeadStats.for_model(model, tokenizer),
        "head examples": examples.HeadExamples.for_model(model, tokenizer),
        "positional": positional.PositionalHeads.for_model(model),
        "syntactic heads": syntactic.SyntacticHeads.for_model(model, words=words),
        "rare words": rare.RareWordHeads.for_model(model, words=words),
        "head behaviour": behaviour.HeadBehaviour.for_model(model),
        "sink scores": sinks.SinkScores.for_model(model),
        "sink keys": sinks.SinkKeys.for_model(model),
        "streaming error": streaming.StreamingError.for_model(model),
    }
    feeder = importlib.import_module(f"{package}.stream.feeder").LayerFeeder
    return found, feeder


def largest_difference(a, b, where: str = "") -> tuple[float, str]:
    """The largest absolute difference between two state values, and where."""
    if isinstance(a, torch.Tensor):
        if a.shape != b.shape:
            return float("inf"), f"{where} shape {tuple(a.shape)} vs {tuple(b.shape)}"
        if a.dtype == torch.bool or not a.is_floating_point():
            return (0.0 if torch.equal(a, b) else float("inf")), where
        x, y = a.double(), b.double()
        same_inf = (x == y)
        diff = torch.where(same_inf, torch.zeros_like(x), (x - y).abs())
        diff = torch.nan_to_num(diff, nan=0.0 if bool((x.isnan() == y.isnan()).all())
                                else float("inf"))
        return (float(diff.max()) if diff.numel() else 0.0), where
    if isinstance(a, dict) and not isinstance(a, Counter):
        if set(a) != set(b):
            return float("inf"), f"{where} keys differ"
        found = [largest_difference(a[k], b[k], f"{where}.{k}") for k in a]
        return max(found, default=(0.0, where), key=lambda f: f[0])
    if isinstance(a, Counter):
        if set(a) != set(b):
            return float("inf"), f"{where} keys differ"
        return max(((abs(a[k] - b[k]), f"{where}[{k}]") for k in a), default=(0.0, where),
                   key=lambda f: f[0])
    if isinstance(a, list):
        if len(a) != len(b):
            return float("inf"), f"{where} lengths {len(a)} vs {len(b)}"
        found = [largest_difference(x, y, f"{where}[{i}]") for i, (x, y) in
                 enumerate(zip(a, b, strict=True))]
        return max(found, default=(0.0, where), key=lambda f: f[0])
    return (0.0 if a == b else float("inf")), where


def feed(feeder, batch, cache: dict[str, torch.Tensor]) -> None:
    """One batch through a ``LayerFeeder``, names in the order the forward makes them."""
    feeder.begin(batch)
    for name in sorted(cache, key=lambda n: (int(n.split(".")[1]), n.endswith("pattern"))):
        if name in feeder.names:
            feeder.save_as(name, cache[name])
    feeder.end()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, required=True)
    parser.add_argument("--sentences", type=int, default=400)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--batch-tokens", type=int, default=0,
                        help="padded tokens per batch, as analyze's --batch-tokens (0: none)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--cpu", action="store_true", help="process CPU time")
    parser.add_argument("--profile", action="store_true", help="cProfile of the new version")
    args = parser.parse_args()
    sys.stdout.reconfigure(line_buffering=True)
    torch.set_num_threads(args.threads)
    global CLOCK
    if args.cpu:
        CLOCK = corpus_pass.CLOCK = time.process_time  # timed_methods reads corpus_pass.CLOCK
    import attnlens

    scratch = Path(tempfile.mkdtemp(prefix="rows29-before-"))
    old_package = before_package(args.before, scratch)
    model, tokenizer = attnlens.load()
    batches, _ = load_batches(tokenizer, model, SHARED_UD if SHARED_UD.is_file() else None,
                              args.sentences, args.batch_size, args.batch_tokens)
    names = lambda n: n.endswith("attn.hook_pattern") or n.endswith("attn.hook_v")  # noqa: E731
    caches = []
    with torch.no_grad():
        for batch in batches:
            _, cache = model.run_with_cache(**batch.model_inputs(), names_filter=names)
            caches.append({n: cache[n] for n in cache})
    versions = []
    totals: list[dict[str, float]] = [{}, {}]
    for j, package in enumerate((old_package, "attnlens")):
        found, feeder_class = analyzers_of(package, model, tokenizer)
        for key, analyzer in found.items():
            timed_methods(analyzer, totals[j], key)
        versions.append((found, feeder_class(model, list(found.values()))))
    profiler = None
    if args.profile:
        import cProfile

        profiler = cProfile.Profile()
    whole = [0.0, 0.0]
    with torch.no_grad():
        for i, (batch, cache) in enumerate(zip(batches, caches, strict=True)):
            for j in ((0, 1) if i % 2 == 0 else (1, 0)):
                if profiler is not None and j == 1:
                    profiler.enable()
                start = CLOCK()
                feed(versions[j][1], batch, cache)
                whole[j] += CLOCK() - start
                if profiler is not None and j == 1:
                    profiler.disable()
    n = sum(b.size for b in batches)
    print(f"{n} sentences, {len(batches)} batches of at most {args.batch_size} sentences "
          f"and {args.batch_tokens or 'any number of'} tokens, "
          f"{'CPU' if args.cpu else 'wall'} time, {args.threads} threads")
    print(f"{'analyzer':20s} {'before':>8s} {'now':>8s} {'speed-up':>9s}  largest state "
          "difference")
    old, new = versions[0][0], versions[1][0]
    for key in old:
        diff, where = largest_difference(old[key].state_dict()["state"],
                                         new[key].state_dict()["state"], key)
        a, b = totals[0][key], totals[1][key]
        print(f"{key:20s} {a:8.2f} {b:8.2f} {a / max(b, 1e-9):8.2f}x  {diff:.3g} ({where})")
    print(f"{'all (feeder)':20s} {whole[0]:8.2f} {whole[1]:8.2f} "
          f"{whole[0] / max(whole[1], 1e-9):8.2f}x")
    if profiler is not None:
        import pstats

        pstats.Stats(profiler).sort_stats("tottime").print_stats(35)
    shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
