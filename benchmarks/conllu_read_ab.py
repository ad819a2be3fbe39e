"""fixed44: the CoNLL-U read (``parse_conllu``) of this checkout against main's, alternated
round by round in one process (the sentences compared first, field by field). Prints each
round's CPU seconds, the medians and the ratio new / old:

    python benchmarks/conllu_read_ab.py [--rounds 7] [--treebank PATH]
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from attnlens.data import conllu
from attnlens.data.files import read_utf8

EWT_DEV = "/work/shared/data/ud-ewt/en_ewt-ud-dev.conllu"


def main_conllu():
    """main's ``attnlens/data/conllu.py`` loaded from git as a module of its own."""
    text = subprocess.run(["git", "show", "main:attnlens/data/conllu.py"], check=True,
                          text=True, capture_output=True).stdout
    file = Path(tempfile.mkdtemp()) / "main_conllu.py"
    file.write_text(text)
    spec = importlib.util.spec_from_file_location(file.stem, file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[file.stem] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def cpu_seconds(parse, text: str, source: str) -> float:
    began = time.process_time()
    parse(text, source)
    return time.process_time() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--treebank", default=EWT_DEV)
    args = parser.parse_args()
    text, old = read_utf8(Path(args.treebank)), main_conllu()
    new_sentences = conllu.parse_conllu(text, args.treebank)
    old_sentences = old.parse_conllu(text, args.treebank)
    same = ([dataclasses.astuple(s) for s in new_sentences]
            == [dataclasses.astuple(s) for s in old_sentences])
    print(f"{len(new_sentences)} sentences, the same: {same}")
    times: dict[str, list[float]] = {"main": [], "this": []}
    for _ in range(args.rounds):
        times["main"].append(cpu_seconds(old.parse_conllu, text, args.treebank))
        times["this"].append(cpu_seconds(conllu.parse_conllu, text, args.treebank))
    for name, values in times.items():
        print(f"{name}: {' '.join(f'{v:.3f}' for v in values)}  "
              f"median {statistics.median(values):.3f} s")
    ratio = statistics.median(times["this"]) / statistics.median(times["main"])
    print(f"this / main: {ratio:.2f}")


if __name__ == "__main__":
    main()
