"""Speed and accuracy of the spectral path against torch.linalg.svdvals, in one process.

Target (DESIGN.md): the spectral path is >= 3x faster than ``torch.linalg.svdvals`` on the same
matrices, with a cumulative-curve error <= 1e-4 against float64 SVD. Matrices: the real-token
attention matrices of all-MiniLM-L6-v2 (every layer and head) for a batch of 16 x 128 tokens,
and for the 50 built-in sample sentences (grouped by length, as the analyzer does).

    python benchmarks/spectrum.py [--threads 2] [--rounds 3]

Printed per case: median seconds, the speed ratio ``svdvals time / case time`` and the largest
absolute error of the normalised cumulative curve against float64 SVD.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch

import attnlens
from attnlens.analysis.spectrum import (
    cumulative_curve,
    gather_square,
    lapack_single_thread,
    length_groups,
    singular_values,
)
from attnlens.data.text import sample_sentences


def real_matrices(model, tokenizer, texts: list[str], max_length: int) -> list[torch.Tensor]:
    """Real-token attention matrices ``[matrices, n, n]``, one tensor per real length."""
    enc = tokenizer(texts, max_length=max_length)
    names = [f"blocks.{i}.attn.hook_pattern" for i in range(model.n_layers)]
    with torch.no_grad():
        _, cache = model.run_with_cache(**enc, names_filter=names)
    patterns = torch.cat([cache[name] for name in names], dim=1)  # [batch, layer*head, q, k]
    out = []
    for group in length_groups(enc["attention_mask"]):
        block = gather_square(patterns, group)  # [group, layer*head, n, n]
        out.append(block.reshape(-1, group.n, group.n).contiguous())
    return out


def timed(fn: Callable[[], object], rounds: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def curve_error(method: Callable[[torch.Tensor], torch.Tensor], mats: list[torch.Tensor]) -> float:
    worst = 0.0
    for P in mats:
        reference = cumulative_curve(torch.linalg.svdvals(P.double()))
        curve = cumulative_curve(method(P).double())
        worst = max(worst, float((curve - reference).abs().max()))
    return worst


def svdvals_single_thread(P: torch.Tensor) -> torch.Tensor:
    with lapack_single_thread(P.device):
        return torch.linalg.svdvals(P)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model, tokenizer = attnlens.load()
    sample = sample_sentences()
    long_texts = [" ".join((sample * 2)[i : i + 14]) for i in range(0, 48, 3)][:16]
    cases = {
        "MiniLM, batch 16 x 128 tokens": real_matrices(model, tokenizer, long_texts, 128),
        "MiniLM, 50 sample sentences": real_matrices(model, tokenizer, sample, 128),
    }
    methods: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
        "torch.linalg.svdvals (float32, baseline)": torch.linalg.svdvals,
        "svdvals on one thread": svdvals_single_thread,
        "spectral path (auto, as the analyzer)": singular_values,
        "eigvalsh(P P^T) float64": lambda P: singular_values(P, "gram64"),
        "eigvalsh(P P^T) float32": lambda P: singular_values(P, "gram32"),
    }
    print(f"threads={args.threads}, rounds={args.rounds} (median)")
    for case, mats in cases.items():
        count = sum(m.shape[0] for m in mats)
        sizes = sorted({m.shape[-1] for m in mats})
        print(f"\n{case}: {count} matrices, n = {sizes[0]}..{sizes[-1]}")
        base = None
        for name, fn in methods.items():
            seconds = timed(lambda fn=fn, mats=mats: [fn(P) for P in mats], args.rounds)
            base = seconds if base is None else base
            error = curve_error(fn, mats)
            print(f"  {name:42s} {seconds:8.4f} s  ratio {base / seconds:5.2f}x  "
                  f"curve error {error:.1e}")


if __name__ == "__main__":
    main()
