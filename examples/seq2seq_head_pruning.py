"""Train a tiny encoder-decoder to reverse digit strings, then ask which heads it needs.

    python examples/seq2seq_head_pruning.py [--save DIR]

Michel et al. (2019) and Voita et al. (2019) report that in translation models the
decoder-encoder (cross) attention depends most on having several heads. This script checks
the claim on a toy it trains on one CPU core in about 30 s of CPU time (wall time: 28 s on
a 2-core machine at load average 2-3, minutes under heavy load; docs/encoder-decoder.md): a
2+2-layer BART-style model (4 heads per attention, 24 heads in all) learns to reverse
strings of 4 to 9 digits. It then prunes heads of one attention type at a time (importance
order restricted to encoder self-attention, decoder self-attention or cross-attention) and
of all types together, and prints the held-out target cross-entropy at each step, plus
where each type's heads sit in the overall importance order. It says nothing about real
translation models. ``--save DIR`` writes the trained model as a Hugging Face BART folder
with its tokenizer and the held-out pairs (pairs.tsv), for `attnlens prune DIR --data
DIR/pairs.tsv`.
"""

from __future__ import annotations

import argparse
import random
import time
from pathlib import Path

import pandas as pd
import torch
import torch.nn.functional as F

from attnlens.data.tokenizer import Tokenizer
from attnlens.measures.pruning import PruneSettings, prune
from attnlens.measures.pruning.attention_tables import attention_first, removed_by_attention
from attnlens.metrics.seq2seq import Seq2SeqMetric, decoder_inputs
from attnlens.model.config import TransformerConfig
from attnlens.model.encoder_decoder import EncoderDecoderConfig, EncoderDecoderTransformer

SPECIALS = ("<pad>", "<s>", "</s>", "<unk>")  # ids 0-3; digits are 4-13
TYPES = ("encoder", "decoder", "cross")


def digit_tokenizer() -> Tokenizer:
    """Word-level tokenizer over the ten digits: ``<s> d d d </s>``."""
    from tokenizers import Tokenizer as RustTokenizer
    from tokenizers import models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate([*SPECIALS, *"0123456789"])}
    rust = RustTokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    rust.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    rust.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", special_tokens=[("<s>", 1), ("</s>", 2)]
    )
    hf = PreTrainedTokenizerFast(tokenizer_object=rust, pad_token="<pad>", bos_token="<s>",
                                 eos_token="</s>", unk_token="<unk>")
    return Tokenizer(hf)


def reversal_pairs(n: int, seed: int) -> tuple[list[str], list[str]]:
    """``n`` (source, reversed source) pairs of 4 to 9 space-separated digits."""
    rng = random.Random(seed)
    sources = [" ".join(rng.choice("0123456789") for _ in range(rng.randint(4, 9)))
               for _ in range(n)]
    return sources, [" ".join(reversed(s.split())) for s in sources]


def tiny_bart(d_model: int = 64, layers: int = 2, heads: int = 4) -> EncoderDecoderTransformer:
    """A BART-shaped model (post-norm, learned positions from 2) that exports as BART."""
    common = dict(d_model=d_model, n_heads=heads, d_mlp=4 * d_model, vocab_size=14, n_ctx=34,
                  position_offset=2, embed_norm=True, norm_position="post", pad_token_id=0,
                  source={"model_type": "bart"})
    cfg = EncoderDecoderConfig(
        encoder=TransformerConfig(n_layers=layers, **common),
        decoder=TransformerConfig(n_layers=layers, causal=True, cross_attention=True, **common),
        vocab_size=14, head="lm", lm_head_bias=True, decoder_start_token_id=2, pad_token_id=0,
        source={"model_type": "bart", "name": "digit-reversal toy"},
    )
    model = EncoderDecoderTransformer(cfg)
    with torch.no_grad():  # zero biases, small embeddings; one table for both stacks and head
        for name, p in model.named_parameters():
            if name.endswith(("b_Q", "b_K", "b_V", "b_O", "bias")) and "norm" not in name:
                p.zero_()
            elif "embed.weight" in name or "pos_embed" in name:
                p.normal_(0.0, d_model**-0.5)
        model.decoder.embed.weight = model.encoder.embed.weight
        model.head.decoder.weight = model.encoder.embed.weight
    return model


def train(model, tokenizer, steps: int, batch_size: int = 64, seed: int = 0) -> list[float]:
    """Teacher-forced training on fresh random pairs; returns the loss every 50 steps."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.01)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=2e-3, total_steps=steps,
                                                   pct_start=0.1)
    model.train()
    losses = []
    for step in range(steps):
        sources, targets = reversal_pairs(batch_size, seed=seed * 1_000_003 + step)
        metric = Seq2SeqMetric(sources, targets, tokenizer, batch_size=batch_size)
        (batch,) = metric.loss_batches()
        logits = model(**decoder_inputs(model, batch.inputs), return_type="logits")
        loss = F.cross_entropy(logits.transpose(1, 2), batch.target, ignore_index=-100)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        schedule.step()
        if step % 50 == 0 or step == steps - 1:
            losses.append(loss.item())
    model.eval()
    return losses


def exact_match(model, metric: Seq2SeqMetric, head_mask=None) -> float:
    """Share of targets whose every token is the arg-max prediction (teacher forcing)."""
    right = total = 0
    with torch.no_grad():
        for batch in metric.loss_batches():
            logits = model(**decoder_inputs(model, batch.inputs), head_mask=head_mask)
            ok = (logits.argmax(-1) == batch.target) | (batch.target == -100)
            right += int(ok.all(dim=1).sum())
            total += batch.n_examples
    return right / total


def run(steps: int = 600, n_eval: int = 400, seeds: int = 3, step: float = 0.125,
        max_fraction: float = 0.75, save: Path | None = None, verbose: bool = True,
        seed: int = 0) -> dict:
    """Train (``seed``: initialisation and training data), prune, return the tables."""
    start = time.perf_counter()
    tokenizer = digit_tokenizer()
    torch.manual_seed(seed)
    model = tiny_bart()
    losses = train(model, tokenizer, steps, seed=seed)
    trained = time.perf_counter() - start
    sources, targets = reversal_pairs(n_eval, seed=99_999)  # held-out strings
    data = Seq2SeqMetric(sources, targets, tokenizer, batch_size=100)
    importance, evaluation = data.subset(range(n_eval // 2)), data.subset(range(n_eval // 2,
                                                                                 n_eval))
    orders = ["importance", *(f"importance:{t}" for t in TYPES), "random"]
    # Michel's per-layer L2 normalisation gives every gate row the same total score, which
    # interleaves the layers (and so the attention types) by construction: compare raw scores.
    settings = PruneSettings(orders=orders, step=step, max_fraction=max_fraction, seeds=seeds,
                             normalize=False)
    result = prune(model, importance, evaluation, settings)
    by_type = removed_by_attention(model, result.curve)
    first = attention_first(model, result.scores)
    tables = {"losses": losses, "curve": result.curve, "by_attention": by_type,
              "first": first, "baseline": result.baseline,
              "exact_match": exact_match(model, evaluation), "seconds": 0.0,
              "train_seconds": trained}
    if save is not None:
        from attnlens.loaders.export import export_hf

        export_hf(model, save)
        tokenizer.hf.save_pretrained(str(save))
        (save / "pairs.tsv").write_text(
            "".join(f"{s}\t{t}\n" for s, t in zip(sources, targets, strict=True)))
    tables["seconds"] = time.perf_counter() - start
    if verbose:
        report(tables)
    return tables


def report(tables: dict) -> None:
    curve = tables["curve"]
    print(f"training loss every 50 steps: {', '.join(f'{x:.3f}' for x in tables['losses'])}")
    print(f"held-out target cross-entropy {tables['baseline']:.4f} nats/token, "
          f"exact match {tables['exact_match']:.1%}")
    print("\nheld-out cross-entropy after removing k heads of one attention type "
          "(importance order within the type):")
    rows = []
    for attention in TYPES:
        part = curve[curve["order"] == f"importance:{attention}"]
        rows.append({"attention": attention,
                     **{f"k={n}": round(m, 3) for n, m in zip(part["n_pruned"], part["metric"],
                                                             strict=True)}})
    print(pd.DataFrame(rows).to_string(index=False))
    print("\nwhere each type's heads sit in the overall importance order "
          "(mean rank 0 = pruned first):")
    first = tables["first"]
    print(first[first["order"] == "importance"].to_string(index=False))
    overall = tables["by_attention"]
    overall = overall[overall["order"] == "importance"]
    half = overall[overall["step"] == overall["step"].max() // 2]
    print("\noverall importance order, heads removed per type at step "
          f"{half['step'].iloc[0]}: "
          + ", ".join(f"{r.attention} {r.removed}/{r.heads}" for r in half.itertuples()))
    print(f"\n{tables['seconds']:.0f} s in all ({tables['train_seconds']:.0f} s training)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--save", type=Path, default=None, help="Export the model here.")
    parser.add_argument("--steps", type=int, default=600, help="Training steps.")
    parser.add_argument("--seed", type=int, default=0, help="Initialisation and data seed.")
    args = parser.parse_args()
    torch.set_num_threads(1)  # a model this small gains nothing from more threads
    run(steps=args.steps, save=args.save, seed=args.seed)


if __name__ == "__main__":
    main()
