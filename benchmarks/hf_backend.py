"""Forward speed of the hf backend against Hugging Face transformers, in one process.

The same all-MiniLM-L6-v2 (BERT) weights loaded with ``backend="hf"``: attnlens' fast path (no
hooks: SDPA) against HF's SDPA forward, attnlens' hooked eager path without hooks
(``set_use_sdpa(False)``) and caching every attention pattern against HF eager with
``output_attentions``. Batch 16 x 128 tokens, half of it padded by a quarter; medians of
``--rounds`` after one warm-up.

    python benchmarks/hf_backend.py [--threads 2] [--rounds 15]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from transformers import AutoModel

import attnlens


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
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.set_grad_enabled(False)

    model, _ = attnlens.load(backend="hf")
    path = model.cfg.source["path"]
    hf_sdpa = AutoModel.from_pretrained(path, attn_implementation="sdpa").eval()
    hf_eager = AutoModel.from_pretrained(path, attn_implementation="eager").eval()
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(1000, 30000, (args.batch, args.length), generator=gen)
    mask = torch.ones_like(ids)
    mask[args.batch // 2:, args.length * 3 // 4:] = 0  # half the batch padded by a quarter
    inputs = {"input_ids": ids, "attention_mask": mask}
    patterns = [f"blocks.{i}.attn.hook_pattern" for i in range(model.n_layers)]

    def hooked_eager():
        model.set_use_sdpa(False)
        try:
            model(**inputs, return_type="hidden")
        finally:
            model.set_use_sdpa(True)

    times = {
        "hf_sdpa": median_seconds(lambda: hf_sdpa(**inputs), args.rounds),
        "fast": median_seconds(lambda: model(**inputs, return_type="hidden"), args.rounds),
        "hf_eager": median_seconds(lambda: hf_eager(**inputs, output_attentions=True),
                                   args.rounds),
        "eager_path": median_seconds(hooked_eager, args.rounds),
        "cached": median_seconds(
            lambda: model.run_with_cache(**inputs, return_type="hidden",
                                         names_filter=patterns), args.rounds),
    }
    labels = {
        "hf_sdpa": "HF sdpa", "fast": "attnlens hf, fast path (no hooks)",
        "hf_eager": "HF eager, output_attentions", "eager_path": "attnlens hf, eager path "
        "(no hooks)", "cached": "attnlens hf, caching every pattern",
    }
    for key, seconds in times.items():
        print(f"{labels[key]:40s} {seconds * 1000:8.1f} ms")
    print(f"fast path / HF sdpa: {times['fast'] / times['hf_sdpa']:.3f}")
    print("caching every pattern / HF eager with output_attentions: "
          f"{times['cached'] / times['hf_eager']:.3f}")
    print(f"eager path / fast path: {times['eager_path'] / times['fast']:.3f}")

if __name__ == "__main__":
    main()
