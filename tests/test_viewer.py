"""The attention viewer's data (packing, the real MiniLM's patterns) and `attnlens view`."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from attnlens.cli.app import app, main
from typer.testing import CliRunner

from attnlens.viewer import AttentionView, ViewData, pack_matrices, text_attention
from attnlens.viewer.data import display_token, unpack_matrices
from tests.report_fixtures import XSS_IMG, XSS_SCRIPT

runner = CliRunner()


def softmax_rows(count: int, n: int, seed: int = 0) -> np.ndarray:
    generator = np.random.default_rng(seed)
    logits = generator.normal(size=(count, n, n)) * 3
    weights = np.exp(logits)
    return weights / weights.sum(-1, keepdims=True)


def test_dense_packing_is_exact_to_its_quantisation_step() -> None:
    matrices = softmax_rows(4, 9)
    packed = pack_matrices(matrices)
    assert (packed["format"], packed["bits"]) == ("dense", 16)
    # Rounding to the nearest of 65535 steps: at most half a step, 1 / (2 * 65535) = 7.6e-6.
    assert np.abs(unpack_matrices(packed) - matrices).max() <= 0.5 / 65535 + 1e-12


def test_packing_falls_back_to_8_bits_then_top_k() -> None:
    matrices = softmax_rows(3, 20)
    eight = pack_matrices(matrices, budget_bytes=3 * 20 * 20)  # room for 1 byte per weight
    assert (eight["format"], eight["bits"]) == ("dense", 8)
    assert np.abs(unpack_matrices(eight) - matrices).max() <= 0.5 / 255 + 1e-12
    top = pack_matrices(matrices, budget_bytes=1100)  # < 1 byte per weight: 4 bytes x 4 keys
    assert (top["format"], top["k"]) == ("topk", 4)
    restored = unpack_matrices(top)
    for m in range(3):
        for i in range(20):
            kept = np.flatnonzero(restored[m, i])
            assert set(kept) == set(np.argsort(-matrices[m, i])[:4])
            np.testing.assert_allclose(restored[m, i, kept], matrices[m, i, kept],
                                       atol=0.5 / 65535 + 1e-12)


def test_display_tokens_drop_byte_level_space_marks() -> None:
    assert [display_token(t) for t in ("Ġthe", "▁cat", "##s", "Ġ")] == ["the", "cat", "##s", "Ġ"]


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
    assert payload["heads"] == [12] * 6 and payload["n"] == n
    restored = unpack_matrices(payload["patterns"]).reshape(6, 12, n, n)
    assert np.abs(restored - np.stack(data.patterns)).max() <= 0.5 / 65535 + 1e-7


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
    assert "<iframe srcdoc=" in AttentionView(data)._repr_html_()


@pytest.mark.parametrize(("args", "message"), [
    (["   "], "TEXT is empty"),
    (["hello", "--view", "graph"], "choose head, model or matrix"),
    (["hello", "--heads", "a,b"], "--heads takes whole numbers"),
    (["hello", "--out", "."], "is a folder"),
    (["hello", "--out", "no/such/dir/v.html"], "does not exist"),
])
def test_view_errors_are_one_line_and_come_before_loading(args, message, monkeypatch, capsys,
                                                           tmp_path) -> None:
    monkeypatch.chdir(tmp_path)

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
