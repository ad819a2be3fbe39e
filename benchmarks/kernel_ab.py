"""What the C kernels' benchmarks share: their options, UD EWT dev's cached activations, and
the forms of an analyzer fed batch by batch in alternation (issue 29).

Each form is a kernel module (or None: the torch path) that the benchmark's analyzer module
sees while that form's analyzers are fed; the forms alternate batch by batch, their order
too, so that all of them see the same load of a shared machine.

``--levels`` (every kernel benchmark) adds the kernel's source built once per x86-64 level
this CPU runs (``x86-64``, ``x86-64-v3``, ``x86-64-v4``: tests/kernel_builds.py, one version
each) as forms beside the installed build, which runs the CPU's own clone: a level slower
than a lower one shows code the compiler handled badly on this CPU (avx2lin47: the linear
view's v3 clone was slower than plain x86-64 on an AVX2 machine, its vectors on the stack).
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).parent))
from corpus_pass import SHARED_UD, load_batches
from hot_paths import feed_all as feed

ROOT = Path(__file__).resolve().parents[1]  # the repository


def options(doc: str, profile: dict[str, Any] | None = None) -> argparse.ArgumentParser:
    """The common options: ``--sentences``, ``--threads``, ``--batch-tokens``, ``--wall``,
    and ``--profile`` (a flag, or one of ``profile``'s keys when given)."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=2001)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--batch-tokens", type=int, default=1024)
    parser.add_argument("--wall", action="store_true")
    parser.add_argument("--levels", action="store_true",
                        help="also each x86-64 level's build of the kernel, as forms")
    if profile is None:
        parser.add_argument("--profile", action="store_true")
    else:
        parser.add_argument("--profile", choices=list(profile))
    return parser


def level_forms(source: str, installed: ModuleType) -> dict[str, ModuleType]:
    """The kernel at ``source`` (a path under the repository) built once per x86-64 level
    this CPU runs, by name (``x86-64``, ...); the benchmarks compare each one's results
    with the installed build's."""
    import tempfile

    sys.path.insert(0, str(ROOT / "tests"))
    from kernel_builds import CPU_FLAGS, LEVEL_BUILDS, build_kernel

    builds = {}
    for name, (flags, needs) in LEVEL_BUILDS.items():
        if needs <= CPU_FLAGS:
            folder = Path(tempfile.mkdtemp(prefix=f"attnlens-{name}-"))
            builds[name] = build_kernel(ROOT / source, folder, flags)
    print(f"installed {installed.__file__}; built: {', '.join(builds)}")
    return builds


def cached_ewt(args: argparse.Namespace) -> tuple:
    """``(model, tokenizer, batches, caches)``: MiniLM, the first ``--sentences`` UD EWT dev
    sentences batched as ``analyze`` batches them (at most 64 sentences and
    ``--batch-tokens`` padded tokens), and each batch's cached activations."""
    torch.set_num_threads(args.threads)
    import attnlens

    model, tokenizer = attnlens.load()
    batches, _ = load_batches(tokenizer, model, SHARED_UD, args.sentences, 64,
                              args.batch_tokens)
    with torch.no_grad():
        caches = [model.run_with_cache(**batch.model_inputs())[1] for batch in batches]
    return model, tokenizer, batches, caches


def alternate(module: ModuleType, attribute: str, forms: dict[str, Any],
              make: Callable[[str], list], model, batches, caches, wall: bool
              ) -> tuple[dict[str, list], dict[str, float]]:
    """Each form's analyzers (``make(form)``) fed every batch, the forms alternating batch by
    batch with ``module.attribute`` set to the form's kernel; ``(analyzers, seconds)`` per
    form (CPU seconds, or wall seconds with ``wall``). The attribute is restored after."""
    kept = getattr(module, attribute)
    analyzers = {name: make(name) for name in forms}
    spent = dict.fromkeys(forms, 0.0)
    clock = time.perf_counter if wall else time.process_time
    names = list(forms)
    try:
        with torch.no_grad():
            for i, (batch, cache) in enumerate(zip(batches, caches, strict=True)):
                turn = i % len(names)
                for name in names[turn:] + names[:turn]:
                    setattr(module, attribute, forms[name])
                    start = clock()
                    feed(model, analyzers[name], batch, cache)
                    spent[name] += clock() - start
    finally:
        setattr(module, attribute, kept)
    return analyzers, spent


def print_times(args: argparse.Namespace, batches: list, spent: dict[str, float]) -> None:
    """Each form's seconds and its speed against the first form."""
    kind = "wall" if args.wall else "CPU"
    first = next(iter(spent.values()))
    print(f"{len(batches)} batches, {args.sentences} sentences, {args.threads} thread(s)")
    for name, seconds in spent.items():
        print(f"  {name:20s} {seconds:6.2f} s {kind}  ({first / seconds:.2f}x)")


def profile(module: ModuleType, attribute: str, kernel: Any, analyzers: list, model,
            batches, caches) -> None:
    """``analyzers`` fed every batch once more under cProfile with ``module.attribute`` set
    to ``kernel``; the 12 functions of most own time."""
    kept = getattr(module, attribute)
    setattr(module, attribute, kernel)
    try:
        with torch.no_grad(), cProfile.Profile() as profiler:
            for batch, cache in zip(batches, caches, strict=True):
                feed(model, analyzers, batch, cache)
    finally:
        setattr(module, attribute, kept)
    pstats.Stats(profiler).sort_stats("tottime").print_stats(12)
