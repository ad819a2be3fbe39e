"""The attention viewer's data (packing, the real MiniLM's patterns) and `attnlens view`."""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from attnlens.cli.app import app, main
from typer.testing import CliRunner

from attnlens.viewer import AttentionView, ViewData, pack_matrices, text_attention
from attnlens.viewer.packing import rest_means, unpack_matrices
from tests.report_fixtures import XSS_IMG, XSS_SCRIPT

runner = CliRunner()


def softmax_rows(count: int, n: int, seed: int = 0) -> np.ndarray:
    generator = np.random.default_rng(seed)
    logits = generator.normal(size=(count, n, n)) * 3
    weights = np.exp(logits)
    return weights / weights.sum(-1, keepdims=True)


def test_dense_packing_is_exact_float32() -> None:
    matrices = softmax_rows(4, 9).astype(np.float32)
    packed = pack_matrices(matrices)
    assert (packed["format"], packed["dtype"]) == ("dense", "float32")
    np.testing.assert_array_equal(unpack_matrices(packed), matrices)  # bit for bit


def test_sparse_rows_keep_95_percent_of_each_row_exactly() -> None:
    matrices = softmax_rows(3, 40).astype(np.float32)
    packed = pack_matrices(matrices, budget_bytes=3 * 40 * 40 * 4 - 1)  # dense does not fit
    assert packed["format"] == "sparse" and packed["mass"] == 0.95 and packed["cap"] is None
    stored = unpack_matrices(packed)
    rest = rest_means(packed)
    for m in range(3):
        for i in range(40):
            row = matrices[m, i]
            kept = np.flatnonzero(stored[m, i])
            # The smallest prefix of the sorted row that holds 95 % of its sum.
            order = np.argsort(-row, kind="stable")
            need = int(np.searchsorted(np.cumsum(row[order].astype(np.float64)),
                                       0.95 * row.astype(np.float64).sum()) + 1)
            assert set(kept) == set(order[:need])
            np.testing.assert_array_equal(stored[m, i, kept], row[kept])  # exact values
            # The rest: its mean over the other keys, from the float64 row sum; the row sum is
            # taken in fp32 (40 terms: within 40 x 6e-8 relative of the float64 one).
            others = np.setdiff1d(np.arange(40), kept)
            np.testing.assert_allclose(rest[m, i], row[others].astype(np.float64).mean(),
                                       rtol=0, atol=40 * 6e-8 / len(others))
    assert packed["stats"]["covered"] == 3 * 40


def test_a_small_budget_caps_every_row_and_says_so() -> None:
    matrices = softmax_rows(2, 50, seed=1).astype(np.float32) * 0 + 1 / 50  # uniform rows
    packed = pack_matrices(matrices, budget_bytes=2 * 50 * (12 + 6 * 5))  # 5 entries a row
    assert packed["format"] == "sparse" and packed["cap"] == 5
    stats = packed["stats"]
    assert stats["covered"] == 0 and stats["mean_entries"] == 5
    assert abs(stats["min_stored_mass"] - 5 / 50) < 1e-6
    # The rest of a uniform row is the uniform weight of the 45 keys not stored.
    np.testing.assert_allclose(rest_means(packed), 1 / 50, rtol=1e-6)


def test_causal_rows_count_only_the_keys_the_mask_allows() -> None:
    n = 30
    weights = np.tril(np.ones((n, n), dtype=np.float32))
    weights /= weights.sum(-1, keepdims=True)  # query i: 1 / (i + 1) on keys 0..i
    packed = pack_matrices(weights[None], budget_bytes=n * (12 + 6 * 3), causal=True)
    rest = rest_means(packed)[0]
    kept = (unpack_matrices(packed)[0] > 0).sum(-1)
    for i in range(n):
        allowed = i + 1
        if allowed > kept[i]:  # the unstored allowed keys share the rest equally
            assert abs(rest[i] - 1 / allowed) < 1e-6


def test_tokens_keep_their_space_markers() -> None:
    data = ViewData(tokens=["Ġthe", "▁cat", "##s", "Ġ"], patterns=[np.full((1, 4, 4), 0.25)])
    assert data.payload()["tokens"] == ["Ġthe", "▁cat", "##s", "Ġ"]


def test_viewer_data_of_the_real_model(minilm) -> None:
    model, tokenizer = minilm
    data = text_attention(model, tokenizer, "The cat sat on the mat.")
    assert data.tokens[0] == "[CLS]" and data.tokens[-1] == "[SEP]"
    n = len(data.tokens)
    assert len(data.patterns) == 6 and data.patterns[0].shape == (12, n, n)
    # Each row is a softmax in fp32 over n <= 10 keys: sums within 10 x 1.2e-7 of 1.
    sums = np.stack(data.patterns).sum(-1)
    assert np.abs(sums - 1).max() <= 1e-6
    with torch.no_grad():
        batch = tokenizer(["The cat sat on the mat."])
        # The same hooks as the viewer (hooking fewer layers lets the others take the SDPA
        # path, whose rounding differs): then the patterns are the same numbers.
        _, cache = model.run_with_cache(**batch,
                                        names_filter=lambda n: n.endswith("hook_pattern"))
    np.testing.assert_array_equal(data.patterns[3], cache["pattern", 3][0].numpy())
    payload = data.payload()
    assert payload["heads"] == [12] * 6 and payload["n"] == n and payload["kv_heads"] == [12] * 6
    assert payload["causal"] is False
    restored = unpack_matrices(payload["patterns"]).reshape(6, 12, n, n)
    np.testing.assert_array_equal(restored, np.stack(data.patterns))
    # Each token's piece of the text, with its whitespace: joined they are the text.
    assert data.pieces[0] is None and data.pieces[-1] is None  # [CLS], [SEP]
    assert "".join(data.pieces[1:-1]) == "The cat sat on the mat."
    assert data.trained == {"tokens": 256, "source": "sentence_bert_config.json max_seq_length"}


def test_overlay_shape_is_checked() -> None:
    data = ViewData(tokens=["a", "b"], patterns=[np.full((1, 2, 2), 0.5)])
    with pytest.raises(ValueError, match="must be"):
        data.add_overlay("x", "X", np.zeros((2, 2, 2)))
    data.add_overlay("x", "X", np.full((1, 2, 2), 0.5))
    assert data.payload()["overlays"][0]["name"] == "x"


def test_page_escapes_the_text_and_tokens(tmp_path: Path) -> None:
    text = f"{XSS_SCRIPT} {XSS_IMG}"
    data = ViewData(tokens=["[CLS]", XSS_SCRIPT, XSS_IMG, "[SEP]"],
                    patterns=[np.full((2, 4, 4), 0.25)], model=XSS_IMG, text=text)
    page = AttentionView(data).save(tmp_path / "v.html").read_text(encoding="utf-8")
    assert "<img src=x" not in page and "<script>alert" not in page
    assert page.count("<script") == 2
    payload = json.loads(re.search(r'id="attnlens-data">(.*?)</script>', page, re.S).group(1))
    assert payload["tokens"][1:3] == [XSS_SCRIPT, XSS_IMG] and payload["text"] == text
    notebook = AttentionView(data)._repr_html_()
    assert ' srcdoc="' in notebook and 'sandbox="allow-scripts allow-downloads"' in notebook
    # The page is escaped inside srcdoc; the only live script is the frame-sizing listener.
    assert notebook.count("<script") == 1 and "<img src=x" not in notebook


@pytest.mark.parametrize(("args", "message"), [
    (["   "], "the text is empty"),
    ([], "give the text to look at"),
    (["hello", "--view", "graph"], "choose head, text, model or matrix"),
    (["hello", "--heads", "a,b"], "give head numbers"),
    (["hello", "--heads", "L1H2,L2H3"], "belong to one layer"),
    (["hello", "--out", "."], "is a folder"),
    (["hello", "--out", "no/such/dir/v.html"], "does not exist"),
    (["notes.txt"], "is an existing path, not a text: to look at the text of a file, use "
                    "--file notes.txt"),
    (["mymodel"], "mymodel is a model folder, not a text: give the text after it"),
    (["--file", "missing.txt"], "--file missing.txt does not exist"),
    (["--file", "mymodel"], "is a folder"),
    (["--file", "latin1.txt"], "is not UTF-8 text"),
    (["--file", "notes.txt", "mymodel", "extra text"], "give the text once"),
    (["hello", "--generate", "3"], "--generate needs a causal language model"),
    (["hello", "--generate", "3", "--pair", "b"], "leave out --pair"),
    (["hello", "--report", "nowhere"], "--report nowhere does not exist"),
    (["hello", "--report", "."], "holds no tables/head_roles.csv"),
])
def test_view_errors_are_one_line_and_come_before_loading(args, message, monkeypatch, capsys,
                                                           tmp_path) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.txt").write_text("A text in a file.", encoding="utf-8")
    (tmp_path / "latin1.txt").write_bytes("caf\xe9".encode("latin-1"))
    (tmp_path / "mymodel").mkdir()
    (tmp_path / "mymodel" / "config.json").write_text("{}", encoding="utf-8")

    def refuse(*a, **k):
        raise AssertionError("the model must not load for a bad argument")

    monkeypatch.setattr("attnlens.loaders.load", refuse)
    monkeypatch.setattr("sys.argv", ["attnlens", "view", *args])
    with pytest.raises(SystemExit) as exit_info:
        main()
    assert exit_info.value.code == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("Error: ") and message in err


def test_view_command_writes_the_page(tmp_path: Path) -> None:
    out = tmp_path / "view.html"
    result = runner.invoke(app, ["view", "The cat sat on the mat.", "--out", str(out),
                                 "--layer", "2", "--heads", "0,8", "--view", "matrix"])
    assert result.exit_code == 0, result.output
    page = out.read_text(encoding="utf-8")
    payload = json.loads(re.search(r'id="attnlens-data">(.*?)</script>', page, re.S).group(1))
    assert payload["initial"] == {"layer": 2, "heads": [0, 8], "view": "matrix"}
    assert payload["layers"] == 6 and payload["tokens"][0] == "[CLS]"
    bad = runner.invoke(app, ["view", "hi", "--out", str(out), "--layer", "6", "--force"])
    assert bad.exit_code != 0 and "layers 0..5" in str(bad.exception)


def test_view_replaces_an_existing_page_only_with_force(tmp_path: Path) -> None:
    out = tmp_path / "view.html"
    out.write_text("<p>my notes</p>", encoding="utf-8")
    args = ["view", "It rained.", "--out", str(out), "--no-rollout"]
    refused = runner.invoke(app, args)
    assert refused.exit_code != 0 and "add --force" in str(refused.exception)
    assert out.read_text(encoding="utf-8") == "<p>my notes</p>"
    forced = runner.invoke(app, [*args, "--force"])
    assert forced.exit_code == 0, forced.output
    assert 'id="attnlens-data"' in out.read_text(encoding="utf-8")
    assert [p.name for p in tmp_path.iterdir()] == ["view.html"]  # written beside, renamed


def _payload_of(page: Path) -> dict:
    text = page.read_text(encoding="utf-8")
    return json.loads(re.search(r'id="attnlens-data">(.*?)</script>', text, re.S).group(1))


def test_view_reads_the_text_from_a_file_or_standard_input(tmp_path: Path) -> None:
    source = tmp_path / "text.txt"
    source.write_text("The lamp was lit.\n", encoding="utf-8")
    out = tmp_path / "file.html"
    result = runner.invoke(app, ["view", "--file", str(source), "--out", str(out),
                                 "--no-rollout"])
    assert result.exit_code == 0, result.output
    assert _payload_of(out)["text"] == "The lamp was lit.\n"
    for args in (["view", "-"], ["view", "--file", "-"]):
        out = tmp_path / f"stdin{len(args)}.html"
        result = runner.invoke(app, [*args, "--out", str(out), "--no-rollout"],
                               input="It rained all night.")
        assert result.exit_code == 0, result.output
        payload = _payload_of(out)
        assert payload["text"] == "It rained all night."
        assert "".join(p for p in payload["pieces"] if p) == "It rained all night."


def test_default_max_length_is_the_trained_length_and_longer_inputs_warn(tmp_path) -> None:
    text = " ".join(["the keeper climbed the stairs"] * 80)  # 400 words, 400 tokens
    out = tmp_path / "default.html"
    result = runner.invoke(app, ["view", text, "--out", str(out), "--no-rollout"])
    assert result.exit_code == 0, result.output
    payload = _payload_of(out)
    assert payload["n"] == 256  # MiniLM's sentence_bert_config.json max_seq_length
    assert payload["trained"]["tokens"] == 256
    assert [w for w in payload["warnings"] if "trained on" in w] == []
    assert any("only the first 256" in w for w in payload["warnings"])
    longer = tmp_path / "longer.html"
    result = runner.invoke(app, ["view", text, "--out", str(longer), "--max-length", "300",
                                 "--no-rollout"])
    assert result.exit_code == 0, result.output
    warning = "the input has 300 tokens, more than the 256 this model was trained on"
    assert warning in result.stderr
    assert any(warning in w for w in _payload_of(longer)["warnings"])
    assert "Warning: " + warning in longer.read_text(encoding="utf-8")  # on the page


def test_trained_length_reads_the_checkpoint_files(tmp_path: Path) -> None:
    from attnlens.loaders.trained_length import trained_length

    def folder(name: str, config: dict, sbert: dict | None = None) -> Path:
        path = tmp_path / name
        path.mkdir()
        (path / "config.json").write_text(json.dumps(config), encoding="utf-8")
        if sbert is not None:
            (path / "sentence_bert_config.json").write_text(json.dumps(sbert), "utf-8")
        return path

    sbert = trained_length(folder("sbert", {"max_position_embeddings": 512},
                                  {"max_seq_length": 256}))
    assert (sbert.tokens, sbert.source) == (256, "sentence_bert_config.json max_seq_length")
    gpt2 = trained_length(folder("gpt2", {"n_positions": 1024, "n_ctx": 1024}))
    assert (gpt2.tokens, gpt2.source) == (1024, "config.json n_positions")
    roberta = trained_length(folder("roberta", {"model_type": "roberta", "pad_token_id": 1,
                                                "max_position_embeddings": 514}))
    assert roberta.tokens == 512 and "pad_token_id + 1" in roberta.source
    # padding id 0: positions start at 1, one fewer usable
    xlmr = trained_length(folder("xlmr", {"model_type": "xlm-roberta", "pad_token_id": 0,
                                          "max_position_embeddings": 64}))
    assert xlmr.tokens == 63
    assert trained_length(folder("t5", {"model_type": "t5"})) is None
    assert trained_length(tmp_path / "nowhere") is None


def test_role_badges_come_from_the_report_table(tmp_path: Path) -> None:
    report = tmp_path / "report"
    (report / "tables").mkdir(parents=True)
    (report / "tables" / "head_roles.csv").write_text(
        "layer,head,roles,evidence,view\n0,2,positional,\"positional: offset -1\",tested\n"
        "1,3,none,,tested\n2,8,positional; syntactic,\"both\",tested\n", encoding="utf-8")
    out = tmp_path / "roles.html"
    result = runner.invoke(app, ["view", "It rained.", "--out", str(out), "--report",
                                 str(report), "--heads", "L2H8", "--no-rollout"])
    assert result.exit_code == 0, result.output
    payload = _payload_of(out)
    assert payload["initial"] == {"layer": 2, "heads": [8], "view": "head"}
    roles = payload["roles"]
    assert roles["view"] == "tested" and roles["source"].endswith("head_roles.csv")
    assert roles["heads"] == [
        {"layer": 0, "head": 2, "roles": ["positional"], "evidence": "positional: offset -1"},
        {"layer": 2, "head": 8, "roles": ["positional", "syntactic"], "evidence": "both"}]
    (report / "tables" / "head_roles.csv").write_text("layer,head,roles\n9,0,positional\n",
                                                      encoding="utf-8")
    other = runner.invoke(app, ["view", "It rained.", "--out", str(tmp_path / "x.html"),
                                "--report", str(report)])
    assert other.exit_code != 0 and "names L9H0, which this model does not have" in str(
        other.exception)


def test_pieces_of_a_pair_and_of_a_slow_tokenizer(minilm) -> None:
    from transformers import BertTokenizerLegacy  # transformers 5's slow (Python) tokenizer

    from attnlens.data.tokenizer import Tokenizer
    from attnlens.viewer.data import encode_text

    _, fast = minilm
    pair = encode_text(fast, "The cat sat.", "It was   tired.", 64)
    tokens = fast.decode_tokens(pair.ids)
    assert tokens[0] == "[CLS]" and pair.pieces[0] is None
    first_sep = tokens.index("[SEP]")
    assert "".join(pair.pieces[1:first_sep]) == "The cat sat."
    assert "".join(pair.pieces[first_sep + 1:-1]) == "It was   tired."  # spaces as written
    # A special token typed in the text is a badge, and the text around it is not repeated.
    typed = encode_text(fast, "a [SEP] b", None, 32)
    assert typed.pieces == [None, "a", None, " b", None]
    # Without offsets (a slow tokenizer), pieces come from decoding each token in context.
    slow = Tokenizer(BertTokenizerLegacy.from_pretrained(fast.hf.name_or_path,
                                                         local_files_only=True))
    assert not slow.hf.is_fast
    encoded = encode_text(slow, "the lamplighters sat.", None, 64)
    assert slow.decode_tokens(encoded.ids)[2:5] == ["lamp", "##light", "##ers"]
    assert encoded.pieces == [None, "the", " lamp", "light", "ers", " sat", ".", None]


def test_the_python_api_warns_past_the_trained_length(minilm) -> None:
    import attnlens

    model, tokenizer = minilm
    text = " ".join(["the keeper climbed the stairs"] * 60)  # 300 words
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        shown = attnlens.view(text, model, tokenizer, max_length=280, rollout=False)
    said = [str(w.message) for w in caught if w.category is UserWarning]
    assert any("more than the 256 this model was trained on" in s for s in said)
    assert any("only the first 280 are shown" in s for s in said)
    assert shown.data.n == 280 and "<iframe" in shown._repr_html_()
