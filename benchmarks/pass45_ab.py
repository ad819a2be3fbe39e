"""pass45: ``SinkKeys.end_batch`` (the counting of each batch's top keys on the host), main's
class against this checkout's, alternated batch by batch in one process.

Each batch's top keys (``_found``: every layer's top values and positions) are made once by
feeding the cached MiniLM activations of the first ``--sentences`` UD EWT dev sentences
(``analyze``'s batches: 64 sentences, 1,024 tokens) to this checkout's class; each round then
gives every batch's top keys to a fresh analyzer of each class and times ``end_batch`` alone,
plus the reading of the counters at the end (``state_dict``). Prints the minimum and median
CPU seconds of the rounds, their ratio main / now, and whether the counters are the same
(keys in the same order, counts and float sums equal):

    python benchmarks/pass45_ab.py --before /work/main [--rounds 9] [--sentences 800]
        [--threads 1]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from corpus_pass import SHARED_UD, load_batches
from hot_paths import PAIRS, feed, old_class


def found_per_batch(model, batches, caches, cls) -> list[tuple]:
    """Each batch's ``(_first, _found)`` as ``end_batch`` reads them."""
    analyzer, found = cls.for_model(model), []

    def keep(batch) -> None:
        found.append((analyzer._first, list(analyzer._found)))
        analyzer._found = []

    analyzer.end_batch = keep
    with torch.no_grad():
        for batch, cache in zip(batches, caches, strict=True):
            feed(model, analyzer, batch, cache)
    return found


def counters(analyzer) -> tuple:
    state = analyzer.state_dict()["state"]
    return (list(state["counts"].items()), list(state["received"].items()), state["pairs"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--sentences", type=int, default=800)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    import attnlens
    from attnlens.measures.lm_heads.sinks import SinkKeys

    model, tokenizer = attnlens.load()
    batches, _ = load_batches(tokenizer, model, SHARED_UD, args.sentences, 64, 1024)
    with torch.no_grad():
        caches = [model.run_with_cache(**batch.model_inputs())[1] for batch in batches]
    found = found_per_batch(model, batches, caches, SinkKeys)
    classes = (old_class(args.before, *PAIRS["sink_keys"]), SinkKeys)
    spent: list[list[float]] = [[], []]
    last = [None, None]
    for _ in range(args.rounds):
        pair = [cls.for_model(model) for cls in classes]
        times = [0.0, 0.0]
        for i, (batch, (first, layers)) in enumerate(zip(batches, found, strict=True)):
            for j in ((0, 1) if i % 2 == 0 else (1, 0)):
                pair[j]._first, pair[j]._found = first, list(layers)
                start = time.process_time()
                pair[j].end_batch(batch)
                times[j] += time.process_time() - start
        for j in (0, 1):
            start = time.process_time()
            pair[j].state_dict()
            times[j] += time.process_time() - start
            spent[j].append(times[j])
        last = pair
    same = counters(last[0]) == counters(last[1])
    print(f"end_batch CPU s: main min {min(spent[0]):.4f} median "
          f"{statistics.median(spent[0]):.4f}, now min {min(spent[1]):.4f} median "
          f"{statistics.median(spent[1]):.4f}: {min(spent[0]) / min(spent[1]):.2f}x (min), "
          f"{statistics.median(spent[0]) / statistics.median(spent[1]):.2f}x (median); "
          f"{args.rounds} rounds, {len(batches)} batches; same counters: {same}")


if __name__ == "__main__":
    main()
