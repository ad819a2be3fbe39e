"""Prune -> export -> analyze -> compare keeps every head's number (issue 23, item 2).

`prune --export` writes the pruned model padded to full size (each kept head in its original
place, zero heads for the removed ones: what transformers loads) and records the removed heads
in config.json's ``pruned_heads``; attnlens loads the folder as the pruned model, whose heads
keep their original numbers (``model.head_ids``) in every table, figure, page and CLI output,
so `compare` matches head L1H7 of the export with head L1H7 of the original.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest
import torch
from attnlens.cli.app import app
from typer.testing import CliRunner

from attnlens.errors import ModelLoadError
from attnlens.loaders import load_model
from attnlens.loaders.export import export_hf
from attnlens.measures.pruning import prune_heads
from attnlens.model.gates import parse_heads
from attnlens.model.head_ids import renumber_heads
from tests.parity_utils import save_tiny
from tests.pruning_toys import sentences, vocab_size, word_tokenizer, write_pairs

runner = CliRunner()
SHAPE = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=8, intermediate_size=64)
# Layer 0 loses heads 1 and 6, layer 1 heads 0, 2 and 5: L1H7 becomes the 5th head of layer 1.
MASK = torch.tensor([[1.0, 0, 1, 1, 1, 1, 0, 1], [0, 1, 0, 1, 1, 0, 1, 1]])
KEPT = [[0, 2, 3, 4, 5, 7], [1, 3, 4, 6, 7]]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    from transformers import BertConfig, BertModel

    path = tmp_path_factory.mktemp("tiny8") / "model"
    save_tiny(BertModel, BertConfig(vocab_size=vocab_size(), **SHAPE), path)
    word_tokenizer().hf.save_pretrained(str(path))
    return path


@pytest.fixture(scope="module")
def exported(tiny, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("export") / "pruned"
    export_hf(prune_heads(load_model(tiny), MASK), out)
    return out


def _inputs() -> dict[str, torch.Tensor]:
    return word_tokenizer()(sentences(4), max_length=16)


def test_the_export_records_pruned_heads_and_keeps_heads_in_place(tiny, exported):
    from safetensors.torch import load_file
    from transformers import BertModel

    config = json.loads((exported / "config.json").read_text())
    assert config["pruned_heads"] == {"0": [1, 6], "1": [0, 2, 5]}
    assert config["num_attention_heads"] == 8  # full size for transformers
    weights = load_file(exported / "model.safetensors")
    source = load_file(tiny / "model.safetensors")
    for layer in (0, 1):
        name = f"encoder.layer.{layer}.attention.self.query.weight"
        w, original = weights[name].reshape(8, 4, 32), source[name].reshape(8, 4, 32)
        for head in range(8):  # each kept head in its own place, removed heads zero
            expected = original[head] if head in KEPT[layer] else torch.zeros(4, 32)
            assert torch.equal(w[head], expected), (layer, head)
    model = load_model(tiny)
    hf = BertModel.from_pretrained(str(exported), attn_implementation="eager").eval()
    ours = load_model(exported)
    assert ours.heads_per_layer == [6, 5] and ours.head_ids == KEPT
    inputs = _inputs()
    real = inputs["attention_mask"].bool()
    with torch.no_grad():
        masked = model(**inputs, head_mask=MASK, return_type="hidden")
        theirs = hf(**inputs).last_hidden_state
        compact = ours(**inputs, return_type="hidden")
    # transformers' BERT vs ours: TINY_TOL of tests/parity_utils.py (other kernels and sum
    # orders, |h| <= ~4); the compact model vs the masked one: the same sums less zero terms
    torch.testing.assert_close(theirs[real], masked[real], rtol=0, atol=1e-5)
    torch.testing.assert_close(compact[real], masked[real], rtol=0, atol=1e-5)


def test_pruning_a_pruned_model_keeps_the_first_numbers(exported, tmp_path):
    model = load_model(exported)
    again = prune_heads(model, torch.tensor([[1.0, 1, 0, 1, 1, 1], [1, 1, 1, 1, 0, 0]]))
    assert again.head_ids == [[0, 2, 4, 5, 7], [1, 3, 4, 6]]
    export_hf(again, tmp_path / "twice")
    config = json.loads((tmp_path / "twice" / "config.json").read_text())
    assert config["pruned_heads"] == {"0": [1, 3, 6], "1": [0, 2, 5, 7]}
    assert load_model(tmp_path / "twice").head_ids == again.head_ids


def test_the_hf_backend_refuses_a_pruned_export(exported):
    """transformers ignores pruned_heads and would run the zero heads as heads."""
    with pytest.raises(ModelLoadError, match="--backend native"):
        load_model(exported, backend="hf")
    assert load_model(exported).head_ids == KEPT  # auto takes the native converter


def test_renumbering_maps_every_head_column_once():
    table = pd.DataFrame({"layer": [0, 1, 1], "head": [1, 4, 0], "layer_b": [1, 0, 0],
                          "head_b": [2, 5, 0], "n_heads": [8, 8, 8]})
    done = renumber_heads(table, KEPT)
    assert done["head"].tolist() == [2, 7, 1] and done["head_b"].tolist() == [4, 7, 0]
    assert done["n_heads"].tolist() == [8, 8, 8]
    assert renumber_heads(done, KEPT) is done  # a renumbered table is left alone


@pytest.mark.parametrize(("field", "message"), [
    ([1, 2], "is a list, not an object"),
    ({"2": [0]}, "names layer '2'; the model has layers 0 to 1"),
    ({"0": [8]}, "must list head numbers 0 to 7"),
    ({"0": list(range(8))}, "removes every head of layer 0"),
    ({"0": [0]}, "lists head L0H0, whose weights are not zero"),
])
def test_a_wrong_pruned_heads_field_is_a_clear_error(tiny, tmp_path, field, message):
    import shutil

    folder = tmp_path / "m"
    shutil.copytree(tiny, folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "pruned_heads": field}))
    with pytest.raises(ModelLoadError, match=re.escape(message)):
        load_model(folder)


def _head_pairs(folder: Path) -> dict[str, set[tuple[int, int]]]:
    """(layer, head) pairs of every table with both columns."""
    found = {}
    for path in sorted((folder / "tables").glob("*.csv")):
        table = pd.read_csv(path)
        if {"layer", "head"} <= set(table.columns) and len(table):
            found[path.stem] = {(int(a), int(b)) for a, b in zip(table["layer"], table["head"],
                                                                  strict=True) if a >= 0}
    return found


def test_prune_export_analyze_compare_keeps_head_numbers(tiny, tmp_path):
    pairs = write_pairs(tmp_path / "pairs.csv", 32)
    result = runner.invoke(app, [
        "prune", str(tiny), "--metric", "sts", "--pairs", str(pairs), "--order", "random",
        "--seeds", "1", "--step", "0.25", "--max-fraction", "0.25", "--batch-size", "8",
        "--out", str(tmp_path / "run"), "--export", str(tmp_path / "export")])
    assert result.exit_code == 0, result.output
    curve = pd.read_csv(tmp_path / "run" / "prune_curve.csv", keep_default_na=False)
    removed = parse_heads(curve["heads_removed"].iloc[-1])
    assert len(removed) == 4
    kept = {(layer, h) for layer in (0, 1) for h in range(8)} - set(removed)
    config = json.loads((tmp_path / "export" / "config.json").read_text())
    assert sorted((int(k), h) for k, v in config["pruned_heads"].items() for h in v) == removed
    message = " ".join(result.output.split())
    assert "padded to full size for transformers" in message
    assert "attnlens loads it compact" in message and "pruned_heads" in message

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(sentences(24)) + "\n", encoding="utf-8")
    for name, model in (("a", tiny), ("b", tmp_path / "export")):
        result = runner.invoke(app, ["analyze", str(model), "--text", str(corpus), "--out",
                                     str(tmp_path / name), "-q"])
        assert result.exit_code == 0, result.output
    run_b = json.loads((tmp_path / "b" / "run.json").read_text())
    assert run_b["model"]["heads"] == 8
    assert run_b["model"]["head_ids"] == [[h for (lay, h) in sorted(kept) if lay == layer]
                                          for layer in (0, 1)]
    pairs_a, pairs_b = _head_pairs(tmp_path / "a"), _head_pairs(tmp_path / "b")
    assert {"head_stats", "weight_asymmetry", "spectrum_summary", "positional_heads",
            "head_roles", "sparse_heads", "linear_attention"} <= set(pairs_b)
    for table, found in pairs_b.items():  # kept heads only, by their own numbers
        assert found == kept, table
        assert pairs_a[table] == kept | set(removed), table
    # The same weights give the same weight measures head for head; layer 0 reads the same
    # input, so its patterns (and statistics) are the same too.
    weights = [pd.read_csv(tmp_path / n / "tables" / "weight_asymmetry.csv") for n in "ab"]
    merged = weights[0].merge(weights[1], on=["layer", "head", "measure"])
    assert len(merged) == len(weights[1])
    # float64 functions of identical float32 weights in the same order: exact (measured 0.0)
    assert (merged["value_x"] - merged["value_y"]).abs().max() == 0.0
    stats = [pd.read_csv(tmp_path / n / "tables" / "head_stats.csv") for n in "ab"]
    layer0 = stats[0].merge(stats[1], on=["layer", "head", "measure"]).query("layer == 0")
    # fp32 patterns of the same layer-0 heads from the same embeddings; only the batch
    # composition of the pruned model's other layers differs: float32 rounding (1e-6)
    assert len(layer0) and (layer0["value_x"] - layer0["value_y"]).abs().max() < 1e-6

    result = runner.invoke(app, ["compare", str(tmp_path / "a"), str(tmp_path / "b"),
                                 "--out", str(tmp_path / "c"), "-q"])
    assert result.exit_code == 0, result.output
    diffs = pd.read_csv(tmp_path / "c" / "tables" / "differences.csv")
    weight_rows = diffs[(diffs["table"] == "weight_asymmetry") & diffs["difference"].notna()]
    assert {(a, b) for a, b in zip(weight_rows["layer"], weight_rows["head"],
                                   strict=True)} == kept  # removed heads: no difference
    assert (weight_rows["difference"] == 0).all()  # L1H7 compared with L1H7
    assert not (tmp_path / "c" / "tables" / "role_changes.csv").read_text().count("1,7,lost")


def test_viewer_and_prune_name_heads_by_their_numbers(exported, tmp_path):
    out = tmp_path / "view.html"
    result = runner.invoke(app, ["view", str(exported), "the cat sat on the mat", "--layer",
                                 "1", "--heads", "7", "--out", str(out)])
    assert result.exit_code == 0, result.output
    payload = json.loads(re.search(r'id="attnlens-data">(.*?)</script>',
                                   out.read_text(encoding="utf-8"), re.S).group(1))
    assert payload["head_ids"] == KEPT and payload["heads"] == [6, 5]
    assert payload["initial"]["heads"] == [4]  # head 7 is the 5th pattern of layer 1
    result = runner.invoke(app, ["view", str(exported), "the cat", "--layer", "1", "--heads",
                                 "2", "--out", str(tmp_path / "v2.html")])
    assert "layer 1 has no head 2; its heads are 1, 3, 4, 6, 7" in str(result.exception)
    pairs = write_pairs(tmp_path / "pairs.csv", 32)
    result = runner.invoke(app, [
        "prune", str(exported), "--metric", "sts", "--pairs", str(pairs), "--order", "random",
        "--seeds", "1", "--step", "0.2", "--max-fraction", "0.2", "--batch-size", "8",
        "--out", str(tmp_path / "again"), "-q"])
    assert result.exit_code == 0, result.output
    scores = pd.read_csv(tmp_path / "again" / "prune_scores.csv")
    assert {(a, b) for a, b in zip(scores["layer"], scores["head"], strict=True)} == {
        (layer, h) for layer in (0, 1) for h in KEPT[layer]}
    curve = pd.read_csv(tmp_path / "again" / "prune_curve.csv", keep_default_na=False)
    gone = parse_heads(curve["heads_removed"].iloc[-1])
    assert gone and all(h in KEPT[layer] for layer, h in gone)


def test_minilm_export_keeps_its_head_numbers(minilm, tmp_path):
    """MiniLM-sized: a pruned export's weight tables equal the original's, head for head."""
    model, _ = minilm
    mask = torch.ones(6, 12)
    mask[1, [0, 3, 7]] = 0
    mask[4, 11] = 0
    export_hf(prune_heads(model, mask), tmp_path / "pruned")
    for name, folder in (("a", None), ("b", tmp_path / "pruned")):
        args = ["asymmetry", *([str(folder)] if folder else []), "--weights-only", "--out",
                str(tmp_path / name), "-q"]
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.output
    a, b = (pd.read_csv(tmp_path / n / "tables" / "weight_asymmetry.csv") for n in "ab")
    assert set(zip(b["layer"], b["head"], strict=True)) == {
        (layer, h) for layer in range(6) for h in range(12) if mask[layer, h]}
    merged = a.merge(b, on=["layer", "head", "measure"])
    assert len(merged) == len(b)
    # the same weights, float64 Gram matrices in the same order (measured 0.0)
    assert (merged["value_x"] - merged["value_y"]).abs().max() == 0.0


def test_viewer_page_shows_the_heads_by_number_in_a_browser(exported, tmp_path):
    """The page's chips and model view name heads by their numbers; removed heads leave
    empty cells (headless Chromium; skips without one, as tests/test_browser.py does)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    from tests.browser_utils import browser, console_errors, require_browser, wait_ready

    require_browser()
    out = tmp_path / "view.html"
    result = runner.invoke(app, ["view", str(exported), "the cat sat on the mat", "--layer",
                                 "1", "--heads", "3,7", "--out", str(out)])
    assert result.exit_code == 0, result.output
    with browser() as driver:
        driver.get(out.as_uri())
        wait_ready(driver)
        chips = driver.find_elements(By.CSS_SELECTOR, "#heads .chip")
        assert [c.text for c in chips] == ["1", "3", "4", "6", "7"]
        assert [c.text for c in chips if "on" in c.get_attribute("class").split()] == ["3", "7"]
        driver.find_element(By.CSS_SELECTOR, '.tab[data-view="model"]').click()
        WebDriverWait(driver, 30).until(lambda d: d.execute_script(
            "return document.querySelector('.model-grid').getAttribute('data-drawn')"))
        thumbs = driver.find_elements(By.CSS_SELECTOR, ".model-grid canvas.thumb:not(.overlay)")
        assert sorted((int(t.get_attribute("data-layer")), int(t.get_attribute("data-head")))
                      for t in thumbs) == [(layer, h) for layer in (0, 1) for h in KEPT[layer]]
        assert len(driver.find_elements(By.CSS_SELECTOR, ".model-grid .thumb-gap")) == 5
        assert console_errors(driver) == []
