"""The language-model heads measure runs on a tiny model of every single-stack architecture
the native converters load (encoders, causal LMs with and without an LM head, GQA, rotary,
relative positions); encoder-decoder models leave the section out with a note."""

from __future__ import annotations

import numpy as np
import pytest

from attnlens.loaders.registry import CONVERTERS
from attnlens.loaders.verify import ENCODER_ONLY, save_tiny, tiny_config
from attnlens.loaders.verify_seq2seq import TINY_SEQ2SEQ_CONFIGS
from attnlens.measures.lm_heads.run import LmHeads
from attnlens.measures.lm_heads.settings import LmHeadsSettings
from attnlens.stats.bootstrap import Inference
from attnlens.stream.runner import run_analyzers
from tests.lm_heads_toys import random_batches, toy_tokenizer

SINGLE_STACK = [(model_type, architecture)
                for model_type, converter in CONVERTERS.items()
                for architecture in converter.architectures
                if model_type not in TINY_SEQ2SEQ_CONFIGS or architecture in ENCODER_ONLY]


@pytest.mark.parametrize(("model_type", "architecture"), SINGLE_STACK)
def test_the_measure_runs_on_every_single_stack_architecture(model_type, architecture,
                                                             tmp_path) -> None:
    import transformers

    from attnlens.loaders import load_model

    save_tiny(getattr(transformers, architecture), tiny_config(model_type), tmp_path)
    model = load_model(tmp_path)
    lm = LmHeads(LmHeadsSettings(probe_sequences=20, probe_length=6, window=4, sink_tokens=1,
                                 controls=2).check(), Inference(bootstrap=20))
    # the toy tokenizer's ids (0 .. 39) lie inside every tiny model's vocabulary (101)
    analyzers = lm.corpus_analyzers(model, toy_tokenizer())
    run_analyzers(model, random_batches(n=12, length=10), analyzers, show_progress=False)
    result = lm.compute(model)
    scores = result.tables["probe_scores"]
    assert np.isfinite(scores["value"]).all()
    assert set(scores["measure"]) >= {"induction", "retrieval", "copying"}
    assert len(result.sink_rows) == sum(model.heads_per_layer)
    streaming = result.tables["streaming_heads"]
    assert streaming["probes_error"].notna().all()  # long probes of R = 9 > window 4
    causal_lm = model.cfg.head == "lm"
    assert bool(result.facts["metrics"]) == causal_lm  # no --sts-data: only LMs are checked
