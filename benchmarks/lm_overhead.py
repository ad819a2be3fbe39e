"""Where the language-model probes' CPU seconds go: the forward's arithmetic or overhead.

For each input set of ``LmHeads`` (the probes and haystacks of ``synthetic_runs`` in the
demo's child, the long probes in its main process), in the batches the measure uses, at
``--threads`` (1: as the child runs), interleaved over ``--rounds`` in one process, the
median CPU seconds (``time.process_time``) of:

- **HF eager**: Hugging Face's eager forward with every pattern returned (``AutoModel``);
- **patterns, no analyzer**: attnlens' forward as the probes run it (manual attention forming
  every pattern, hooks, the feeder, stopped once fed) with a reader of the same hooks that
  does nothing: the forward and its hook machinery, without the analyzer's arithmetic;
- **probes**: the measure's run (``run_analyzers`` with its analyzer, ``stop_when_fed``);
  ``analyzer`` is the part of it spent in the analyzer's own methods;

and the building of the probes' inputs (the frame: ordinary vocabulary and special tokens;
the probe set, haystacks and long probes), as ``LmHeads._synthetic`` builds them.

    python benchmarks/lm_overhead.py [--threads 1] [--rounds 5] [--only "long probes"]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from corpus_pass import bare_forward, load_hf_eager

FED = ("begin_batch", "update_block", "end_layer", "end_batch")


def reader_like(analyzer):
    """An analyzer reading ``analyzer``'s hooks, in blocks, that does nothing with them."""
    from attnlens.stream.base import Analyzer

    class Reader(Analyzer):
        name = "reader"
        layerwise = True
        reads_blocks = True

        def hook_names(self, model):
            return analyzer.hook_names(model)

        def update_block(self, batch, layer, block, cache) -> None:
            pass

        def result(self) -> dict:
            return {}

    return Reader()


def timed_analyzer(analyzer, spent: list[float]):
    """``analyzer`` with its feeding methods' CPU seconds added to ``spent[0]``."""
    for method in FED:
        inner = getattr(analyzer, method)

        def run(*args, _inner=inner, **kwargs):
            began = time.process_time()
            try:
                return _inner(*args, **kwargs)
            finally:
                spent[0] += time.process_time() - began

        setattr(analyzer, method, run)
    return analyzer


def input_sets(lm, model) -> dict:
    """``{name: (batches, make_analyzer)}`` as ``LmHeads._synthetic`` and ``_long_runs``
    build them."""
    from attnlens.measures.lm_heads.probes import ProbeScores
    from attnlens.measures.lm_heads.retrieval import RetrievalScores, haystacks
    from attnlens.measures.lm_heads.run import HAYSTACKS_PER_PROBE, long_batch_size, max_tokens
    from attnlens.measures.lm_heads.streaming import StreamingError

    s, frame = lm.settings, lm._frame(model)
    stacks = haystacks(frame["vocab"], max(1, int(s.probe_sequences * HAYSTACKS_PER_PROBE)),
                       s.probe_seed + 2, frame["first"], frame["closing"], frame["pad"],
                       frame["special"], n_ctx=max_tokens(model))
    long = lm.long_probes(model, frame)
    return {
        "probes": (lm.probe_set(model, frame).batches(),
                   lambda: ProbeScores.for_model(model, lm.inference)),
        "haystacks": (stacks.batches(), lambda: RetrievalScores.for_model(model, lm.inference)),
        "long probes": (long.batches(long_batch_size(model, long.input_ids.shape[1])),
                        lambda: StreamingError.for_model(model, s.sink_tokens, s.window)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--only", action="append", choices=["probes", "haystacks", "long probes"],
                        help="these input sets only (repeatable; default: all three)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    from attnlens.data.corpus import load_corpus
    from attnlens.loaders import load
    from attnlens.measures.lm_heads.run import LmHeads
    from attnlens.stream.runner import run_analyzers

    model, tokenizer = load(None)
    hf = load_hf_eager(model.cfg.source["path"])
    lm = LmHeads()
    run_analyzers(model, load_corpus().batches(tokenizer, 16, 128),
                  lm.corpus_analyzers(model, tokenizer), show_progress=False)
    sets = {name: made for name, made in input_sets(lm, model).items()
            if not args.only or name in args.only}

    def feed(batches, analyzer) -> None:
        run_analyzers(model, batches, [analyzer], show_progress=False, stop_when_fed=True)

    times: dict[tuple[str, str], list[float]] = {}

    def timed(key: tuple[str, str], run) -> None:
        began = time.process_time()
        run()
        times.setdefault(key, []).append(time.process_time() - began)

    def run_probes(name: str, batches, make) -> None:
        """The measure's run, its analyzer's share timed."""
        spent = [0.0]
        timed((name, "probes"), lambda: feed(batches, timed_analyzer(make(), spent)))
        times.setdefault((name, "analyzer"), []).append(spent[0])

    for _ in range(args.rounds):
        timed(("inputs", "built"), lambda: input_sets(lm, model))
        for name, (batches, make) in sets.items():
            timed((name, "HF eager"), lambda b=batches: [bare_forward(hf, x) for x in b])
            timed((name, "patterns"), lambda b=batches, m=make: feed(b, reader_like(m())))
            run_probes(name, batches, make)
    median = {key: statistics.median(v) for key, v in times.items()}
    print(f"threads {args.threads}, {args.rounds} rounds interleaved, medians (CPU s)")
    print(f"{'inputs':12s} {'tokens':>7s} {'HF eager':>9s} {'patterns, no analyzer':>22s} "
          f"{'probes':>7s} {'analyzer':>9s}")
    for name, (batches, _) in sets.items():
        tokens = sum(int(b.input_ids.numel()) for b in batches)
        eager, patterns, probes, analyzer = (median[(name, k)] for k in (
            "HF eager", "patterns", "probes", "analyzer"))
        print(f"{name:12s} {tokens:7d} {eager:9.3f} {patterns:22.3f} {probes:7.3f} "
              f"{analyzer:9.3f}")
    print(f"the inputs built (frame, probes, haystacks, long probes): "
          f"{median[('inputs', 'built')]:.3f}")


if __name__ == "__main__":
    main()
