"""The corpus pass's cost outside the analyzers, batch sizes, and threads (issue 29, rows31).

Three questions, each answered in one process over the same UD EWT dev sentences:

- ``forward``: where the pass's time goes besides the analyzers. Batch by batch, in rotating
  order: Hugging Face's eager forward with ``output_attentions=True`` (the bare forward),
  attnlens' forward without hooks, attnlens' forward with a no-op hook on every name the
  analyzers read (the hooks' own cost), and the whole pass (``run_analyzers`` with every
  analyzer of ``analyze``, each analyzer's feeding methods timed). The pass minus its
  analyzers minus the hooked forward is the runner's and feeder's dispatch. ``--profile``
  prints cProfile's top functions of the hooked attnlens forward and of HF's.
- ``budgets``: the pass under several token budgets (``--budgets 1024,2048``), the budgets
  alternating round by round; each analyzer's seconds per budget over the same sentences,
  so an analyzer whose cost grows faster than the batch shows a ratio above the bare
  forward's.
- ``threads``: the analyzers' feeding methods at one intra-op thread against ``--threads``
  (the forward at ``--threads`` in both), two copies of every analyzer fed the same batches
  alternately (``run_analyzers(..., analyzer_threads=1)`` against ``0``); wall time of
  each analyzer and of the pass (also CPU), and the largest difference between the two
  copies' states.

    python benchmarks/pass_overhead.py forward [--max-sentences 600] [--cpu] [--profile]
    python benchmarks/pass_overhead.py budgets --budgets 512,1024,2048,4096 [--rounds 2]
    python benchmarks/pass_overhead.py threads [--threads 2]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
import corpus_pass
from corpus_pass import (
    SHARED_UD,
    bare_forward,
    load_batches,
    load_hf_eager,
    timed_methods,
)

FEEDING = corpus_pass.FEEDING


def make_analyzers(model, tokenizer) -> list:
    """Every analyzer of ``analyze``, as its sections make them (fresh states)."""
    from attnlens.measures.lm_heads.run import LmHeads
    from attnlens.report.analyze import default_sections

    sections = default_sections(LmHeads())
    found = []
    for section in sections:
        found += [(f"{section.name}: {type(a).__name__}", a)
                  for a in section.analyzers(model, tokenizer)]
    return found


@torch.no_grad()
def forward_figures(model, tokenizer, batches, hf, clock, profile: bool) -> None:
    from attnlens.stream.feeder import LayerFeeder
    from attnlens.stream.runner import run_analyzers

    named = make_analyzers(model, tokenizer)
    totals: dict[str, float] = {}
    for key, analyzer in named:
        timed_methods(analyzer, totals, key)
    analyzers = [a for _, a in named]
    names = LayerFeeder(model, analyzers).names

    def noop(x, hook):
        return None

    from attnlens.hooks import accepts_query_blocks

    hooks = [(n, accepts_query_blocks(noop)) for n in names]

    def hf_forward(batch):
        bare_forward(hf, batch)

    def plain(batch):
        model(**batch.model_inputs(), return_type="hidden")

    def hooked(batch):
        with model.hooks(fwd_hooks=hooks):
            model(**batch.model_inputs(), return_type="hidden")

    def whole_pass(batch):
        run_analyzers(model, [batch], analyzers, show_progress=False)

    runs = {"HF eager, output_attentions=True": hf_forward,
            "attnlens forward, no hooks": plain,
            f"attnlens forward, {len(hooks)} no-op hooks": hooked,
            "corpus pass (run_analyzers, every analyzer)": whole_pass}
    seconds = dict.fromkeys(runs, 0.0)
    keys = list(runs)
    for i, batch in enumerate(batches):
        for j in range(len(keys)):  # rotate the order batch by batch
            key = keys[(i + j) % len(keys)]
            start = clock()
            runs[key](batch)
            seconds[key] += clock() - start
    bare = seconds[keys[0]]
    for key in keys:
        print(f"  {key:48s} {seconds[key]:7.2f} s  {seconds[key] / bare:5.2f}x HF")
    analyzers_s = sum(totals.values())
    hooked_s = seconds[keys[2]]
    print(f"  {'analyzers (feeding methods)':48s} {analyzers_s:7.2f} s")
    print(f"  {'pass - analyzers - hooked forward (dispatch)':48s} "
          f"{seconds[keys[3]] - analyzers_s - hooked_s:7.2f} s")
    if profile:
        import cProfile
        import pstats

        for key in keys[:3:2]:
            profiler = cProfile.Profile()
            profiler.enable()
            for batch in batches:
                runs[key](batch)
            profiler.disable()
            print(f"--- cProfile: {key}")
            pstats.Stats(profiler).sort_stats("tottime").print_stats(18)


@torch.no_grad()
def budget_figures(model, tokenizer, treebank, max_sentences, batch_size, budgets, rounds,
                   hf, clock) -> None:
    from attnlens.stream.runner import run_analyzers

    batchings = {b: load_batches(tokenizer, model, treebank, max_sentences, batch_size, b)[0]
                 for b in budgets}
    best: dict[int, dict[str, float]] = {}
    for r in range(rounds):
        order = budgets if r % 2 == 0 else budgets[::-1]
        for budget in order:
            named = make_analyzers(model, tokenizer)
            totals: dict[str, float] = {}
            for key, analyzer in named:
                timed_methods(analyzer, totals, key)
            analyzers = [a for _, a in named]
            bare = ours = 0.0
            for batch in batchings[budget]:
                start = clock()
                bare_forward(hf, batch)
                bare += clock() - start
                start = clock()
                run_analyzers(model, [batch], analyzers, show_progress=False)
                ours += clock() - start
            totals["(bare HF forward)"] = bare
            totals["(corpus pass)"] = ours
            totals["(analyzers)"] = sum(v for k, v in totals.items() if not k.startswith("("))
            kept = best.setdefault(budget, totals)
            for key, value in totals.items():
                kept[key] = min(kept[key], value)
    for budget in budgets:
        found = batchings[budget]
        tokens = sum(int(b.attention_mask.sum()) for b in found)
        slots = sum(b.attention_mask.numel() for b in found)
        print(f"  budget {budget}: {len(found)} batches, padding {1 - tokens / slots:.1%}, "
              f"largest batch {max(b.size for b in found)} sentences")
    first = budgets[0]
    head = "".join(f"{b:>9d}" for b in budgets)
    print(f"  {'seconds (best of ' + str(rounds) + ')':46s}{head}   ratio to {first}")
    keys = sorted(best[first], key=lambda k: -best[first][k])
    for key in keys:
        row = "".join(f"{best[b][key]:9.2f}" for b in budgets)
        ratios = " ".join(f"{best[b][key] / max(best[first][key], 1e-9):5.2f}"
                          for b in budgets[1:])
        print(f"  {key:46s}{row}   {ratios}")


@torch.no_grad()
def thread_figures(model, tokenizer, batches, threads: int) -> None:
    from rows_pass import largest_difference

    from attnlens.stream.runner import run_analyzers

    copies, walls = [], [{}, {}]
    for j in range(2):
        named = make_analyzers(model, tokenizer)
        for key, analyzer in named:
            timed_methods(analyzer, walls[j], key)  # wall time
        copies.append(named)
    passes = [[0.0, 0.0], [0.0, 0.0]]  # [one thread, N threads] x [wall, CPU]
    for i, batch in enumerate(batches):
        for j in ((0, 1) if i % 2 == 0 else (1, 0)):
            analyzers = [a for _, a in copies[j]]
            wall, cpu = time.perf_counter(), time.process_time()
            run_analyzers(model, [batch], analyzers, show_progress=False,
                          analyzer_threads=1 if j == 0 else 0)
            passes[j][0] += time.perf_counter() - wall
            passes[j][1] += time.process_time() - cpu
    print(f"  {'analyzer':46s} {'1 thread':>9s} {str(threads) + ' threads':>10s}   "
          f"(wall s in feeding methods)   largest state difference")
    for (key, one), (_, many) in zip(copies[0], copies[1], strict=True):
        diff, _ = largest_difference(one.state_dict()["state"], many.state_dict()["state"],
                                         key)
        print(f"  {key:46s} {walls[0][key]:9.2f} {walls[1][key]:10.2f}   {diff:.3g}")
    print(f"  {'all analyzers':46s} {sum(walls[0].values()):9.2f} "
          f"{sum(walls[1].values()):10.2f}")
    print(f"  {'whole pass (wall)':46s} {passes[0][0]:9.2f} {passes[1][0]:10.2f}")
    print(f"  {'whole pass (CPU of the process)':46s} {passes[0][1]:9.2f} "
          f"{passes[1][1]:10.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=("forward", "budgets", "threads"))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--max-sentences", type=int, default=600, help="first N (0: all)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--batch-tokens", type=int, default=1024)
    parser.add_argument("--budgets", default="1024,2048")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--cpu", action="store_true", help="process CPU time, not wall")
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    sys.stdout.reconfigure(line_buffering=True)
    torch.set_num_threads(args.threads)
    clock = time.process_time if args.cpu else time.perf_counter
    corpus_pass.CLOCK = clock  # timed_methods reads it
    import attnlens

    treebank = SHARED_UD if SHARED_UD.is_file() else None
    max_sentences = args.max_sentences or None
    model, tokenizer = attnlens.load()
    hf = load_hf_eager(model.cfg.source["path"])
    print(f"{args.what}: {treebank or 'sample treebank'}, {args.max_sentences or 'all'} "
          f"sentences, {args.threads} threads, "
          f"{'CPU time' if args.cpu else 'wall time'}")
    if args.what == "budgets":
        budgets = [int(b) for b in args.budgets.split(",")]
        warm, _ = load_batches(tokenizer, model, treebank, 64, args.batch_size, budgets[0])
        bare_forward(hf, warm[0])
        budget_figures(model, tokenizer, treebank, max_sentences, args.batch_size, budgets,
                       args.rounds, hf, clock)
        return
    batches, _ = load_batches(tokenizer, model, treebank, max_sentences, args.batch_size,
                              args.batch_tokens)
    bare_forward(hf, batches[0])  # warm-up
    if args.what == "forward":
        forward_figures(model, tokenizer, batches, hf, clock, args.profile)
    else:
        corpus_pass.CLOCK = time.perf_counter
        thread_figures(model, tokenizer, batches, args.threads)


if __name__ == "__main__":
    main()
