"""fixed45: the heads section's syntactic tables, this checkout's path against main's,
alternated round by round in one process at one torch thread (outputs compared first).
Prints the median CPU seconds of each and the ratio new / old:

    python benchmarks/fixed45_ab.py [--rounds 11] [--max-sentences N] [--treebank PATH]

One ``SyntacticHeads`` state is made first (MiniLM over the treebank, default UD EWT dev,
~10 s); then, on that state:

- ``syntactic_tables``: ``syntactic_tables`` (accuracies, bootstrap intervals, tests);
- ``held_out_selection``: the seeded half-split held-out selection;

each against main's functions with main's ``SentenceArcs.group`` and ``p_above``
(``attnlens/measures/heads/syntactic_tables.py``, ``syntactic_arcs.py`` and
``attnlens/stats/bootstrap.py`` read from git).
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from unittest import mock

import torch
from corpus_pass import load_batches
from fixed43_ab import same

EWT_DEV = Path("/work/shared/data/ud-ewt/en_ewt-ud-dev.conllu")


def syntactic_state(treebank: Path, max_sentences: int | None):
    """A ``SyntacticHeads`` analyzer fed MiniLM's patterns over ``treebank``."""
    import attnlens
    from attnlens.measures.heads.syntactic import SyntacticHeads
    from attnlens.stream.runner import run_analyzers

    model, tokenizer = attnlens.load()
    batches, _ = load_batches(tokenizer, model, treebank, max_sentences, 32, 1024)
    (analyzer,) = run_analyzers(model, batches, [SyntacticHeads.for_model(model)],
                                show_progress=False)
    return analyzer


def main_module(path: str):
    """main's ``path`` loaded from git as a module of its own, registered in
    ``sys.modules`` (its dataclasses look their module up there)."""
    text = subprocess.run(["git", "show", f"main:{path}"], check=True, text=True,
                          capture_output=True).stdout
    file = Path(tempfile.mkdtemp()) / ("main_" + Path(path).name)
    file.write_text(text)
    spec = importlib.util.spec_from_file_location(file.stem, file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[file.stem] = module
    spec.loader.exec_module(module)
    return module


def main_functions() -> tuple[dict, Callable[[], ExitStack]]:
    """main's ``syntactic_tables`` and ``held_out_selection`` (main's module read from git),
    and a function that makes the context they run in: main's ``p_above`` and
    ``SentenceArcs.group`` in place of this checkout's."""
    from attnlens.measures.heads import syntactic_arcs

    old_bootstrap = main_module("attnlens/stats/bootstrap.py")
    old_arcs = main_module("attnlens/measures/heads/syntactic_arcs.py")
    old_tables = main_module("attnlens/measures/heads/syntactic_tables.py")

    def context() -> ExitStack:
        stack = ExitStack()
        stack.enter_context(mock.patch.object(old_tables, "p_above", old_bootstrap.p_above))
        stack.enter_context(mock.patch.object(syntactic_arcs.SentenceArcs, "group",
                                              old_arcs.SentenceArcs.group))
        return stack

    return {"syntactic_tables": old_tables.syntactic_tables,
            "held_out_selection": old_tables.held_out_selection}, context


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--treebank", type=Path, default=EWT_DEV)
    parser.add_argument("--max-sentences", type=int, default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    from attnlens.measures.heads.syntactic_tables import held_out_selection, syntactic_tables

    analyzer = syntactic_state(args.treebank, args.max_sentences)
    old_functions, old_context = main_functions()
    for name, function in (("syntactic_tables", syntactic_tables),
                           ("held_out_selection", held_out_selection)):
        def new(function=function):
            return function(analyzer)

        def old(function=old_functions[name]):
            with old_context():
                return function(analyzer)

        a, b = new(), old()
        assert (same(list(a.values()), list(b.values())) if isinstance(a, dict)
                else same(a, b)), name
        times: dict[str, list[float]] = {"old": [], "new": []}
        for round_ in range(args.rounds):
            order = (("old", old), ("new", new)) if round_ % 2 == 0 else (("new", new),
                                                                          ("old", old))
            for key, run in order:
                start = time.process_time()
                run()
                times[key].append(time.process_time() - start)
        o, n = statistics.median(times["old"]), statistics.median(times["new"])
        print(f"{name:20} old {o:.4f} s  new {n:.4f} s  new/old {n / o:.3f}  "
              f"(old {min(times['old']):.4f}-{max(times['old']):.4f}, "
              f"new {min(times['new']):.4f}-{max(times['new']):.4f})")


if __name__ == "__main__":
    main()
