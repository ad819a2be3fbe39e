"""Forward speed of attnlens against Hugging Face transformers, measured in one process.

Figures (DESIGN.md targets): attnlens without hooks / HF SDPA <= 1.05; attnlens caching every
attention pattern / HF eager with output_attentions <= 1.05. MiniLM, batch 16 x 128 tokens.

    python benchmarks/forward.py [--threads 2] [--rounds 15]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from bench_record import record, this_command
from transformers import AutoModel

import attnlens


def timed(fn, rounds: int) -> list[float]:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--length", type=int, default=128)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.set_grad_enabled(False)

    model, _ = attnlens.load()
    path = model.cfg.source["path"]
    hf_sdpa = AutoModel.from_pretrained(path, attn_implementation="sdpa").eval()
    hf_eager = AutoModel.from_pretrained(path, attn_implementation="eager").eval()
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(1000, 30000, (args.batch, args.length), generator=gen)
    mask = torch.ones_like(ids)
    mask[args.batch // 2 :, args.length * 3 // 4 :] = 0  # half the batch padded by a quarter
    inputs = {"input_ids": ids, "attention_mask": mask}
    patterns = [f"blocks.{i}.attn.hook_pattern" for i in range(model.n_layers)]

    cases = {
        "attnlens (SDPA path, no hooks)": lambda: model(**inputs),
        "HF SDPA": lambda: hf_sdpa(**inputs),
        "attnlens caching every pattern": lambda: model.run_with_cache(
            **inputs, names_filter=patterns
        ),
        "HF eager, output_attentions": lambda: hf_eager(**inputs, output_attentions=True),
    }
    for fn in cases.values():  # warm-up
        fn()
    samples = {name: [] for name in cases}
    for _ in range(args.rounds):  # interleaved, so drift hits every case alike
        for name, fn in cases.items():
            samples[name] += timed(fn, 1)
    median = {name: statistics.median(t) for name, t in samples.items()}
    for name, seconds in median.items():
        print(f"{name:34s} {1000 * seconds:8.1f} ms (median of {args.rounds})")
    fast = median["attnlens (SDPA path, no hooks)"] / median["HF SDPA"]
    cached = median["attnlens caching every pattern"] / median["HF eager, output_attentions"]
    print(f"ratio attnlens / HF SDPA forward:            {fast:.3f}  (target <= 1.05)")
    print(f"ratio attnlens cached patterns / HF eager:   {cached:.3f}  (target <= 1.05)")
    ms = {name: f"{1000 * seconds:.1f} ms" for name, seconds in median.items()}
    shape = f"{args.batch} x {args.length} tokens"
    record(f"attnlens forward, no hooks / HF SDPA forward ({shape})", "<= 1.05",
           f"{fast:.3f} ({ms['attnlens (SDPA path, no hooks)']} vs {ms['HF SDPA']}, "
           f"median of {args.rounds})", fast <= 1.05, this_command(), key="forward.sdpa")
    record(f"attnlens caching every pattern / HF eager with `output_attentions` ({shape})",
           "<= 1.05", f"{cached:.3f} ({ms['attnlens caching every pattern']} vs "
           f"{ms['HF eager, output_attentions']}, median of {args.rounds})", cached <= 1.05,
           this_command(), key="forward.cached")


if __name__ == "__main__":
    main()
