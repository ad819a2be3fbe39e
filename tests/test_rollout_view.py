"""`attnlens view` shows attention rollout as an overlay (``attnlens.measures.rollout.rollout``)."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from attnlens.cli.app import app
from typer.testing import CliRunner

from attnlens.measures.rollout.rollout import rollout_matrices
from attnlens.viewer import ViewData, rollout_overlay
from attnlens.viewer.packing import unpack_matrices
from tests.browser_utils import browser, console_errors, require_browser

runner = CliRunner()
TEXT = "The old lighthouse keeper climbed the stairs."
# The page stores float32: the patterns exactly, the float64 rollout rounded to float32
# (relative error <= 2^-24 = 6e-8 per weight, so <= 6e-8 absolute for weights <= 1).
# Recomputing rollout from the stored fp32 patterns repeats the same float64 computation.
FLOAT32 = 2.0**-24


def _payload(page: Path) -> dict:
    text = page.read_text(encoding="utf-8")
    return json.loads(re.search(r'id="attnlens-data">(.*?)</script>', text, re.S).group(1))


@pytest.fixture(scope="module")
def view_page(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("rollout_view") / "view.html"
    result = runner.invoke(app, ["view", TEXT, "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out


def test_overlay_is_the_rollout_of_the_page_patterns(view_page: Path) -> None:
    payload = _payload(view_page)
    (overlay,) = payload["overlays"]
    assert overlay["name"] == "rollout" and overlay["per"] == "layer"
    assert overlay["matrices"]["format"] == "dense" and overlay["matrices"]["dtype"] == "float32"
    shown = unpack_matrices(overlay["matrices"]).astype(np.float64)  # [layer, query, key]
    patterns = unpack_matrices(payload["patterns"])  # [layer * head, query_pos, key_pos]
    n, layers = payload["n"], payload["layers"]
    assert shown.shape == (layers, n, n) and payload["tokens"][0] == "[CLS]"
    # Rollout rows sum to 1 within float64 rounding, plus each of n weights' fp32 rounding.
    np.testing.assert_allclose(shown.sum(-1), 1.0, rtol=0, atol=n * FLOAT32)
    # Rebuilt from the page's own (exact fp32) patterns: the same float64 computation, so
    # only the overlay's rounding to float32 differs.
    heads = payload["heads"]
    per_layer = np.split(patterns, np.cumsum(heads)[:-1])  # per layer [head, q, k]
    again = rollout_matrices([torch.from_numpy(p) for p in per_layer]).numpy()
    np.testing.assert_allclose(shown, again, rtol=0, atol=FLOAT32)
    assert payload["text"] == TEXT


def test_overlay_matches_rollout_on_the_unquantised_patterns(minilm) -> None:
    from attnlens.viewer import text_attention

    model, tokenizer = minilm
    data = text_attention(model, tokenizer, TEXT)
    assert rollout_overlay(data)
    (overlay,) = data.overlays
    expected = rollout_matrices([torch.from_numpy(p) for p in data.patterns]).numpy()
    np.testing.assert_array_equal(overlay["values"], expected)  # the same float64 computation
    # The last layer's [CLS] row: mostly [CLS] itself (docs/rollout.md quotes 0.706 here).
    assert expected[-1, 0].argmax() == 0


def test_no_rollout_option_leaves_the_overlay_out(tmp_path: Path) -> None:
    out = tmp_path / "plain.html"
    result = runner.invoke(app, ["view", "It rained.", "--out", str(out), "--no-rollout"])
    assert result.exit_code == 0, result.output
    assert _payload(out)["overlays"] == []


def test_overlay_of_identity_patterns_is_the_identity() -> None:
    eye = np.broadcast_to(np.eye(4), (3, 2, 4, 4)).copy()  # [layer, head, query, key]
    data = ViewData(tokens=["a", "b", "c", "d"], patterns=list(eye))
    assert rollout_overlay(data)
    np.testing.assert_array_equal(data.overlays[0]["values"], eye[:, 0])  # exact: 0.5 + 0.5


def test_the_page_draws_the_rollout_overlay(view_page: Path) -> None:
    require_browser()
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    with browser(1300, 1000) as driver:
        driver.get(view_page.as_uri())
        time.sleep(0.5)
        driver.find_element(By.CSS_SELECTOR, '.tab[data-view="matrix"]').click()
        canvas = driver.find_element(By.CSS_SELECTOR, "#stage canvas.main")
        before = driver.execute_script("return arguments[0].toDataURL()", canvas)
        source = Select(driver.find_element(By.ID, "source"))
        assert [o.text for o in source.options] == ["attention heads", "Attention rollout"]
        source.select_by_value("rollout")
        time.sleep(0.3)
        canvas = driver.find_element(By.CSS_SELECTOR, "#stage canvas.main")
        after = driver.execute_script("return arguments[0].toDataURL()", canvas)
        assert after != before
        # Head chips are disabled while the overlay is shown.
        chips = driver.find_elements(By.CSS_SELECTOR, "#heads .chip")
        assert chips and all(not c.is_enabled() for c in chips)
        # The model view adds one column of rollout thumbnails, one per layer.
        driver.find_element(By.CSS_SELECTOR, '.tab[data-view="model"]').click()
        time.sleep(0.5)
        assert len(driver.find_elements(By.CSS_SELECTOR, ".model-grid canvas.overlay")) == 6
        assert console_errors(driver) == []
