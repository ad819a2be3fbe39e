"""Inputs of the language-model head measures: options, probe files, the ordinary vocabulary,
the probe layout, and the GQA grouping of the streaming decision."""

from __future__ import annotations

import math
import subprocess
import sys

import pandas as pd
import pytest
import torch

from attnlens.errors import ConfigError, DataError
from attnlens.measures.lm_heads.settings import LmHeadsSettings, read_probe_file


def test_probe_file_is_read_and_checked(tmp_path) -> None:
    good = tmp_path / "probes.txt"
    good.write_text("# first R R\n0 5 6 7 5 6 7\n\n0, 9, 9\n")
    assert read_probe_file(good) == [[0, 5, 6, 7, 5, 6, 7], [0, 9, 9]]
    for text, message in [("0 5 6 5 7\n", "does not repeat"), ("0 5 6 5\n", "2 R \\+ 1"),
                          ("0 a a\n", "integers"), ("# nothing\n", "no probe"),
                          ("0 -1 -1\n", "non-negative")]:
        bad = tmp_path / "bad.txt"
        bad.write_text(text)
        with pytest.raises(DataError, match=message):
            read_probe_file(bad)
    with pytest.raises(DataError, match="does not exist"):
        read_probe_file(tmp_path / "missing.txt")


@pytest.mark.parametrize(("options", "message"), [
    ({"probe_sequences": 0}, "--probe-sequences"), ({"probe_length": 0}, "--probe-length"),
    ({"window": 0}, "--window"), ({"context": 0}, "--context"),
    ({"sink_tokens": -1}, "--sink-tokens"), ({"controls": -1}, "--controls"),
    ({"streaming_threshold": 0.0}, "--streaming-threshold"), ({"ablation": "half"}, "--ablation"),
])
def test_settings_refuse_impossible_values(options, message) -> None:
    with pytest.raises(ConfigError, match=message):
        LmHeadsSettings(**options).check()


def test_probe_file_and_no_probes_contradict(tmp_path) -> None:
    path = tmp_path / "p.txt"
    path.write_text("0 1 1\n")
    with pytest.raises(ConfigError, match="contradict"):
        LmHeadsSettings(probes=False, probe_file=path).check()


def test_settings_import_no_torch() -> None:
    code = ("import sys; import attnlens.measures.lm_heads.settings; "
            "print(sorted(m for m in ('torch', 'pandas', 'numpy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_ordinary_vocabulary_leaves_out_special_and_unused_tokens() -> None:
    from tokenizers import Tokenizer as CoreTokenizer
    from tokenizers import models
    from transformers import PreTrainedTokenizerFast

    from attnlens.data.tokenizer import Tokenizer
    from attnlens.measures.lm_heads.probes import ordinary_token_ids

    words = ["[PAD]", "[CLS]", "[SEP]", "[unused0]", "[unused17]", "<0x0A>", "<extra_id_3>",
             "the", "cat", "##s", "."]
    vocab = {w: i for i, w in enumerate(words)}
    hf = PreTrainedTokenizerFast(tokenizer_object=CoreTokenizer(models.WordLevel(vocab,
                                                                                 "[PAD]")),
                                 pad_token="[PAD]", cls_token="[CLS]", sep_token="[SEP]")
    tokenizer = Tokenizer(hf)
    assert ordinary_token_ids(tokenizer, vocab_size=len(words)) == [7, 8, 9, 10]
    assert ordinary_token_ids(tokenizer, vocab_size=9) == [7, 8]  # the model's vocabulary


def test_random_probes_have_the_probe_layout_and_a_file_reproduces_them(tmp_path) -> None:
    from attnlens.measures.lm_heads.probes import (
        probes_from_file,
        query_targets,
        random_probes,
    )

    probes = random_probes(range(10, 60), 5, 6, seed=3, first=[1], closing=[2], pad_id=0,
                           special={1, 2})
    ids = probes.input_ids
    assert ids.shape == (5, 14) and (ids[:, 0] == 1).all() and (ids[:, -1] == 2).all()
    assert torch.equal(ids[:, 1:7], ids[:, 7:13])
    assert all(len(set(row[1:7].tolist())) == 6 for row in ids)  # without replacement
    assert probes.special_mask[:, [0, 13]].all() and not probes.special_mask[:, 1:13].any()
    same = random_probes(range(10, 60), 5, 6, seed=3, first=[1], closing=[2], pad_id=0,
                         special={1, 2})
    assert torch.equal(same.input_ids, ids)  # seeded
    path = tmp_path / "probes.txt"
    path.write_text("\n".join(" ".join(map(str, row[:13].tolist())) for row in ids))
    again = probes_from_file(read_probe_file(path), [2], 0, {1, 2}, vocab_size=60)
    assert torch.equal(again.input_ids, ids)
    with pytest.raises(ConfigError, match="beyond the model's vocabulary"):
        probes_from_file(read_probe_file(path), [2], 0, {1, 2}, vocab_size=30)
    (batch,) = probes.batches()
    targets, valid = query_targets(batch)
    assert valid[0].nonzero().flatten().tolist() == [7, 8, 9, 10, 11, 12]  # R+1 .. 2R
    assert targets[0, :, 9].tolist() == [8, 3, 4]  # i - 1, i - R, i - R + 1


def test_probes_of_several_lengths_are_scored_per_sequence() -> None:
    from attnlens.measures.lm_heads.probes import probes_from_file, query_targets

    probes = probes_from_file([[1, 5, 6, 5, 6], [1, 7, 8, 9, 7, 8, 9]], [], 0, {1}, 20)
    (batch,) = probes.batches()
    assert batch.extra["repeat"] == [2, 3]
    _, valid = query_targets(batch)
    assert valid.sum(1).tolist() == [2, 3]
    assert valid[0].nonzero().flatten().tolist() == [3, 4]


def test_streaming_is_decided_per_key_value_head() -> None:
    from attnlens.measures.lm_heads.streaming import (
        StreamingError,
        kv_cache_savings,
        streaming_table,
    )

    errors = StreamingError([4, 4], sink_tokens=4, window=8)  # 4 query heads, 2 KV heads
    errors.error_sums = torch.tensor([[0.01, 0.02, 0.01, 0.5], [0.0, 0.0, 0.3, 0.3]],
                                     dtype=torch.float64)
    errors.sentences = 1
    table = streaming_table({"corpus": errors}, [2, 2], threshold=0.1)
    assert table["kv_head"].tolist() == [0, 0, 1, 1] * 2
    # KV head 1 of layer 0 serves heads 2 (0.01) and 3 (0.5): not streaming for either
    assert table["streaming"].tolist() == [True, True, False, False, True, True, False, False]
    assert table["head_below_threshold"].tolist()[:4] == [True, True, True, False]
    kv = kv_cache_savings(table, context=1000).iloc[0]
    assert (kv["kv_heads"], kv["streaming_kv_heads"]) == (4, 2)
    assert kv["compressed_cache_tokens"] == 2 * 12 + 2 * 1000
    assert kv["ratio"] == pytest.approx(4000 / 2024)
    assert kv["reduction"] == pytest.approx(1 - 2024 / 4000)


def test_streaming_needs_sequences_longer_than_the_kept_tokens() -> None:
    from attnlens.measures.lm_heads.streaming import StreamingError, streaming_table

    errors = StreamingError([2], sink_tokens=4, window=64)
    table = streaming_table({"corpus": errors}, [2], threshold=0.1)
    assert table["output_error"].isna().all() and not table["streaming"].any()
    assert math.isnan(errors.mean_errors()[0, 0])


def test_restriction_keeps_sinks_and_the_window() -> None:
    from attnlens.measures.lm_heads.streaming import restriction

    real = torch.tensor([[1, 1, 1, 1, 1, 1, 0]]).bool()
    causal = restriction(real, sink_tokens=1, window=2, causal=True)[0]
    assert causal[5].nonzero().flatten().tolist() == [0, 4, 5]
    both = restriction(real, sink_tokens=1, window=2, causal=False)[0]
    assert both[3].nonzero().flatten().tolist() == [0, 2, 3, 4]


def test_gqa_models_get_their_kv_head_column() -> None:
    from attnlens.measures.lm_heads.copying import copying_table
    from attnlens.measures.lm_heads.probes import ProbeScores, random_probes
    from attnlens.stats.bootstrap import Inference
    from attnlens.stream.runner import run_analyzers
    from tests.helpers import tiny_model

    model = tiny_model(n_heads=4, n_kv_heads=2, causal=True, head="lm")
    probes = ProbeScores.for_model(model, Inference(bootstrap=0))
    batches = random_probes(range(1, 50), 6, 5, 0, [1], [], 0, {1}).batches()
    run_analyzers(model, batches, [probes], show_progress=False)
    for table in (probes.table(), copying_table(model)):
        assert (table["kv_head"] == table["head"] // 2).all()
        assert isinstance(table, pd.DataFrame) and not table["value"].isna().any()


def test_a_tokenizer_without_a_first_token_gives_probes_without_one() -> None:
    """No leading special token, BOS or EOS (a word-level causal tokenizer): the probes are
    R + R, read as the model reads its texts, and the planted heads are still found."""
    from attnlens.measures.lm_heads.probes import ProbeScores, frame_tokens, random_probes
    from attnlens.stats.bootstrap import Inference
    from attnlens.stream.runner import run_analyzers
    from tests.lm_heads_toys import BOS, INDUCTION_HEAD, ORDINARY, PREV_HEAD, toy_model
    from tests.pruning_toys import word_tokenizer

    assert frame_tokens(word_tokenizer(causal=True)) == ([], [])
    probes = random_probes(ORDINARY, 20, 8, seed=0, first=[], closing=[], pad_id=BOS,
                           special={BOS})
    assert probes.prefix == [0] * 20 and probes.input_ids.shape[1] == 16
    model = toy_model()
    scores = ProbeScores.for_model(model, Inference(bootstrap=0))
    run_analyzers(model, probes.batches(), [scores], show_progress=False)
    table = scores.table().set_index(["measure", "layer", "head"])["value"]
    # toy heads: near one-hot attention (score gap 30); the first query of the second
    # repeat has no earlier token after its copy's predecessor, so not exactly 1
    assert table[("induction", *INDUCTION_HEAD)] > 0.8
    assert table[("previous_token", *PREV_HEAD)] > 0.99
