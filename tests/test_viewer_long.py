"""The viewer on causal LMs and long inputs: a tiny random Llama (grouped-query attention,
16,384 positions) and GPT-2 saved with save_pretrained. Exact storage of what is kept, the
streamed reduction equal to the whole-matrix one, generation against transformers' own
KV-cached attention, and the 20 MB page at 8,192 tokens (the browser checks of these pages:
tests/test_browser_viewer.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from attnlens.cli.app import app
from typer.testing import CliRunner

from attnlens.viewer.data import text_attention
from attnlens.viewer.packing import unpack_matrices
from tests.viewer_models import long_text, save_tiny_gpt2, save_tiny_llama

runner = CliRunner()
# attnlens' attention against transformers' eager attention, fp32: the native converters'
# parity target (DESIGN.md, <= 1e-5); a KV-cached step computes the same dot products and
# softmax over the same keys, in another order.
PARITY = 1e-5


def payload_of(page: Path) -> dict:
    text = page.read_text(encoding="utf-8")
    return json.loads(re.search(r'id="attnlens-data">(.*?)</script>', text, re.S).group(1))


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory) -> Path:
    return save_tiny_llama(tmp_path_factory.mktemp("viewer_llama"))


@pytest.fixture(scope="module")
def gpt2_dir(tmp_path_factory) -> Path:
    return save_tiny_gpt2(tmp_path_factory.mktemp("viewer_gpt2"))


@pytest.fixture(scope="module")
def llama(llama_dir):
    from attnlens.loaders import load

    return load(llama_dir)


def test_streamed_reduction_is_the_whole_one(llama) -> None:
    model, tokenizer = llama
    text = long_text(300)
    budget = 200_000  # far below 8 heads x 300^2 x 4 bytes: sparse rows
    whole = text_attention(model, tokenizer, text, max_length=300, budget_bytes=budget)
    streamed = text_attention(model, tokenizer, text, max_length=300, budget_bytes=budget,
                              keep_whole_bytes=0)
    assert whole.patterns is not None and streamed.patterns is None
    a, b = whole.payload(budget), streamed.payload(budget)
    assert a["patterns"]["format"] == "sparse" and a["patterns"] == b["patterns"]
    assert a["thumbs"] == b["thumbs"]
    # What is stored is the model's own float32 weight, bit for bit.
    stored = unpack_matrices(a["patterns"]).reshape(2, 4, 300, 300)
    full = np.stack(whole.patterns)
    kept = stored != 0
    np.testing.assert_array_equal(stored[kept], full[kept])
    assert not kept[..., np.triu_indices(300, 1)[0], np.triu_indices(300, 1)[1]].any()


def test_causal_and_grouped_query_heads_reach_the_page(llama) -> None:
    model, tokenizer = llama
    data = text_attention(model, tokenizer, "the keeper climbed the stairs")
    payload = data.payload()
    assert payload["causal"] is True
    assert payload["heads"] == [4, 4] and payload["kv_heads"] == [2, 2]
    # Byte-level BPE: tokens keep their space marker, pieces rebuild the text.
    assert any(t.startswith("Ġ") for t in payload["tokens"])
    assert "".join(payload["pieces"]) == "the keeper climbed the stairs"
    assert payload["trained"] == {"tokens": 16384,
                                  "source": "config.json max_position_embeddings"}


@pytest.mark.parametrize("which", ["llama", "gpt2"])
def test_generation_shows_the_kv_cached_steps_attention(which, llama_dir, gpt2_dir) -> None:
    from transformers import AutoModelForCausalLM

    from attnlens.loaders import load
    from attnlens.viewer.generate import generation_view

    folder = llama_dir if which == "llama" else gpt2_dir
    model, tokenizer = load(folder)
    prompt = "the keeper climbed the stairs because"
    data = generation_view(model, tokenizer, prompt, 6)
    p, g = data.prompt_length, data.generation
    ids = tokenizer.hf(prompt)["input_ids"]
    assert p == len(ids) and g["requested"] == 6 and g["generated"] == data.n - p
    assert g["agree"] == g["generated"]  # attnlens' own logits pick the same tokens
    assert "".join(data.pieces[p:]) == g["continuation"]
    # transformers' own greedy generation with its KV cache, eager attention kept per step.
    hf = AutoModelForCausalLM.from_pretrained(str(folder), attn_implementation="eager").eval()
    with torch.no_grad():
        out = hf.generate(torch.tensor([ids]), max_new_tokens=6, do_sample=False,
                          use_cache=True, output_attentions=True,
                          return_dict_in_generate=True, pad_token_id=0)
    assert out.sequences[0, p:].tolist() == tokenizer.hf.convert_tokens_to_ids(data.tokens[p:])
    worst = 0.0
    for step, layers in enumerate(out.attentions[1:], start=1):  # steps after the prefill
        query = p + step - 1  # the token fed at this step, with the cache of the ones before
        for layer, attention in enumerate(layers):
            assert attention.shape[-2] == 1  # one query: the KV cache holds the rest
            mine = data.patterns[layer][:, query, : query + 1]
            worst = max(worst, float(np.abs(attention[0, :, 0].numpy() - mine).max()))
    print(f"{which}: generated rows vs transformers' KV-cached steps: max |diff| {worst:.2e}")
    assert worst <= PARITY


def test_generate_option_writes_prompt_and_continuation(gpt2_dir, tmp_path) -> None:
    out = tmp_path / "gen.html"
    result = runner.invoke(app, ["view", str(gpt2_dir), "the sea was rough", "--generate", "5",
                                 "--out", str(out)])
    assert result.exit_code == 0, result.output
    payload = payload_of(out)
    assert payload["generation"]["generated"] == 5 and payload["n"] == payload[
        "prompt_length"] + 5
    assert "generated greedily by transformers' generate with its KV cache" in payload[
        "generation"]["method"]
    assert f"Prompt of {payload['prompt_length']} tokens + 5 generated" in out.read_text("utf-8")


@pytest.fixture(scope="module")
def page_8k(llama_dir, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("viewer_8k") / "long.html"
    source = out.parent / "long.txt"
    source.write_text(long_text(8192), encoding="utf-8")
    result = runner.invoke(app, ["view", str(llama_dir), "--file", str(source),
                                 "--max-length", "8192", "--out", str(out), "--view", "matrix"])
    assert result.exit_code == 0, result.output
    return out


def test_the_page_of_8192_tokens_stays_under_20_mb(page_8k: Path) -> None:
    size = page_8k.stat().st_size
    payload = payload_of(page_8k)
    print(f"8,192-token page: {size / 1e6:.1f} MB, "
          f"{payload['patterns']['stats']['mean_entries']:.1f} stored weights per query")
    assert payload["n"] == 8192 and payload["patterns"]["format"] == "sparse"
    assert size < 20e6
    assert payload["thumbs"]["side"] == 80  # the model view's downsampled thumbnails
    assert "each query stores its largest weights exactly" in page_8k.read_text("utf-8")


# In headless Chromium ---------------------------------------------------------------------
def open_viewer(driver, page: Path, address: str = "") -> None:
    from tests.browser_utils import wait_ready

    driver.get(page.as_uri() + address)
    wait_ready(driver, 120)


@pytest.fixture(scope="module")
def page_4k(llama_dir, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("viewer_4k") / "long.html"
    source = out.parent / "long.txt"
    source.write_text(long_text(4096), encoding="utf-8")
    result = runner.invoke(app, ["view", str(llama_dir), "--file", str(source),
                                 "--max-length", "4096", "--out", str(out), "--view", "text"])
    assert result.exit_code == 0, result.output
    return out


def test_text_view_of_4096_tokens_renders_quickly(page_4k: Path) -> None:
    from selenium.webdriver.common.by import By

    from tests.browser_utils import browser, console_errors, hover

    with browser(1400, 1000) as driver:
        open_viewer(driver, page_4k)
        stats = driver.execute_script("return window.AL_VIEWER.stats")
        spans = driver.find_elements(By.CSS_SELECTOR, "#textview .tok")
        assert len(spans) == 4096
        # From navigation start to the text view drawn: load, JSON, decoding, 4,096 tokens.
        print(f"text view, 4,096 tokens ({page_4k.stat().st_size / 1e6:.1f} MB page): ready "
              f"{stats['readyMs']:.0f} ms (decoding {stats['decodeMs']:.0f} ms, drawing "
              f"{stats['renderMs']:.0f} ms)")
        assert stats["readyMs"] < 10_000  # the target is 2 s (benchmarks/viewer.py); generous
        target = spans[2000]
        driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", target)
        hover(driver, target, 3, 3)
        colour_ms = driver.execute_script("return window.AL_VIEWER.stats.colourMs")
        print(f"recolouring 4,096 tokens on hover: {colour_ms:.1f} ms")
        assert colour_ms < 2000
        assert "active" in target.get_attribute("class")
        # Causal: every token after the hovered one is hatched (masked), none before it.
        classes = driver.execute_script(
            "return Array.from(document.querySelectorAll('#textview .tok'), "
            "s => s.classList.contains('masked'))")
        assert not any(classes[:2001]) and all(classes[2001:])
        # The readout sits at the cursor, inside the window (not below the fold).
        box = driver.find_element(By.ID, "readout")
        assert box.is_displayed() and "attends most to" in box.text
        where = driver.execute_script(
            "const r = document.getElementById('readout').getBoundingClientRect(),"
            " t = arguments[0].getBoundingClientRect();"
            "return [r.left - t.left, r.top - t.top, r.bottom, window.innerHeight];", target)
        assert abs(where[0]) < 60 and abs(where[1]) < 60 and where[2] <= where[3]
        assert console_errors(driver) == []


def test_head_view_of_4096_tokens_is_a_window(page_4k: Path) -> None:
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.actions.wheel_input import ScrollOrigin
    from selenium.webdriver.common.by import By

    from tests.browser_utils import browser, console_errors, hover

    with browser(1400, 1000) as driver:
        open_viewer(driver, page_4k, "#view=head&layer=1&heads=0,1")
        canvas = driver.find_element(By.CSS_SELECTOR, "#stage canvas.main")
        height = driver.execute_script("return arguments[0].getBoundingClientRect().height",
                                       canvas)
        rows = int(canvas.get_attribute("data-rows"))
        assert rows < 60 and height < 1300  # not a 4,096 x 20 px column
        top, width = float(canvas.get_attribute("data-top")), float(
            canvas.get_attribute("data-token-width"))
        hover(driver, canvas, 16 + width / 2, top + 5 * 20 + 10)
        assert "attends most to" in driver.find_element(By.ID, "readout").text
        ActionChains(driver).scroll_from_origin(ScrollOrigin.from_element(canvas), 0, 400
                                                ).perform()
        assert int(driver.find_element(By.CSS_SELECTOR, "#stage canvas.main")
                   .get_attribute("data-win")) > 0
        assert console_errors(driver) == []


def test_8192_tokens_model_view_thumbnails_and_matrix_tiles(page_8k: Path) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    from tests.browser_utils import browser, console_errors

    with browser(1400, 1000) as driver:
        open_viewer(driver, page_8k)  # opens on the matrix view (--view matrix)
        stats = driver.execute_script("return window.AL_VIEWER.stats")
        print(f"8,192 tokens: ready {stats['readyMs']:.0f} ms, {stats['tiles']} tiles decoded")
        # Only the tiles of the detail window (48 x 48 cells over 32 x 32 tiles): at most 4
        # of the 65,536 tiles of 8,192 x 8,192.
        assert 1 <= stats["tiles"] <= 4
        canvas = driver.find_element(By.CSS_SELECTOR, "#stage canvas.main")
        ox, oy, over = (float(canvas.get_attribute(k)) for k in ("data-ox", "data-oy",
                                                                  "data-over"))
        driver.execute_script(  # a click on the overview near its middle
            "const c = arguments[0], r = c.getBoundingClientRect();"
            "c.dispatchEvent(new MouseEvent('click', {clientX: r.left + arguments[1],"
            " clientY: r.top + arguments[2], bubbles: true}));", canvas, ox + over / 2,
            oy + over / 2)
        canvas = driver.find_element(By.CSS_SELECTOR, "#stage canvas.main")
        assert 3500 < int(canvas.get_attribute("data-i0")) < 4500
        after = driver.execute_script("return window.AL_VIEWER.stats.tiles")
        assert stats["tiles"] < after <= stats["tiles"] + 9  # decoded when shown
        driver.find_element(By.CSS_SELECTOR, '.tab[data-view="model"]').click()
        WebDriverWait(driver, 60).until(lambda d: d.execute_script(
            "return document.querySelector('.model-grid').getAttribute('data-drawn')"))
        thumbs = driver.find_elements(By.CSS_SELECTOR, ".model-grid canvas.thumb")
        assert len(thumbs) == 8
        assert [t.get_attribute("data-kv") for t in thumbs[:4]] == ["0", "0", "1", "1"]
        assert driver.find_elements(By.CSS_SELECTOR, ".model-grid .mg-group")  # GQA groups
        assert console_errors(driver) == []
