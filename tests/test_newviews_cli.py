"""`attnlens rollout`, `sparse` and `linear` end to end on tiny checkpoints and on MiniLM."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from attnlens.cli.rollout import split_model_and_texts
from typer.testing import CliRunner

from attnlens.measures.linear.section import LinearSection
from attnlens.measures.rollout.section import RolloutSection
from attnlens.measures.sparse.section import SparseSection
from attnlens.report.analyze import default_sections
from tests.fixtures import invoke_cli, run_cli
from tests.parity_utils import TINY, save_tiny
from tests.pruning_toys import vocab_size, word_tokenizer

runner = CliRunner()
ROLLOUT_COLUMNS = ["sentence", "layer", "query", "key", "query_token", "key_token", "value"]
# Rollout is computed in float64 from float32 patterns whose rows sum to 1 within n * 1.2e-7;
# rows are renormalised in float64, so rollout rows sum to 1 within float64 rounding
# (written to CSV with 17 significant digits): 1e-12.
ROW_TOL = 1e-12


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory) -> Path:
    from transformers import BertConfig, BertModel

    path = tmp_path_factory.mktemp("tiny_bert")
    save_tiny(BertModel, BertConfig(vocab_size=vocab_size(), **TINY), path)
    word_tokenizer().hf.save_pretrained(str(path))
    return path


@pytest.fixture(scope="module")
def tiny_gpt2(tmp_path_factory) -> Path:
    from transformers import GPT2Config, GPT2Model

    path = tmp_path_factory.mktemp("tiny_gpt2")
    config = GPT2Config(vocab_size=vocab_size(), n_embd=32, n_layer=2, n_head=4, n_positions=64)
    save_tiny(GPT2Model, config, path)
    word_tokenizer(causal=True).hf.save_pretrained(str(path))
    return path


@pytest.fixture
def text_file(tmp_path) -> Path:
    path = tmp_path / "corpus.txt"
    lines = ["the cat sat on the mat", "a big dog ran", "the red bird saw a fish near the tree"]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _check_rollout_table(table: pd.DataFrame, n_layers: int, lengths: list[int]) -> None:
    assert list(table.columns[:7]) == ROLLOUT_COLUMNS
    assert sorted(table["sentence"].unique()) == list(range(len(lengths)))
    for sentence, n in enumerate(lengths):
        rows = table[table["sentence"] == sentence]
        assert len(rows) == n_layers * n * n  # padding excluded
        assert sorted(rows["query"].unique()) == list(range(n))  # positions from 0
        sums = rows.groupby(["layer", "query"])["value"].sum().to_numpy()
        np.testing.assert_allclose(sums, 1.0, rtol=0, atol=ROW_TOL)


def test_rollout_on_a_tiny_bert_with_texts(tiny_bert, tmp_path):
    out = tmp_path / "rollout"
    result = invoke_cli("rollout", str(tiny_bert), "the cat sat", "a big red dog ran near the tree",
                     "--out", str(out), "-q", ok=True)
    assert "Information moved per layer" in result.output
    table = pd.read_csv(out / "tables" / "rollout.csv", keep_default_na=False)
    _check_rollout_table(table, 2, [5, 10])  # [CLS] + words + [SEP]
    first = table[(table["sentence"] == 0) & (table["layer"] == 0)]
    assert first.drop_duplicates("key")["key_token"].tolist() == ["[CLS]", "the", "cat", "sat",
                                                                   "[SEP]"]
    layers = pd.read_csv(out / "tables" / "rollout_layers.csv")
    assert set(layers["measure"]) == {"special_share", "self_share", "moved", "distance",
                                      "mixing"}
    for name in ("rollout_layers", "rollout_sentence0_heatmap", "rollout_sentence1_readout"):
        assert (out / "figures" / f"{name}.svg").read_text().startswith("<?xml")


def test_flow_on_a_tiny_bert(tiny_bert, tmp_path):
    out = tmp_path / "flow"
    result = invoke_cli("rollout", str(tiny_bert), "the cat sat", "a dog", "--method", "flow",
                     "--head-fusion", "max", "--residual", "0.7", "--flow-max-tokens", "4",
                     "--out", str(out), "-q", ok=True)
    assert "skipped as too long: sentences 0" in result.output  # 5 tokens > 4
    flow = pd.read_csv(out / "tables" / "flow.csv", keep_default_na=False)
    assert list(flow.columns) == [*ROLLOUT_COLUMNS, "max_flow"]
    assert set(flow["sentence"]) == {1}
    sums = flow.groupby(["layer", "query"])["value"].sum().to_numpy()
    # each row divided by its float64 sum of CSV-rounded values
    np.testing.assert_allclose(sums, 1.0, rtol=0, atol=ROW_TOL)
    assert (flow["max_flow"] <= 1 + 1e-6).all()  # a position's outflow capacity is 1
    assert (out / "figures" / "flow_sentence1_heatmap.svg").is_file()
    assert (out / "tables" / "rollout.csv").is_file()


def test_rollout_on_a_causal_model_reads_the_last_token(tiny_gpt2, tmp_path):
    out = tmp_path / "causal"
    invoke_cli("rollout", str(tiny_gpt2), "the cat sat on the mat", "--out", str(out), "-q",
               ok=True)
    table = pd.read_csv(out / "tables" / "rollout.csv", keep_default_na=False)
    _check_rollout_table(table, 2, [6])
    # causal: position i draws only on tokens <= i
    assert (table.loc[table["key"] > table["query"], "value"] == 0).all()
    assert (out / "figures" / "rollout_sentence0_readout.svg").is_file()


def test_sparse_and_linear_on_a_tiny_bert(tiny_bert, text_file, tmp_path):
    out = tmp_path / "sparse"
    result = invoke_cli("sparse", str(tiny_bert), "--text", str(text_file), "--windows", "1,3",
                     "--global-tokens", "1", "--out", str(out), "-q", ok=True)
    assert "window ±3" in result.output and "BigBird" in result.output
    heads = pd.read_csv(out / "tables" / "sparse_heads.csv")
    assert len(heads) == 2 * 4 * 5 and set(heads["layer"]) == {0, 1}
    coverage = pd.read_csv(out / "tables" / "sparse_coverage.csv")
    assert set(coverage["window"].dropna()) == {1, 3}
    assert (out / "figures" / "sparse_window90.svg").is_file()
    out = tmp_path / "linear"
    result = invoke_cli("linear", str(tiny_bert), "--text", str(text_file), "--out", str(out),
                        "-q", ok=True)
    assert "Most linearisable heads" in result.output
    table = pd.read_csv(out / "tables" / "linear_attention.csv")
    assert len(table) == 2 * 4 * 7
    assert (out / "figures" / "linear_error.svg").is_file() and (out / "index.html").is_file()


def test_rollout_on_minilm_end_to_end(tmp_path):
    out = tmp_path / "minilm"
    invoke_cli("rollout", "The cat sat on the mat.", "It rained.", "--out", str(out), "-q", ok=True)
    table = pd.read_csv(out / "tables" / "rollout.csv", keep_default_na=False)
    _check_rollout_table(table, 6, [9, 5])  # [CLS] the cat sat on the mat . [SEP]
    tokens = table[(table["sentence"] == 1) & (table["layer"] == 5) & (table["query"] == 0)]
    assert tokens["key_token"].tolist() == ["[CLS]", "it", "rained", ".", "[SEP]"]


@pytest.mark.parametrize(("args", "message"), [
    (["rollout", "a b", "--head-fusion", "median"], "unknown head fusion 'median'"),
    (["rollout", "a b", "--method", "paths"], "unknown method 'paths'"),
    (["rollout", "a b", "--text", "corpus.txt"], "not TEXT and --text"),
    (["sparse", "--windows", "1,x"], "--windows takes whole numbers"),
    (["linear", "--text", "missing.txt"], "missing.txt"),
])
def test_bad_options_are_one_line_errors_before_loading(tmp_path, args, message):
    (tmp_path / "corpus.txt").write_text("one line\n", encoding="utf-8")
    result = run_cli(*args, "--out", str(tmp_path / "never"), cwd=tmp_path, timeout=300)
    assert result.returncode == 1, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and message in lines[0]
    assert not (tmp_path / "never").exists()


def test_model_and_texts_are_told_apart(tiny_bert):
    assert split_model_and_texts([str(tiny_bert), "the cat"]) == (str(tiny_bert), ["the cat"])
    assert split_model_and_texts(["owner/model", "the cat"]) == ("owner/model", ["the cat"])
    assert split_model_and_texts(["The cat sat.", "A dog."]) == (None, ["The cat sat.", "A dog."])
    assert split_model_and_texts(["Hello"]) == (None, ["Hello"])
    # one word followed by text, not a cached model: every argument is text
    assert split_model_and_texts(["Hello", "world"]) == (None, ["Hello", "world"])


def test_analyze_runs_the_new_sections():
    kinds = {type(section) for section in default_sections()}
    assert {RolloutSection, SparseSection, LinearSection} <= kinds


def test_encoder_decoder_models_get_rollout_per_stack_and_coverage_per_type(tmp_path):
    """Rollout runs on the encoder and decoder self-attention stacks only (cross-attention's
    keys are the encoder output at every layer: no product of layers); sparse coverage and the
    linear view on all three types (report.encoder_decoder.SECTION_ATTENTION)."""
    from attnlens.data.conllu import sample_treebank
    from tests.seq2seq_utils import tiny_bart_with_tokenizer

    words = sorted({w for s in sample_treebank() for w in s.words})
    tiny_bart_with_tokenizer(tmp_path / "bart", words)
    text = tmp_path / "corpus.txt"
    text.write_text("The cat sat .\nA dog ran near the tree .\n", encoding="utf-8")
    expected = {"rollout": ({"encoder", "decoder"}, "rollout_layers.csv"),
                "sparse": ({"encoder", "decoder", "cross"}, "sparse_heads.csv"),
                "linear": ({"encoder", "decoder", "cross"}, "linear_attention.csv")}
    for command, (attentions, table_name) in expected.items():
        out = tmp_path / command
        invoke_cli(command, str(tmp_path / "bart"), "--text", str(text), "--out", str(out), "-q",
                   ok=True)
        table = pd.read_csv(out / "tables" / table_name)
        assert set(table["attention"]) == attentions, command
    rollout = pd.read_csv(out.parent / "rollout" / "tables" / "rollout.csv",
                          keep_default_na=False)
    for _, part in rollout.groupby(["attention", "sentence", "layer", "query"]):
        assert abs(part["value"].sum() - 1.0) < ROW_TOL  # rows of each stack sum to 1
