"""fixed43: main's CPU after the passes, piece by piece, this checkout's path against the one
it replaced, alternated round by round in one process at one torch thread (outputs compared
first). Prints the median CPU seconds of each and the ratio new / old:

    python benchmarks/fixed43_ab.py [--rounds 11]

- ``head_examples``: ``HeadExamples.examples`` on MiniLM's shape (7 measures x 6 layers x
  12 heads x top 3 = 1,512 examples, windows of 10 tokens): every window's percentages from
  one conversion (``window_percents``) against one ``window_text`` per example (the path it
  keeps for non-finite windows).
- ``shared_subspace_svg``: ``plots.svg.curves.shared_subspace_curves`` on MiniLM's
  ``shared_subspace_curve`` table (6 layers x 3 matrices x 2 scopes x 384 dimensions), each
  line's rows from one group-by against main's two masks per line (main's module from git).
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from unittest import mock

import numpy as np
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


def main_module(path: str):
    """main's ``path`` (``attnlens/...py``) loaded from git as a module of its own."""
    text = subprocess.run(["git", "show", f"main:{path}"], check=True, text=True,
                          capture_output=True).stdout
    file = Path(tempfile.mkdtemp()) / ("main_" + Path(path).name)
    file.write_text(text)
    spec = importlib.util.spec_from_file_location(file.stem, file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def shared_subspace_svg():
    """MiniLM's shared-subspace curve table (random energies) and the SVG of each path."""
    import pandas as pd

    from attnlens.plots.svg import curves

    old_curves = main_module("attnlens/plots/svg/curves.py")
    rng = np.random.default_rng(0)
    rows = [(layer, matrix, scope, k + 1, e)
            for layer in range(6) for matrix in ("W_Q", "W_K", "W_QK")
            for scope in ("concat", "per_head_mean")
            for k, e in enumerate(np.sort(rng.random(384)).tolist())]
    table = pd.DataFrame(rows, columns=["layer", "matrix", "scope", "k", "energy"])

    def new():
        return curves.shared_subspace_curves(table, 384, "Shared").render()

    def old():
        return old_curves.shared_subspace_curves(table, 384, "Shared").render()

    return new, old


def same(a, b) -> bool:
    """Equal outputs: DataFrames by `equals` (values and dtypes), text as text."""
    return a.equals(b) if hasattr(a, "equals") else a == b


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=11)
    args = parser.parse_args()
    torch.set_num_threads(1)
    for name, make in (("head_examples", head_examples),
                       ("shared_subspace_svg", shared_subspace_svg)):
        new, old = make()
        assert same(new(), old()), name
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
