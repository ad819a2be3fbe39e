"""Train a tiny Llama to copy repeated sequences, so that it grows induction heads.

    python examples/train_induction_model.py OUT [--steps 800] [--seed 0]

The model (2 layers, 4 heads, width 64, rotary positions up to 64) learns from sequences
``<bos> + R + R``: a segment R of 4 to 31 words drawn at random from the embedded sample
corpus's vocabulary, then R again. The loss is taken on the second copy only (the first is
unpredictable; counting it drowns the signal, and the model then stalls on a plateau for
thousands of steps). The second copy can only be predicted by finding the earlier copy of
the current token and reading the token after it, which a two-layer model does with a
previous-token head in layer 0 and induction heads in layer 1 (Olsson et al. 2022). The
folder holds ``config.json``, ``model.safetensors`` and a word-level tokenizer (``<bos>``
before every text), so that

    attnlens heads OUT --window 8

finds those heads (the model takes at most 64 tokens: a window of 8 lets the long probes
reach beyond it). Training takes about a minute on one CPU core (800 steps); the weights
are a pure function of the seed on one machine (CPU kernels differ across processors, so
another machine may give slightly different weights, and the same heads).
"""

from __future__ import annotations

import argparse
import math
import re
import time
from pathlib import Path

import torch

SPECIALS = ["<pad>", "<unk>", "<bos>"]
N_POSITIONS = 64
SEGMENT = (4, 31)  # lengths of R; 1 + 2 * 31 = 63 < 64 positions


def build_tokenizer():
    """A word-level tokenizer over the sample corpus's words (lower case, punctuation split)."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    from attnlens.data.text import sample_sentences

    words = sorted({w for line in sample_sentences()
                    for w in re.findall(r"\w+|[^\w\s]", line.lower())})
    vocab = {token: i for i, token in enumerate([*SPECIALS, *words])}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.normalizer = normalizers.Lowercase()
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    core.post_processor = processors.TemplateProcessing(
        single="<bos> $A", special_tokens=[("<bos>", vocab["<bos>"])])
    return PreTrainedTokenizerFast(tokenizer_object=core, bos_token="<bos>", eos_token="<bos>",
                                   unk_token="<unk>", pad_token="<pad>")


def batch_of_repeats(gen: torch.Generator, ordinary: torch.Tensor, size: int,
                     bos: int) -> torch.Tensor:
    """``[size, 1 + 2 R]`` sequences ``<bos> R R`` with one random R length per batch."""
    length = int(torch.randint(SEGMENT[0], SEGMENT[1] + 1, (1,), generator=gen))
    picks = torch.stack([torch.randperm(len(ordinary), generator=gen)[:length]
                         for _ in range(size)])
    segment = ordinary[picks]  # [size, R]
    first = torch.full((size, 1), bos, dtype=torch.long)
    return torch.cat([first, segment, segment], dim=1)


def train(out: Path, steps: int, seed: int, batch_size: int = 32) -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    tokenizer = build_tokenizer()
    bos = tokenizer.bos_token_id
    ordinary = torch.arange(len(SPECIALS), len(tokenizer))
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=4, intermediate_size=128,
                         max_position_embeddings=N_POSITIONS, bos_token_id=bos,
                         eos_token_id=bos, pad_token_id=tokenizer.pad_token_id,
                         tie_word_embeddings=True)
    model = LlamaForCausalLM(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    gen = torch.Generator().manual_seed(seed)
    began = time.perf_counter()
    for step in range(1, steps + 1):
        lr = 3e-3 * min(1.0, step / 50) * 0.5 * (1 + math.cos(math.pi * step / steps))
        for group in optimizer.param_groups:
            group["lr"] = lr
        ids = batch_of_repeats(gen, ordinary, batch_size, bos)
        labels = ids.clone()
        labels[:, : (ids.shape[1] + 1) // 2] = -100  # <bos> and the first copy: not scored
        loss = model(input_ids=ids, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if step % 200 == 0 or step == steps:
            with torch.no_grad():
                test = batch_of_repeats(torch.Generator().manual_seed(10_000), ordinary, 64, bos)
                logits = model(input_ids=test).logits
                half = (test.shape[1] - 1) // 2
                repeat = torch.nn.functional.cross_entropy(
                    logits[:, half + 1 : -1].flatten(0, 1), test[:, half + 2 :].flatten())
            print(f"step {step}: loss {loss.item():.3f}, second-repeat loss "
                  f"{repeat.item():.3f} nats ({time.perf_counter() - began:.0f} s)", flush=True)
    out.mkdir(parents=True, exist_ok=True)
    model.eval().save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    print(f"saved to {out}/; try: attnlens heads {out} --window 8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="folder to save the model and tokenizer in")
    parser.add_argument("--steps", type=int, default=800)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1,
                        help="CPU threads (one is fastest for so small a model)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    train(args.out, args.steps, args.seed)


if __name__ == "__main__":
    main()
