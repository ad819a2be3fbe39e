"""CPU time of the fixed costs that grow with the corpus, two checkouts alternated (fixed34).

Times, at one torch thread with ``time.process_time`` in a fresh process per checkout
(``--before TREE``, then this one, ``--rounds`` times; each checkout's own code through
``PYTHONPATH``):

- ``corpus read``: ``load_corpus`` of the treebank (`analyze`'s ``corpus read``);
- ``tokenization``: ``Corpus.batches`` as the command calls it (``corpus tokenized``);
- ``heads tables``: the heads section's ``write`` and its table files on the treebank's
  analyzer states (`analyze`'s heads ``tables and figures``; figures drawn in-process).
  The states come from one heads-only pass in this checkout, saved by ``state_dict`` and
  loaded in each (the analyzers' states are the same in both).

The median of ``--inner`` calls after a warm-up, per stage and checkout, and their ratio:

    python benchmarks/fixed_parts.py --before /work/main [--treebank FILE] [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
EWT = HERE.parent / "shared" / "data" / "ud-ewt" / "en_ewt-ud-dev.conllu"


def _heads(model, tokenizer):
    from attnlens.measures.heads.section import HeadRolesSection

    section = HeadRolesSection.for_report()
    return section, section.analyzers(model, tokenizer)


def save_states(treebank: Path, path: Path) -> None:
    """One heads-only pass over the treebank; the analyzers' states saved to ``path``."""
    import torch

    from attnlens import load
    from attnlens.data.corpus import load_corpus
    from attnlens.data.text import REPORT_BATCH_SIZE, REPORT_BATCH_TOKENS
    from attnlens.stream.runner import run_analyzers

    model, tokenizer = load()
    batches = load_corpus(treebank=str(treebank)).batches(
        tokenizer, REPORT_BATCH_SIZE, 512, REPORT_BATCH_TOKENS)
    _, analyzers = _heads(model, tokenizer)
    analyzers = run_analyzers(model, batches, analyzers, show_progress=False)
    torch.save([a.state_dict() for a in analyzers], path)


def child(treebank: Path, states: Path, inner: int) -> dict[str, float]:
    import torch

    torch.set_num_threads(1)
    from attnlens import load
    from attnlens.data.corpus import load_corpus
    from attnlens.data.text import REPORT_BATCH_SIZE, REPORT_BATCH_TOKENS
    from attnlens.report.analyze import _write_held
    from attnlens.runs.io import held_tables

    model, tokenizer = load()
    section, analyzers = _heads(model, tokenizer)
    for analyzer, state in zip(analyzers, torch.load(states, weights_only=False), strict=True):
        analyzer.load_state_dict(state)
    section.tokenizer = tokenizer
    times: dict[str, list[float]] = {"corpus read": [], "tokenization": [], "heads tables": []}
    for call in range(inner + 1):  # the first call warms caches and lazy imports
        start = time.process_time()
        corpus = load_corpus(treebank=str(treebank))
        read = time.process_time()
        corpus.batches(tokenizer, REPORT_BATCH_SIZE, 512, REPORT_BATCH_TOKENS)
        tokenized = time.process_time()
        with tempfile.TemporaryDirectory() as out, held_tables() as held:
            output = section.write(model, analyzers, Path(out), ("svg",))
        with tempfile.TemporaryDirectory() as out:
            _write_held(output, held, [], None, Path(out))
        if call:
            for key, spent in zip(times, (read - start, tokenized - read,
                                          time.process_time() - tokenized), strict=True):
                times[key].append(spent)
    return {key: statistics.median(values) for key, values in times.items()}


def run(tree: Path, treebank: Path, states: Path, inner: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    command = [str(tree / ".venv" / "bin" / "python"), str(Path(__file__).resolve()),
               "--child", "--treebank", str(treebank), "--states", str(states),
               "--inner", str(inner)]
    done = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"{tree}: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path)
    parser.add_argument("--treebank", type=Path, default=EWT)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--inner", type=int, default=3)
    parser.add_argument("--child", action="store_true")
    parser.add_argument("--states", type=Path)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.treebank, args.states, args.inner)))
        return
    if args.before is None:
        parser.error("--before TREE is required (the checkout to compare with)")
    with tempfile.TemporaryDirectory() as tmp:
        states = Path(tmp) / "heads_states.pt"
        save_states(args.treebank, states)
        found: dict[str, list[dict[str, float]]] = {"before": [], "now": []}
        for round_ in range(args.rounds):
            for label, tree in (("before", args.before.resolve()), ("now", HERE)):
                found[label].append(run(tree, args.treebank, states, args.inner))
                print(f"round {round_ + 1} {label}: "
                      + ", ".join(f"{k} {v:.3f}" for k, v in found[label][-1].items()),
                      flush=True)
    print(f"{'stage (CPU s, median)':24s} {'before':>8s} {'now':>8s} {'ratio':>6s}")
    for key in found["now"][0]:
        before = statistics.median(r[key] for r in found["before"])
        now = statistics.median(r[key] for r in found["now"])
        print(f"{key:24s} {before:8.3f} {now:8.3f} {before / now:6.2f}")


if __name__ == "__main__":
    sys.exit(main())
