"""Main's class of an analyzer against this checkout's, whole rounds alternated (ops39).

``hot_paths.py``'s pairs and feeder, over the same cached MiniLM activations of the first
``--sentences`` UD EWT dev sentences in ``analyze``'s batches (64 sentences, 1,024 tokens)
with the report's sample (512 sentences by corpus index, as ``hot_paths.py
--report-sample``); each round feeds every batch to a fresh analyzer of each class, the order
alternating round by round, and is timed whole. Prints the minimum and the median of the
rounds' wall and CPU seconds (on a shared machine the minimum is the steadier figure) and
whether the last rounds' states agree bit for bit:

    python benchmarks/pair_rounds.py --before /work/main --only linear,sparse [--rounds 15]
        [--sentences 800] [--threads 2]
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from corpus_pass import SHARED_UD, load_batches
from hot_paths import PAIRS, REPORT_OPTIONS, feed, old_class, same_state


def rounds(model, batches, caches, classes, options: dict, n: int):
    """``([wall per round], [cpu per round])`` of each class, and the last analyzers."""
    wall: list[list[float]] = [[], []]
    cpu: list[list[float]] = [[], []]
    last = [None, None]
    for r in range(n):
        for j in ((0, 1) if r % 2 == 0 else (1, 0)):
            analyzer = classes[j].for_model(model, **options)
            start, start_cpu = time.perf_counter(), time.process_time()
            with torch.no_grad():
                for batch, cache in zip(batches, caches, strict=True):
                    feed(model, analyzer, batch, cache)
                analyzer.state_dict()  # what an analyzer still holds runs here
            wall[j].append(time.perf_counter() - start)
            cpu[j].append(time.process_time() - start_cpu)
            last[j] = analyzer
    return wall, cpu, last


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, required=True)
    parser.add_argument("--only", default="linear,sparse")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--sentences", type=int, default=800)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    import attnlens

    model, tokenizer = attnlens.load()
    batches, _ = load_batches(tokenizer, model, SHARED_UD, args.sentences, 64, 1024)
    options = {**REPORT_OPTIONS, "linear": {"per_batch": None, "max_sentences": 512},
               "sparse": {"per_batch": None, "max_sentences": 512}}
    with torch.no_grad():
        caches = [model.run_with_cache(**batch.model_inputs())[1] for batch in batches]
    for key in args.only.split(","):
        relative, name = PAIRS[key]
        module = importlib.import_module(relative.removesuffix(".py").replace("/", "."))
        classes = (old_class(args.before, relative, name), getattr(module, name))
        wall, cpu, last = rounds(model, batches, caches, classes, options.get(key, {}),
                                 args.rounds)
        ok, worst = same_state(*last)

        def spread(xs: list[float]) -> str:
            return f"min {min(xs):.3f} median {statistics.median(xs):.3f}"

        print(f"{key}: wall main {spread(wall[0])}, now {spread(wall[1])}: "
              f"{min(wall[0]) / min(wall[1]):.2f}x (min), "
              f"{statistics.median(wall[0]) / statistics.median(wall[1]):.2f}x (median); "
              f"CPU main {spread(cpu[0])}, now {spread(cpu[1])}; {args.rounds} rounds, "
              f"{len(batches)} batches; states agree: {ok} (largest difference {worst:.1e})")


if __name__ == "__main__":
    main()
