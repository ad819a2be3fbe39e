"""Forward speed and size of structurally pruned MiniLM against the unpruned model.

For each fraction of heads removed (random order, seed 0, at least one head per layer) it
prints the parameter count and the median forward time of the unpruned model, the masked
model (same size, heads gated to 0) and the structurally pruned model, with ratios against
the unpruned model measured in the same process. MiniLM, batch 16 x 128 tokens.

    python benchmarks/pruned_speed.py [--threads 2] [--rounds 15] [--fractions 0.25,0.5,0.75]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import attnlens
from attnlens.measures.pruning import prune_heads
from attnlens.measures.pruning.importance import random_scores
from attnlens.measures.pruning.loop import select_heads
from attnlens.model.gates import full_mask


def median_seconds(fn, rounds: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--fractions", default="0.25,0.5,0.75")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.set_grad_enabled(False)

    model, _ = attnlens.load()
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(1000, 30000, (args.batch, args.length), generator=gen)
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    n_heads = sum(model.heads_per_layer)
    base_params = sum(p.numel() for p in model.parameters())
    base = median_seconds(lambda: model(**inputs), args.rounds)
    print(f"MiniLM, batch {args.batch} x {args.length} tokens, {args.threads} threads, "
          f"median of {args.rounds}")
    print(f"{'heads':>6} {'params':>11} {'unpruned s':>11} {'masked/unpr':>11} "
          f"{'pruned/unpr':>11} {'max |pruned - masked|':>22}")
    print(f"{n_heads:>6} {base_params:>11,} {base:>11.4f} {1.0:>11.3f} {1.0:>11.3f} {0.0:>22.1e}")
    for fraction in (float(f) for f in args.fractions.split(",")):
        mask = full_mask(model)
        chosen = select_heads(random_scores(model, 0), mask, round(fraction * n_heads), 1)
        for layer, head in chosen:
            mask[layer, head] = 0.0
        pruned = prune_heads(model, mask)
        masked_t = median_seconds(lambda mask=mask: model(**inputs, head_mask=mask), args.rounds)
        pruned_t = median_seconds(lambda pruned=pruned: pruned(**inputs), args.rounds)
        base = median_seconds(lambda: model(**inputs), args.rounds)  # re-measured: drift
        error = float((pruned(**inputs) - model(**inputs, head_mask=mask)).abs().max())
        params = sum(p.numel() for p in pruned.parameters())
        print(f"{sum(pruned.heads_per_layer):>6} {params:>11,} {base:>11.4f} "
              f"{masked_t / base:>11.3f} {pruned_t / base:>11.3f} {error:>22.1e}")


if __name__ == "__main__":
    main()
