"""fixed43: main's CPU after the passes, piece by piece, this checkout's path against the one
it replaced, alternated round by round in one process at one torch thread (outputs compared
first). Prints the median CPU seconds of each and the ratio new / old:

    python benchmarks/fixed43_ab.py [--rounds 11]

- ``head_examples``: ``HeadExamples.examples`` on MiniLM's shape (7 measures x 6 layers x
  12 heads x top 3 = 1,512 examples, windows of 10 tokens): every window's percentages from
  one conversion (``window_percents``) against one ``window_text`` per example (the path it
  keeps for non-finite windows).
"""

from __future__ import annotations

import argparse
import statistics
import time
from unittest import mock

import torch


def head_examples():
    """A ``HeadExamples`` state of MiniLM's shape with random windows, and its decode."""
    from attnlens.measures.heads import examples as module
    from attnlens.measures.heads.head_stats import MEASURES

    torch.manual_seed(0)
    state = module.HeadExamples(6, 12, {101}, {102}, set(), MEASURES)
    shape = state.top_value.shape  # [measure, layer, head, rank]
    state.top_value = torch.rand(shape)
    state.top_sentence = torch.randint(0, 40, shape)
    state.top_query = torch.randint(0, 30, shape)
    state.top_key = torch.randint(0, 30, shape)
    state.top_start = torch.randint(0, 20, shape)
    window = torch.rand(*shape, state.window, state.window)
    state.top_window = (window / window.sum(-1, keepdim=True)).half()
    for index in range(40):
        state.sentence_ids[str(index)] = list(range(1000 + index, 1030 + index))

    def decode(ids):
        return [f"t{i}" for i in ids]

    def new():
        return state.examples(decode)

    def old():
        with mock.patch.object(module, "window_percents", lambda windows: None):
            return state.examples(decode)

    return new, old


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=11)
    args = parser.parse_args()
    torch.set_num_threads(1)
    for name, make in (("head_examples", head_examples),):
        new, old = make()
        assert new().to_csv(index=False) == old().to_csv(index=False), name
        times: dict[str, list[float]] = {"old": [], "new": []}
        for _ in range(args.rounds):
            for key, run in (("old", old), ("new", new)):
                start = time.process_time()
                run()
                times[key].append(time.process_time() - start)
        o, n = statistics.median(times["old"]), statistics.median(times["new"])
        print(f"{name:24} old {o:.4f} s  new {n:.4f} s  new/old {n / o:.3f}")


if __name__ == "__main__":
    main()
