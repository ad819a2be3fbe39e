"""Issue 29 item 4: the language-model heads' own passes against the forward they need.

``LmHeads.compute`` runs three passes of its own inputs after the corpus pass: the synthetic
probes ``first + R + R`` (``--probe-sequences``, 200 of 50 tokens on MiniLM), the haystacks
(25 of ~211 tokens) and the long probes of the streaming view (10 of ~266 tokens), each
through ``stream.runner.run_analyzers`` with its analyzer (``ProbeScores``,
``RetrievalScores``, ``StreamingError``). For each input set, in the batches the measure uses,
this prints (interleaved over ``--rounds``, the median):

- **HF eager**: Hugging Face's eager forward with ``output_attentions=True`` (the forward
  that forms every pattern, as in ``corpus_pass.py``), ``AutoModel``, no hooks;
- **attnlens bare**: attnlens' own forward without hooks (its SDPA fast path);
- **probes**: attnlens' hooked forward feeding the analyzer, and the ratios of it to both
  (target: within 1.3x the HF eager forward);

then the whole ``LmHeads.compute`` (probes, copying scores, role tests; the ablations where
the model has a metric for them) against the HF eager forward of all three input sets.

    python benchmarks/lm_probes.py [--threads 2] [--rounds 3] [--cpu]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_record import record, this_command
from corpus_pass import bare_forward, load_hf_eager


def input_sets(lm, model):
    """``{name: (batches, make_analyzer)}`` exactly as ``LmHeads._synthetic`` builds them."""
    from attnlens.measures.lm_heads.probes import ProbeScores
    from attnlens.measures.lm_heads.retrieval import RetrievalScores, haystacks
    from attnlens.measures.lm_heads.run import HAYSTACKS_PER_PROBE, max_tokens
    from attnlens.measures.lm_heads.streaming import StreamingError

    s, frame = lm.settings, lm._frame(model)
    stacks = haystacks(frame["vocab"], max(1, int(s.probe_sequences * HAYSTACKS_PER_PROBE)),
                       s.probe_seed + 2, frame["first"], frame["closing"], frame["pad"],
                       frame["special"], n_ctx=max_tokens(model))
    sets = {
        "probes": (lm.probe_set(model, frame).batches(),
                   lambda: ProbeScores.for_model(model, lm.inference)),
        "haystacks": (stacks.batches(), lambda: RetrievalScores.for_model(model, lm.inference)),
    }
    long = lm.long_probes(model, frame)
    if long is not None:
        sets["long probes"] = (long.batches(8), lambda: StreamingError.for_model(
            model, s.sink_tokens, s.window))
    return sets


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cpu", action="store_true", help="process CPU time, not wall time")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    clock = time.process_time if args.cpu else time.perf_counter

    from attnlens.data.corpus import load_corpus
    from attnlens.loaders import load
    from attnlens.measures.lm_heads.run import LmHeads
    from attnlens.stream.runner import run_analyzers

    model, tokenizer = load(None)
    hf = load_hf_eager(model.cfg.source["path"])
    lm = LmHeads()
    corpus_analyzers = lm.corpus_analyzers(model, tokenizer)
    sample = load_corpus().batches(tokenizer, 16, 128)
    run_analyzers(model, sample, corpus_analyzers, show_progress=False)
    sets = input_sets(lm, model)

    @torch.no_grad()
    def attnlens_bare(batches) -> None:
        for batch in batches:
            model(**batch.model_inputs(), return_type="hidden")

    def timed(run) -> float:
        began = clock()
        run()
        return clock() - began

    runs = {name: {"HF eager": lambda b=batches: [bare_forward(hf, x) for x in b],
                   "attnlens bare": lambda b=batches: attnlens_bare(b),
                   # as LmHeads._synthetic runs them
                   "probes": lambda b=batches, m=make: run_analyzers(
                       model, b, [m()], show_progress=False, stop_when_fed=True)}
            for name, (batches, make) in sets.items()}

    def compute() -> None:
        lm._result = None
        lm.compute(model)

    times: dict[tuple[str, str], list[float]] = {}
    for _ in range(args.rounds):
        for name, kinds in runs.items():
            for kind, run in kinds.items():
                times.setdefault((name, kind), []).append(timed(run))
        times.setdefault(("all", "LmHeads.compute"), []).append(timed(compute))
    median = {key: statistics.median(v) for key, v in times.items()}
    unit = "CPU s" if args.cpu else "s"
    print(f"threads {args.threads}, {args.rounds} rounds interleaved, medians ({unit})")
    print(f"{'inputs':12s} {'tokens':>7s} {'HF eager':>9s} {'attnlens bare':>14s} "
          f"{'probes':>8s} {'/ HF eager':>10s} {'/ bare':>7s}")
    eager_all = 0.0
    ratios = {}
    for name, (batches, _) in sets.items():
        tokens = sum(int(b.input_ids.numel()) for b in batches)
        eager, bare, probe = (median[(name, k)] for k in ("HF eager", "attnlens bare",
                                                          "probes"))
        eager_all += eager
        print(f"{name:12s} {tokens:7d} {eager:9.2f} {bare:14.2f} {probe:8.2f} "
              f"{probe / eager:10.2f} {probe / bare:7.2f}")
        ratios[name] = probe / eager
    whole = median[("all", "LmHeads.compute")]
    print(f"LmHeads.compute (every pass, tables, tests): {whole:.2f} {unit} = "
          f"{whole / eager_all:.2f}x the HF eager forward of its inputs ({eager_all:.2f})")
    worst = max(ratios.values())
    record("the language-model heads' probe passes / HF eager forward with `output_attentions`, "
           "same inputs and batches, interleaved", "<= 1.3",
           f"{worst:.2f} (worst of " + ", ".join(f"{name} {r:.2f}" for name, r in ratios.items())
           + f"; LmHeads.compute {whole / eager_all:.2f}x; "
           f"{'CPU' if args.cpu else 'wall'} time, median of {args.rounds} round"
           + ("s)" if args.rounds > 1 else ")"),
           worst <= 1.3, this_command(), key="lm_probes")


if __name__ == "__main__":
    main()
