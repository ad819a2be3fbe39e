"""Syntactic and rare-word heads' C kernel against their torch path.

Both analyzers as the heads section makes them (one shared ``WordAttentionContext``), over
the same cached MiniLM activations of the first ``--sentences`` UD EWT dev sentences
(batches as ``analyze`` makes them: at most 64 sentences and ``--batch-tokens`` padded
tokens), fed through one feeder as the runner feeds them, in two forms that alternate batch
by batch (same load on a shared machine):

- ``torch``: the torch path (the extension hidden): word pooling, then the counting over
  held layers (the code before word38);
- ``kernel``: the C kernel, one pass per layer (the code now).

Prints each form's CPU seconds (``--wall``: wall time) and whether the kernel's hits equal
the torch path's bit for bit (syntactic ``pair_hits``, rare-word ``sentence_hits``).
``--build NAME=PATH`` adds another build of the kernel as a form (e.g. the old source built
as tests/kernel_builds.py builds, or a copy of an earlier installed build), its hits
compared with the installed kernel's.

    python benchmarks/words_kernel.py [--sentences 2001] [--threads 1] [--batch-tokens 1024]
        [--wall] [--profile {torch,kernel}] [--build before=/tmp/old/_words_kernel.so] [--levels]

``--profile FORM``: then that form once more over every batch under cProfile (the 12
functions of most own time).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from kernel_ab import alternate, cached_ewt, level_forms, options, print_times, profile

from attnlens.data import words as module
from attnlens.data.words import WordAttentionContext
from attnlens.measures.heads.rare_words import RareWordHeads
from attnlens.measures.heads.syntactic import SyntacticHeads

FORMS = {"torch": None, "kernel": module._words_kernel}


def pair(model) -> list:
    words = WordAttentionContext()
    return [SyntacticHeads.for_model(model, words=words),
            RareWordHeads.for_model(model, words=words)]


def built(spec: str):
    """``NAME=PATH``: (NAME, the kernel module compiled at PATH)."""
    name, path = spec.split("=", 1)
    found = importlib.util.spec_from_file_location(f"{name}._words_kernel", path)
    kernel = importlib.util.module_from_spec(found)
    found.loader.exec_module(kernel)
    return name, kernel


def same_hits(analyzers: list, reference: list) -> tuple[bool, bool]:
    """Whether the syntactic and rare-word hits of ``analyzers`` equal ``reference``'s."""
    (syn, rare), (ref_syn, ref_rare) = analyzers, reference
    return (all(torch.equal(a, b) for a, b in zip(syn.pair_hits, ref_syn.pair_hits,
                                                  strict=True)),
            all(torch.equal(a, b) for a, b in zip(rare.sentence_hits, ref_rare.sentence_hits,
                                                  strict=True)))


def main() -> None:
    parser = options(__doc__, FORMS)
    parser.add_argument("--build", action="append", default=[], metavar="NAME=PATH")
    args = parser.parse_args()
    if FORMS["kernel"] is None:
        raise SystemExit("the words kernel is not built")
    forms = {**FORMS, **dict(built(spec) for spec in args.build)}
    if args.levels:
        forms |= level_forms("attnlens/data/_words_kernel.c", FORMS["kernel"])
    model, _, batches, caches = cached_ewt(args)
    analyzers, spent = alternate(module, "_words_kernel", forms, lambda _: pair(model), model,
                                 batches, caches, args.wall)
    print_times(args, batches, spent)
    for name, reference in [("kernel", "torch"), *((name, "kernel") for name in forms
                                                   if name not in FORMS)]:
        syn, rare = same_hits(analyzers[name], analyzers[reference])
        print(f"  {name} hits equal to {reference}'s: syntactic {syn}, rare words {rare}")
    if args.profile:
        profile(module, "_words_kernel", FORMS[args.profile], pair(model), model, batches,
                caches)


if __name__ == "__main__":
    main()
