"""The language-model heads measure through the hf backend (``--backend hf``): on every
single-stack family the backend is tested on, the sink and probe scores equal an independent
computation from the same checkpoint's eager attentions (``output_attentions=True``), and the
whole measure runs, copying scores included (read through ``token_maps()``; ELECTRA, whose
embeddings are projected to the residual width, gets the reason instead)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnlens.data.tokenizer import Tokenizer
from attnlens.loaders import load_model
from attnlens.measures.lm_heads.probes import random_probes
from attnlens.measures.lm_heads.run import LmHeads
from attnlens.measures.lm_heads.settings import LmHeadsSettings
from attnlens.measures.lm_heads.sinks import SinkScores
from attnlens.stats.bootstrap import Inference
from attnlens.stream.runner import run_analyzers
from tests.hf_utils import FAMILIES, save_checkpoint
from tests.test_lm_heads_hf import attnlens_scores, hf_probe_scores

SINGLE_STACK = [name for name, (_, arch) in FAMILIES.items()
                if "ConditionalGeneration" not in arch]
# Patterns agree with eager attention to a few fp32 ulps of a weight <= 1 (the hf backend's
# parity bound, tests/test_parity_hf.py); a score is a mean of such weights.
TOL = 1e-5


@pytest.mark.parametrize("model_type", SINGLE_STACK)
def test_scores_through_the_hf_backend_match_eager_attentions(model_type, tmp_path) -> None:
    import transformers

    folder = save_checkpoint(tmp_path / model_type, model_type)
    model = load_model(folder, backend="hf")
    assert model.backend == "hf"
    architecture = FAMILIES[model_type][1]
    hf = getattr(transformers, architecture).from_pretrained(
        folder, attn_implementation="eager").eval()
    vocab = model.cfg.vocab_size
    # ids 3.. of the word-level vocabulary (0-2: pad, bos, eos); R = 6 fits every window
    batches = random_probes(range(3, vocab), 12, 6, seed=0, first=[1], closing=[], pad_id=0,
                            special={1}).batches(5)
    ours, _ = attnlens_scores(model, batches)
    theirs = hf_probe_scores(hf, batches)
    print(f"probes on tiny {model_type} (hf backend): max |attnlens - HF eager| = "
          f"{np.abs(ours - theirs).max():.2e}")
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=TOL)

    sinks = SinkScores.for_model(model, Inference(bootstrap=0))
    run_analyzers(model, batches, [sinks], show_progress=False)
    table = sinks.table().set_index(["layer", "head"])["value"]
    per_sentence = []
    for batch in batches:
        with torch.no_grad():
            out = hf(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                     output_attentions=True)
        att = torch.stack(out.attentions).double()  # [layer, batch, head, query, key]
        for b in range(batch.size):
            n = int(batch.attention_mask[b].sum())  # right padding: real tokens 0 .. n-1
            per_sentence.append(att[:, b, :, :n, 0].mean(-1))  # [layer, head]
    theirs = torch.stack(per_sentence).mean(0).numpy()
    diff = max(abs(table[(layer, head)] - theirs[layer, head])
               for layer in range(theirs.shape[0]) for head in range(theirs.shape[1]))
    print(f"sink on tiny {model_type} (hf backend): max |attnlens - HF eager| = {diff:.2e}")
    assert diff <= TOL, diff


@pytest.mark.parametrize("model_type", SINGLE_STACK)
def test_the_whole_measure_runs_through_the_hf_backend(model_type, tmp_path) -> None:
    folder = save_checkpoint(tmp_path / model_type, model_type)
    model = load_model(folder, backend="hf")
    lm = LmHeads(LmHeadsSettings(probe_sequences=20, probe_length=6, window=4, sink_tokens=1,
                                 controls=2).check(), Inference(bootstrap=20))
    analyzers = lm.corpus_analyzers(model, Tokenizer.from_pretrained(folder))
    corpus = random_probes(range(3, model.cfg.vocab_size), 12, 9, seed=5, first=[1],
                           closing=[], pad_id=0, special={1}).batches(4)  # any token ids
    run_analyzers(model, corpus, analyzers, show_progress=False)
    result = lm.compute(model)
    scores = result.tables["probe_scores"]
    probes = {"previous_token", "duplicate_token", "induction", "retrieval"}
    if model_type == "electra":  # its 16-wide embeddings are projected to the 32-wide stream
        assert set(scores["measure"]) == probes
        assert "a projection sits between them" in result.facts["copying_missing"]
    else:
        assert set(scores["measure"]) == probes | {"copying", "copying_ratio"}
        assert result.facts["copying_missing"] is None
        copying = scores[scores["measure"] == "copying"]
        assert len(copying) == sum(model.heads_per_layer)
        assert copying["value"].between(0, 1).all()
        form = "unembedding" if model.cfg.head == "lm" else "embedding"
        assert set(copying["detail"]) == {f"OV circuit, {form} form"}
    assert result.tables["streaming_heads"]["probes_error"].notna().all()
    causal_lm = model.cfg.head == "lm" and model.cfg.causal
    assert result.facts["metrics"] == (["second_repeat_loss", "perplexity"] if causal_lm
                                       else [])
