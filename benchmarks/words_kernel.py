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

    python benchmarks/words_kernel.py [--sentences 2001] [--threads 1] [--batch-tokens 1024]
        [--wall] [--profile {torch,kernel}]

``--profile FORM``: then that form once more over every batch under cProfile (the 12
functions of most own time).
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from kernel_ab import alternate, cached_ewt, options, print_times, profile

from attnlens.data import words as module
from attnlens.data.words import WordAttentionContext
from attnlens.measures.heads.rare_words import RareWordHeads
from attnlens.measures.heads.syntactic import SyntacticHeads

FORMS = {"torch": None, "kernel": module._words_kernel}


def pair(model) -> list:
    words = WordAttentionContext()
    return [SyntacticHeads.for_model(model, words=words),
            RareWordHeads.for_model(model, words=words)]


def main() -> None:
    args = options(__doc__, FORMS).parse_args()
    if FORMS["kernel"] is None:
        raise SystemExit("the words kernel is not built")
    model, _, batches, caches = cached_ewt(args)
    analyzers, spent = alternate(module, "_words_kernel", FORMS, lambda _: pair(model), model,
                                 batches, caches, args.wall)
    print_times(args, batches, spent)
    (syn, rare), (ref_syn, ref_rare) = analyzers["kernel"], analyzers["torch"]
    same_syn = all(torch.equal(a, b) for a, b in zip(syn.pair_hits, ref_syn.pair_hits,
                                                     strict=True))
    same_rare = all(torch.equal(a, b) for a, b in zip(rare.sentence_hits,
                                                      ref_rare.sentence_hits, strict=True))
    print(f"  kernel hits equal to the torch path's: syntactic {same_syn}, rare words "
          f"{same_rare}")
    if args.profile:
        profile(module, "_words_kernel", FORMS[args.profile], pair(model), model, batches,
                caches)


if __name__ == "__main__":
    main()
