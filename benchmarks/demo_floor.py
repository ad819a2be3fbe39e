"""The floor of `make demo` on this machine: what the demo cannot avoid, measured (issue 29).

`make demo` runs ``attnlens analyze`` on the embedded model and the sample treebank (43
sentences). Whatever the analyzers, the tables and the page cost, it must import its
libraries and run these forwards:

- **imports**: a fresh process importing what ``analyze`` imports before its first forward
  (wall seconds, the median of ``--rounds``; one process cannot share them);
- **corpus forward**: the bare HF eager forward with every pattern returned, over the demo's
  batches (16 sentences, 128 tokens), the forward the corpus pass needs;
- **null model forward**: the same forward again (the null model is MiniLM randomly
  initialised: the same shapes, the same cost) over the null pass's sample (every sentence of
  the sample treebank);
- **language-model probes**: the same forward over the language-model heads' own inputs
  (probes, haystacks, long probes) in the batches the measure uses (``lm_probes.input_sets``);
- **collapse variants**: ``VariantCollapse`` on its 32-sentence sample as ``analyze`` runs it
  (float64, one sentence at a time, one thread): its arithmetic is the float64 forwards of
  five block variants, most of it ``F.linear`` (docs/performance.md, demo39).

The forwards are timed in CPU seconds of this process (``time.process_time``) at one torch
thread, the least CPU time they take (more threads add their own waits), median of
``--rounds``. With every core busy all the time, the demo can end no sooner than

    floor = imports + (CPU seconds of the forwards) / cores

which leaves ``target - floor`` for everything else: model load, the analyzers, the tables,
the figures and the page.

    python benchmarks/demo_floor.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from corpus_pass import bare_forward, load_hf_eager

TARGET = 6.0
IMPORTS = ("import torch, attnlens.report.analyze, attnlens.loaders, attnlens.data.corpus")


def import_seconds(rounds: int) -> float:
    """Wall seconds of a fresh process importing what ``analyze`` imports (median)."""
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", IMPORTS], check=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def cpu_seconds(work) -> float:
    """CPU seconds of this process (every thread) while ``work()`` runs."""
    start = time.process_time()
    work()
    return time.process_time() - start


def variant_run(model, batches):
    """``VariantCollapse`` as ``analyze`` makes it (its 32-sentence sample), fed ``batches``."""
    from attnlens.measures.collapse.section import CollapseSection

    def run() -> None:
        (variants, _paths) = CollapseSection().analyzers(model, None)
        for batch in batches:
            variants.model_pass(model, batch)
        variants.result()

    return run


def floor_parts(rounds: int) -> dict[str, float]:
    """``{part: seconds}``: imports (wall) and each forward's CPU seconds (median)."""
    from lm_probes import input_sets

    from attnlens.data.corpus import load_corpus
    from attnlens.loaders import load
    from attnlens.measures.lm_heads.run import LmHeads
    from attnlens.report.null_run import NULL_SENTENCES, sample_batches
    from attnlens.stream.runner import run_analyzers

    torch.set_num_threads(1)
    model, tokenizer = load(None)
    hf = load_hf_eager(model.cfg.source["path"])
    batches = load_corpus().batches(tokenizer, 16, 128)
    lm = LmHeads()
    run_analyzers(model, batches, lm.corpus_analyzers(model, tokenizer), show_progress=False)
    probe_batches = [b for inputs, _ in input_sets(lm, model).values() for b in inputs]
    null_batches = sample_batches(batches, NULL_SENTENCES)

    def forwards(chosen):
        return lambda: [bare_forward(hf, b) for b in chosen]

    works = {"corpus forward": forwards(batches),
             "null model forward": forwards(null_batches),
             "language-model probes' forwards": forwards(probe_batches),
             "collapse variants (float64)": variant_run(model, batches)}
    times: dict[str, list[float]] = {name: [] for name in works}
    with torch.no_grad():
        for _ in range(rounds):
            for name, work in works.items():
                times[name].append(cpu_seconds(work))
    return {"imports (wall)": import_seconds(rounds),
            **{name: statistics.median(t) for name, t in times.items()}}


def forward_seconds(parts: dict[str, float]) -> float:
    """The forwards' CPU seconds of ``floor_parts`` (every part but the imports)."""
    return sum(seconds for name, seconds in parts.items() if name != "imports (wall)")


def demo_floor(rounds: int = 3) -> tuple[float, dict[str, float], int]:
    """``(floor seconds, parts, cores)``: imports + the forwards' CPU seconds / cores."""
    parts = floor_parts(rounds)
    cores = len(os.sched_getaffinity(0))
    return parts["imports (wall)"] + forward_seconds(parts) / cores, parts, cores


def describe(floor: float, parts: dict[str, float], cores: int) -> str:
    """The floor and its parts, one line per part."""
    lines = [f"  {name:42s} {seconds:6.2f} s" for name, seconds in parts.items()]
    lines.append(f"floor: imports {parts['imports (wall)']:.2f} s + forwards "
                 f"{forward_seconds(parts):.2f} CPU s / {cores} cores = {floor:.2f} s; the target "
                 f"{TARGET:g} s leaves {TARGET - floor:.2f} s for model load, analyzers, "
                 "tables, figures and page")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(describe(*demo_floor(args.rounds)))


if __name__ == "__main__":
    main()
