"""A hand-built two-layer causal LM with known heads, for the language-model heads tests.

Residual stream (no norms, no MLPs), four blocks of dimensions: the token (one-hot), the
position (one-hot), the previous token (written by L0H0) and the output (written by L1H0,
read by the unembedding). Heads:

- L0H0, previous-token head: query position i matches key position i - 1 (scores
  ``SHARP`` apart); it copies the key's token into the previous-token block;
- L0H1, sink head: a constant query matches position 0 only; it writes nothing;
- L1H0, induction head: query token t matches keys whose previous-token block holds t
  (the token after an earlier copy of t); it copies the key's token into the output block,
  which the unembedding turns into a logit of ``LOGIT`` for that token;
- every other head: small random weights (near-uniform attention, a small output).

So on probes ``[BOS] + R + R`` L1H0 predicts the second repeat, L0H0 attends to i - 1, L0H1
to position 0; nothing else has a role.
"""

from __future__ import annotations

import torch

from attnlens.data.batch import Batch
from attnlens.model.config import TransformerConfig
from attnlens.model.transformer import HookedTransformer

VOCAB = 40  # token 0 is BOS, the probes' first token; 1..39 are ordinary
N_CTX = 64
D_HEAD = 64  # >= VOCAB and N_CTX
SHARP = 30.0  # score gap of the planted heads: off-target weights below e^-30 each
LOGIT = 10.0  # the output block's logit scale
BOS = 0
TOKEN, POSITION, PREVIOUS, OUTPUT = 0, VOCAB, VOCAB + N_CTX, 2 * VOCAB + N_CTX
D_MODEL = 3 * VOCAB + N_CTX
PREV_HEAD, SINK_HEAD, INDUCTION_HEAD = (0, 0), (0, 1), (1, 0)
ORDINARY = list(range(1, VOCAB))


def toy_config(n_heads: int = 4, n_kv_heads: int | None = None) -> TransformerConfig:
    return TransformerConfig(
        d_model=D_MODEL, n_layers=2, n_heads=n_heads, n_kv_heads=n_kv_heads, d_head=D_HEAD,
        d_mlp=4, vocab_size=VOCAB, n_ctx=N_CTX, positional="learned", norm_position="pre",
        use_norm=False, use_mlp=False, causal=True, head="lm", attn_scale=1.0,
        attn_out_bias=False, pad_token_id=BOS,
    )


@torch.no_grad()
def toy_model(seed: int = 0, noise: float = 0.02) -> HookedTransformer:
    """The model of the module docstring (eval mode, float32)."""
    torch.manual_seed(seed)
    model = HookedTransformer(toy_config())
    for name, param in model.named_parameters():
        is_bias = name.rsplit(".", 1)[-1].startswith("b_") or param.dim() == 1
        param.zero_() if is_bias else param.normal_(0.0, noise)
    eye_v, eye_p = torch.eye(VOCAB), torch.eye(N_CTX)
    model.embed.weight.zero_()
    model.embed.weight[:, TOKEN:TOKEN + VOCAB] = eye_v
    model.pos_embed.weight.zero_()
    model.pos_embed.weight[:, POSITION:POSITION + N_CTX] = eye_p
    model.head.decoder.weight.zero_()
    model.head.decoder.weight[:, OUTPUT:OUTPUT + VOCAB] = LOGIT * eye_v

    prev = model.blocks[0].attn
    for W in (prev.W_Q, prev.W_K, prev.W_V, prev.W_O):
        W[0].zero_()
    prev.W_Q[0, POSITION:POSITION + N_CTX, :N_CTX] = SHARP * eye_p  # query i -> e_i
    prev.W_K[0, POSITION:POSITION + N_CTX - 1, 1:N_CTX] = torch.eye(N_CTX - 1)  # key j -> e_j+1
    prev.W_V[0, TOKEN:TOKEN + VOCAB, :VOCAB] = eye_v
    prev.W_O[0, :VOCAB, PREVIOUS:PREVIOUS + VOCAB] = eye_v

    for W in (prev.W_Q, prev.W_K, prev.W_V, prev.W_O):
        W[1].zero_()
    prev.b_Q[1, 0] = SHARP  # every query: e_0
    prev.W_K[1, POSITION, 0] = 1.0  # position 0's key: e_0

    induction = model.blocks[1].attn
    for W in (induction.W_Q, induction.W_K, induction.W_V, induction.W_O):
        W[0].zero_()
    induction.W_Q[0, TOKEN:TOKEN + VOCAB, :VOCAB] = SHARP * eye_v
    induction.W_K[0, PREVIOUS:PREVIOUS + VOCAB, :VOCAB] = eye_v
    induction.W_V[0, TOKEN:TOKEN + VOCAB, :VOCAB] = eye_v
    induction.W_O[0, :VOCAB, OUTPUT:OUTPUT + VOCAB] = eye_v
    return model.eval()


def random_batches(n: int = 40, length: int = 20, batch_size: int = 8, seed: int = 3,
                   start: int = 0) -> list[Batch]:
    """A corpus of ``n`` random ordinary sequences after BOS, some padded (indices set)."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for first in range(0, n, batch_size):
        rows = min(batch_size, n - first)
        ids = torch.randint(1, VOCAB, (rows, length), generator=gen)
        ids[:, 0] = BOS
        lengths = torch.full((rows,), length)
        lengths[::3] = length - 5  # every third sentence shorter: padding
        mask = (torch.arange(length)[None] < lengths[:, None]).long()
        out.append(Batch(input_ids=ids * mask, attention_mask=mask,
                         special_mask=(ids == BOS) & mask.bool(),
                         extra={"index": list(range(start + first, start + first + rows))}))
    return out


def toy_tokenizer():
    """attnlens' ``Tokenizer`` over the toy vocabulary: ``<bos>`` (id 0, added before every
    text, also the padding) and the words ``t1`` .. ``t39``."""
    from tokenizers import Tokenizer as CoreTokenizer
    from tokenizers import models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    from attnlens.data.tokenizer import Tokenizer

    vocab = {"<bos>": BOS, **{f"t{i}": i for i in ORDINARY}}
    core = CoreTokenizer(models.WordLevel(vocab, unk_token="<bos>"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    core.post_processor = processors.TemplateProcessing(single="<bos> $A",
                                                        special_tokens=[("<bos>", BOS)])
    hf = PreTrainedTokenizerFast(tokenizer_object=core, bos_token="<bos>", pad_token="<bos>",
                                 unk_token="<bos>")
    return Tokenizer(hf)


def fed_lm_heads(model: HookedTransformer):
    """A small ``LmHeads`` measure (20 probes of 6 tokens, 2 controls, 20 bootstrap
    replicates) whose corpus analyzers have read 12 random sentences of 10 tokens."""
    from attnlens.measures.lm_heads.run import LmHeads
    from attnlens.measures.lm_heads.settings import LmHeadsSettings
    from attnlens.stats.bootstrap import Inference
    from attnlens.stream.runner import run_analyzers

    lm = LmHeads(LmHeadsSettings(probe_sequences=20, probe_length=6, window=4, sink_tokens=1,
                                 controls=2).check(), Inference(bootstrap=20))
    run_analyzers(model, random_batches(n=12, length=10),
                  lm.corpus_analyzers(model, toy_tokenizer()), show_progress=False)
    return lm


def assert_same_measure(whole, split) -> None:
    """Two ``LmHeads.compute`` results (the probes run at once, and split between
    processes) equal bit for bit: facts in the same order, every table, the role tests."""
    import pandas as pd

    assert whole.facts["long_probes"] >= 1
    assert list(whole.facts.items()) == list(split.facts.items())
    assert whole.tables.keys() == split.tables.keys()
    for name in whole.tables:
        pd.testing.assert_frame_equal(whole.tables[name], split.tables[name], check_exact=True)
    pd.testing.assert_frame_equal(whole.role_tests, split.role_tests, check_exact=True)
