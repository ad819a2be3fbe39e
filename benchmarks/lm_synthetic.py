"""The language-model probes' own runs (``LmHeads.synthetic_runs``) as on another checkout
and as here, on MiniLM, in CPU time, and whether they give the same states.

Each round runs one fresh process per checkout (``--before`` first on even rounds, this tree
first on odd ones), so both see the same load of a shared machine: the process loads MiniLM,
runs the corpus analyzers over the sample corpus (``LmHeads.synthetic_runs`` needs them),
runs ``synthetic_runs`` once to warm up, then times it (``time.process_time``, every thread of
the process) and stores the states of the probe scores, retrieval scores and long-probe
streaming errors. The states of the two checkouts are then compared field by field.

    python benchmarks/lm_synthetic.py --before /work/main [--rounds 3] [--threads 1]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parents[1]


def child(out: str, threads: int) -> None:
    """One timed ``synthetic_runs`` in this process; its states and seconds to ``out``."""
    import time

    torch.set_num_threads(threads)
    from attnlens.data.corpus import load_corpus
    from attnlens.loaders import load
    from attnlens.measures.lm_heads.run import LmHeads
    from attnlens.stream.runner import run_analyzers

    model, tokenizer = load(None)
    lm = LmHeads()
    analyzers = lm.corpus_analyzers(model, tokenizer)
    run_analyzers(model, load_corpus().batches(tokenizer, 16, 128), analyzers,
                  show_progress=False)
    lm.synthetic_runs(model)  # warm-up
    began = time.process_time()
    probes, retrieval, long_errors, _, facts = lm.synthetic_runs(model)
    seconds = time.process_time() - began
    states = {name: a.state_dict()["state"] for name, a in
              (("probes", probes), ("retrieval", retrieval), ("long", long_errors))
              if a is not None}
    torch.save({"seconds": seconds, "states": states, "facts": facts,
                "module": sys.modules["attnlens"].__file__}, out)


def largest_difference(a, b) -> tuple[bool, float]:
    """(every field bitwise equal, largest absolute difference)."""
    if isinstance(a, dict):
        pairs = [largest_difference(a[k], b[k]) for k in a] if a.keys() == b.keys() else [
            (False, float("inf"))]
    elif isinstance(a, (list, tuple)):
        pairs = ([largest_difference(x, y) for x, y in zip(a, b, strict=True)]
                 if len(a) == len(b) else [(False, float("inf"))])
    elif isinstance(a, torch.Tensor):
        same = a.shape == b.shape and torch.equal(a, b)
        worst = float((a.double() - b.double()).abs().max()) if a.numel() and not same else 0.0
        pairs = [(same, worst)]
    else:
        pairs = [(a == b, 0.0)]
    return all(p[0] for p in pairs), max([p[1] for p in pairs], default=0.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, required=True, help="a checkout of main")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.threads)
        return
    trees = {"before": args.before.resolve(), "now": HERE}
    seconds: dict[str, list[float]] = {k: [] for k in trees}
    last = {}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for key in (("before", "now") if r % 2 == 0 else ("now", "before")):
                out = str(Path(tmp) / f"{key}.pt")
                env = dict(os.environ, PYTHONPATH=str(trees[key]))
                subprocess.run([sys.executable, __file__, "--before", str(args.before),
                                "--threads", str(args.threads), "--child", out],
                               check=True, env=env, cwd=trees[key])
                last[key] = torch.load(out, weights_only=False)
                seconds[key].append(last[key]["seconds"])
                print(f"round {r + 1} {key:6s} {last[key]['seconds']:.2f} CPU s "
                      f"({last[key]['module']})", flush=True)
    before, now = (statistics.median(seconds[k]) for k in ("before", "now"))
    same, worst = largest_difference(last["before"]["states"], last["now"]["states"])
    print(f"LmHeads.synthetic_runs, {args.threads} thread(s), median of {args.rounds}: "
          f"{before:.2f} -> {now:.2f} CPU s ({before / now:.2f}x); states bitwise equal: "
          f"{same} (largest difference {worst:.2e}); facts equal: "
          f"{last['before']['facts'] == last['now']['facts']}")


if __name__ == "__main__":
    main()
