"""The null model of a report (issue 28 item 1): null columns, the random-init copy, the CLI,
and findings stated against the null."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from attnlens.cli.app import app
from typer.testing import CliRunner

from attnlens.report.folder import Report
from attnlens.stats.null import add_null_columns, beyond_null
from tests.parity_utils import TINY, save_tiny
from tests.pruning_toys import sentences, vocab_size, word_tokenizer
from tests.report_fixtures import known_tables, write_report

runner = CliRunner()


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory) -> Path:
    from transformers import BertConfig, BertModel

    path = tmp_path_factory.mktemp("tiny_bert")
    save_tiny(BertModel, BertConfig(vocab_size=vocab_size(), **TINY), path)
    word_tokenizer().hf.save_pretrained(str(path))
    return path


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("corpus") / "corpus.txt"
    path.write_text("\n".join(sentences(24, min_len=4)) + "\n", encoding="utf-8")
    return path


def per_head(values: dict[tuple[int, int], float], measure: str = "m") -> pd.DataFrame:
    return pd.DataFrame([{"layer": layer, "head": head, "measure": measure, "value": v}
                         for (layer, head), v in values.items()])


def test_null_columns_are_the_null_heads_of_the_same_layer_and_measure() -> None:
    model = per_head({(0, 0): 0.9, (0, 1): 0.1, (1, 0): 0.5, (1, 1): 0.5})
    null = per_head({(0, 0): 0.2, (0, 1): 0.4, (1, 0): 0.6, (1, 1): 1.0})
    out = add_null_columns(model, null)
    assert list(out.columns[:4]) == ["layer", "head", "measure", "value"]
    layer0, layer1 = out[out["layer"] == 0].iloc[0], out[out["layer"] == 1].iloc[0]
    # two null heads per layer: mean and linear-interpolated 5th / 95th percentiles
    assert layer0["null_mean"] == pytest.approx(0.3)
    assert layer0["null_high"] == pytest.approx(0.2 + 0.95 * 0.2)
    assert layer0["null_low"] == pytest.approx(0.2 + 0.05 * 0.2)
    assert layer1["null_mean"] == pytest.approx(0.8)
    assert beyond_null(0.9, layer0["null_low"], layer0["null_high"]) is True
    assert beyond_null(0.35, layer0["null_low"], layer0["null_high"]) is False
    assert beyond_null(0.05, layer0["null_low"], layer0["null_high"], higher=False) is True


def test_a_best_of_model_table_is_held_to_the_null_models_best() -> None:
    """syntactic_best has one row per relation and direction (its best head anywhere): the
    null is the null model's own best row of that key, whatever layer it sits in."""
    best = pd.DataFrame({"relation": ["nsubj", "det"], "direction": ["dep->head"] * 2,
                         "layer": [2, 0], "head": [8, 1], "accuracy": [0.6, 0.9]})
    null = pd.DataFrame({"relation": ["det", "nsubj"], "direction": ["dep->head"] * 2,
                         "layer": [1, 5], "head": [3, 0], "accuracy": [0.7, 0.3]})
    out = add_null_columns(best, null, value="accuracy")
    assert out.set_index("relation")["null_high"].to_dict() == {"nsubj": 0.3, "det": 0.7}


def test_random_init_copy_is_the_architectures_own_initialisation(tiny_bert: Path) -> None:
    from attnlens.loaders import load_model
    from attnlens.loaders.random_init import random_init_copy

    model = load_model(tiny_bert)
    first, again = random_init_copy(model, seed=3), random_init_copy(model, seed=3)
    other = random_init_copy(model, seed=4)
    assert first.initialisation == "transformers" and "BertModel" in first.describe
    assert first.model.cfg.n_layers == model.cfg.n_layers
    assert first.model.heads_per_layer == model.heads_per_layer
    w = first.model.blocks[0].attn.W_Q.detach()
    assert torch.equal(w, again.model.blocks[0].attn.W_Q)  # seeded
    assert not torch.equal(w, other.model.blocks[0].attn.W_Q)
    assert not torch.equal(w, model.blocks[0].attn.W_Q)
    # BERT's _init_weights: normal(0, initializer_range = 0.02); 32 x 32 = 1,024 draws, so
    # the sample std is within 0.02 * (1 +- 5 / sqrt(2 * 1024)) ~ +-11 % (5 sigma).
    assert float(w.std()) == pytest.approx(0.02, rel=0.11)


def test_a_model_built_in_code_gets_attnlens_reset() -> None:
    from attnlens.loaders.random_init import RESET_STD, random_init_copy
    from tests.helpers import tiny_model

    model = tiny_model()
    null = random_init_copy(model, seed=0)
    assert null.initialisation == "attnlens reset"
    assert float(null.model.blocks[0].attn.W_Q.detach().std()) == pytest.approx(RESET_STD, rel=0.2)
    assert torch.equal(model.blocks[0].attn.W_Q, tiny_model().blocks[0].attn.W_Q)  # untouched


def test_report_tables_gain_null_columns_and_run_json_states_the_cost(
        tiny_bert: Path, corpus: Path, tmp_path: Path) -> None:
    out = tmp_path / "report"
    result = runner.invoke(app, ["heads", str(tiny_bert), "--text", str(corpus), "--out",
                                 str(out), "--quiet", "--null-seed", "1"])
    assert result.exit_code == 0, result.output
    stats = pd.read_csv(out / "tables" / "head_stats.csv")
    assert {"null_mean", "null_low", "null_high"} <= set(stats.columns)
    assert stats["null_high"].notna().all()
    assert (stats["null_low"] <= stats["null_high"]).all()
    positional = pd.read_csv(out / "tables" / "positional_heads.csv")
    assert positional["null_high"].notna().all()
    run = json.loads((out / "run.json").read_text())
    null = run["null"]
    assert null["seed"] == 1 and null["sentences"] == 24 and null["seconds"] > 0
    assert "head_stats" in null["tables"] and "transformers" in null["initialisation"]
    assert "null model pass (included in total)" in run["timings"]
    page = (out / "index.html").read_text(encoding="utf-8")
    assert "Every finding is held to a <b>null model</b>" in page


def test_null_none_leaves_the_tables_as_they_were(tiny_bert: Path, corpus: Path,
                                                  tmp_path: Path) -> None:
    out = tmp_path / "plain"
    result = runner.invoke(app, ["heads", str(tiny_bert), "--text", str(corpus), "--out",
                                 str(out), "--quiet", "--null", "none"])
    assert result.exit_code == 0, result.output
    stats = pd.read_csv(out / "tables" / "head_stats.csv")
    assert not any(c.startswith("null_") for c in stats.columns)
    assert json.loads((out / "run.json").read_text())["null"] == {"kind": "none"}
    assert "No null model in this run" in (out / "index.html").read_text(encoding="utf-8")


def with_null(tables: dict[str, pd.DataFrame], name: str, high: float, low: float = 0.0,
              value: str = "value") -> None:
    tables[name] = tables[name].assign(null_mean=(low + high) / 2, null_low=low,
                                       null_high=high)


def test_findings_say_beyond_the_null_only_when_it_is(tmp_path: Path) -> None:
    tables = known_tables()
    with_null(tables, "positional_heads", high=0.5)  # L0H2's 99.8 % is beyond it
    with_null(tables, "rare_words", high=0.45)  # the closest rare-word head (40 %) is within
    texts = [f.text() for f in Report(write_report(tmp_path / "r", tables)).findings()]
    assert ("L0H2 is a previous-token head: 99.8 % of tokens attend most to the previous token "
            "(beyond the null: 95 % of the heads of a randomly initialised model of this shape "
            "stay below 50.0 %).") in texts
    rare = next(t for t in texts if "rare-word head" in t)
    assert "within the null: a randomly initialised model of this shape gives as much (up to " \
           "45.0 %), so this does not show learned structure" in rare


def test_a_role_within_the_null_is_not_stated_as_a_role(tmp_path: Path) -> None:
    tables = known_tables()
    with_null(tables, "positional_heads", high=0.999)
    texts = [f.text() for f in Report(write_report(tmp_path / "r", tables)).findings()]
    line = next(t for t in texts if t.startswith("L0H2"))
    assert line.startswith("L0H2 passes the positional test (99.8 % of tokens attend most to "
                           "the previous token), but within the null")
    assert "is a previous-token head" not in line


def test_untested_roles_say_not_tested_with_the_reason(tmp_path: Path) -> None:
    tables = known_tables()
    tables["positional_heads"] = tables["positional_heads"].assign(
        tested=False, n_sentences=4, min_sentences=20, min_tokens=100)
    texts = [f.text() for f in Report(write_report(tmp_path / "r", tables)).findings()]
    line = next(t for t in texts if "ositional" in t and "role:" not in t)
    assert line.startswith("Positional heads not tested (4 sentences < 20); the largest share")
    assert "No head is positional" not in " ".join(texts)


def test_theory_results_are_shown_apart_from_findings(tmp_path: Path) -> None:
    tables = known_tables()
    tables["collapse_variants"] = pd.DataFrame({
        "variant": ["san", "san", "full", "full"], "norm": ["composite"] * 4,
        "depth": [1, 2, 1, 2], "geo_mean": [1e-3, 1e-14, 0.7, 0.68]})
    folder = write_report(tmp_path / "r", tables,
                          extra_sections={"collapse": ["collapse_variants"]})
    report = Report(folder)
    theory = [f for f in report.findings() if f.kind == "theory"]
    assert len(theory) == 1 and "true of any model of this shape" in theory[0].text()
    page = Path(report.render()).read_text(encoding="utf-8")
    start = page.index("Guaranteed by theory")
    assert "reaches rounding noise" in page[start:]
    assert np.all([f.kind == "finding" for f in report.findings() if f.section == "heads"])


@pytest.mark.parametrize("settings", [
    {},  # tests' TINY BERT
    {"pad_token_id": None, "initializer_range": 0.05, "type_vocab_size": 1},
    {"hidden_size": 48, "num_attention_heads": 3, "intermediate_size": 40,
     "max_position_embeddings": 20, "pad_token_id": 5},
])
@pytest.mark.parametrize("seed", [0, 3])
def test_bert_state_dict_is_transformers_initialisation_bitwise(settings: dict,
                                                                seed: int) -> None:
    from transformers import BertConfig, BertModel

    from attnlens.loaders.bert_init import bert_state_dict, covers

    config = BertConfig(vocab_size=vocab_size(), **{**TINY, **settings})
    assert covers("BertModel", config)
    torch.manual_seed(seed)
    expected = BertModel(config).state_dict()
    expected_next = torch.rand(4)  # where transformers left the global generator
    got = bert_state_dict(config, seed)
    assert torch.equal(torch.rand(4), expected_next)
    assert list(got) == [k for k in expected if k in got] and set(got) == set(expected)
    for name, tensor in expected.items():
        assert got[name].dtype == tensor.dtype and torch.equal(got[name], tensor), name


def test_bert_state_dict_covers_only_what_it_reproduces() -> None:
    from transformers import BertConfig

    from attnlens.loaders.bert_init import covers

    config = BertConfig(vocab_size=vocab_size(), **TINY)
    assert not covers("BertForMaskedLM", config)
    assert not covers("BertModel", BertConfig(vocab_size=vocab_size(), is_decoder=True,
                                              add_cross_attention=True, **TINY))


def test_random_init_copy_of_a_bert_equals_the_path_through_transformers_class(
        tiny_bert: Path, monkeypatch) -> None:
    from attnlens.loaders import bert_init, load_model
    from attnlens.loaders.random_init import random_init_copy

    model = load_model(tiny_bert)
    fast = random_init_copy(model, seed=5)
    monkeypatch.setattr(bert_init, "covers", lambda *args: False)
    slow = random_init_copy(model, seed=5)
    assert fast.initialisation == slow.initialisation
    # The description says which path made the weights; both are transformers' draws.
    assert "reproduced draw for draw (seed 5)" in fast.describe
    assert "own _init_weights (seed 5)" in slow.describe
    fast_state, slow_state = fast.model.state_dict(), slow.model.state_dict()
    assert set(fast_state) == set(slow_state)
    for name, tensor in slow_state.items():
        assert torch.equal(fast_state[name], tensor), name


def test_the_null_of_a_bert_does_not_import_transformers_modeling_code(
        tiny_bert: Path) -> None:
    code = ("import sys; from attnlens.loaders import load_model; "
            "from attnlens.loaders.random_init import random_init_copy; "
            f"random_init_copy(load_model({str(tiny_bert)!r}), 0); "
            "print('transformers.models.bert.modeling_bert' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


@pytest.mark.parametrize("drop", [(), ("pad_token_id", "initializer_range", "type_vocab_size",
                                       "max_position_embeddings", "vocab_size")])
@pytest.mark.parametrize("settings", [
    {},
    {"pad_token_id": None, "initializer_range": 0.05, "type_vocab_size": 1},
    {"hidden_size": 48, "num_attention_heads": 3, "intermediate_size": 40,
     "max_position_embeddings": 20, "pad_token_id": 5, "initializer_range": 0.0},
])
def test_config_from_json_reads_what_bert_config_reads(tmp_path: Path, settings: dict,
                                                       drop: tuple) -> None:
    """config.json read without transformers gives BertConfig's values (defaults included)
    for every field bert_state_dict reads, and so the same weights."""
    import json

    from transformers import AutoConfig, BertConfig

    from attnlens.loaders.bert_init import CONFIG_DEFAULTS, bert_state_dict, config_from_json

    BertConfig(vocab_size=vocab_size(), **{**TINY, **settings}).save_pretrained(str(tmp_path))
    data = json.loads((tmp_path / "config.json").read_text(encoding="utf-8"))
    for key in drop:
        data.pop(key, None)
    (tmp_path / "config.json").write_text(json.dumps(data), encoding="utf-8")
    expected = AutoConfig.from_pretrained(str(tmp_path), local_files_only=True)
    got = config_from_json(data)
    for key in ("model_type", *CONFIG_DEFAULTS):
        assert getattr(got, key) == getattr(expected, key), key
    a, b = bert_state_dict(expected, 2), bert_state_dict(got, 2)
    assert all(torch.equal(a[k], b[k]) for k in a) and list(a) == list(b)


def test_config_from_json_leaves_unusual_values_to_transformers() -> None:
    from attnlens.loaders.bert_init import config_from_json

    assert config_from_json({"model_type": "roberta"}) is None
    assert config_from_json({"model_type": "bert", "hidden_size": 384.0}) is None
    assert config_from_json({"model_type": "bert", "pad_token_id": "0"}) is None
    assert config_from_json({"model_type": "bert", "add_cross_attention": 1}) is None
    assert config_from_json({"model_type": "bert", "initializer_range": 1}) is None
    assert config_from_json({"model_type": "bert"}).hidden_size == 768


def test_the_null_of_minilm_imports_no_transformers() -> None:
    """MiniLM's null model (BertModel's draws from its config.json) and its tokenizer load
    without importing transformers (before: AutoConfig imported it, ~1 s)."""
    code = ("import sys; import attnlens; "
            "from attnlens.loaders.random_init import random_init_copy; "
            "model, _ = attnlens.load(); null = random_init_copy(model, 0); "
            "assert 'reproduced draw for draw' in null.describe, null.describe; "
            "print([m for m in sys.modules if m.split('.')[0] == 'transformers'])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
