"""fixed42: ``treebank_batches`` (what ``Corpus.batches`` runs on a treebank) with main's
``data/tokenizer.py`` and ``data/words.py`` (read from git, loaded as separate modules)
against this checkout's, alternated round by round in one process on the same tokenizer; every
batch's tensors, words and ``extra`` must be equal first. Prints the median seconds of each
and the ratio this checkout / main:

    python benchmarks/fixed42_ab.py [--treebank PATH | --treebank sample] [--rounds 11]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DEV = "/work/shared/data/ud-ewt/en_ewt-ud-dev.conllu"
KEYS = ("input_ids", "attention_mask", "token_type_ids", "word_ids", "special_mask")


def main_modules(folder: Path):
    """main's tokenizer and word modules, as ``main_tok`` and ``main_words``."""
    def show(path: str) -> str:
        return subprocess.run(["git", "show", f"main:{path}"], check=True, text=True,
                              capture_output=True).stdout

    (folder / "main_tok.py").write_text(show("attnlens/data/tokenizer.py"))
    words = show("attnlens/data/words.py").replace(
        "from attnlens.data.tokenizer import Tokenizer", "from main_tok import Tokenizer")
    (folder / "main_words.py").write_text(words)
    sys.path.insert(0, str(folder))
    import main_tok
    import main_words
    return main_tok, main_words


def same(a, b) -> bool:
    return len(a) == len(b) and all(
        (getattr(x, k) is None and getattr(y, k) is None) or getattr(x, k).equal(getattr(y, k))
        for x, y in zip(a, b, strict=True) for k in KEYS
    ) and all(x.extra == y.extra and x.words == y.words for x, y in zip(a, b, strict=True))


def run() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--treebank", default=DEV)
    parser.add_argument("--rounds", type=int, default=11)
    args = parser.parse_args()
    from attnlens.data import conllu
    from attnlens.data.tokenizer import Tokenizer
    from attnlens.data.words import treebank_batches
    from attnlens.loaders.checkpoint import default_model_path

    with tempfile.TemporaryDirectory() as tmp:
        main_tok, main_words = main_modules(Path(tmp))
        new_tok = Tokenizer.from_pretrained(default_model_path())
        old_tok = main_tok.Tokenizer(new_tok.hf)
    sentences = (conllu.sample_treebank() if args.treebank == "sample"
                 else conllu.read_conllu(args.treebank))
    runs = {"main": lambda: main_words.treebank_batches(old_tok, sentences, 16, 128),
            "fixed42": lambda: treebank_batches(new_tok, sentences, 16, 128)}
    batches = {name: f() for name, f in runs.items()}
    assert same(batches["main"], batches["fixed42"]), "the batches differ"
    print(f"batches identical: {len(batches['main'])}")
    seconds: dict[str, list[float]] = {name: [] for name in runs}
    for r in range(args.rounds):
        for name in (list(runs) if r % 2 == 0 else list(runs)[::-1]):
            start = time.perf_counter()
            runs[name]()
            seconds[name].append(time.perf_counter() - start)
    old, new = (statistics.median(seconds[n]) for n in ("main", "fixed42"))
    print(f"median main {old:.3f} s, fixed42 {new:.3f} s, ratio fixed42/main {new / old:.3f}")


if __name__ == "__main__":
    run()
