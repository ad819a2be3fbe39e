"""The attention viewer on long inputs, in headless Chromium (docs/view.md quotes it).

A tiny random Llama (2 layers, 4 query heads sharing 2 key/value heads, 16,384 positions;
tests/viewer_models.py) reads one document at each length; for each page it prints:

- the time to write the page (`attnlens view`, one forward pass and the packing);
- the page size (target < 20 MB at 8,192 tokens) and the stored weights per query;
- in Chromium: the text view ready (navigation start to drawn: load, JSON, decoding, the
  spans; target < 2 s at 4,096 tokens), recolouring the text on hover, the head view and the
  matrix view drawn, and the tiles the matrix view decoded.

    python benchmarks/viewer.py [--lengths 1024,4096,8192]

Needs selenium and Debian's chromium + chromium-driver (`make browser`).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from anywhere

from tests.browser_utils import browser, hover, wait_ready
from tests.viewer_models import long_text, save_tiny_llama

TEXT_VIEW_TARGET_MS = 2000  # at 4,096 tokens (issue 28)
PAGE_TARGET_MB = 20  # at 8,192 tokens (issue 27)


def write_page(model: Path, tokens: int, folder: Path) -> tuple[Path, float]:
    from attnlens.cli.app import app
    from typer.testing import CliRunner

    source = folder / f"text-{tokens}.txt"
    source.write_text(long_text(tokens), encoding="utf-8")
    out = folder / f"view-{tokens}.html"
    start = time.perf_counter()
    result = CliRunner().invoke(app, ["view", str(model), "--file", str(source), "--max-length",
                                      str(tokens), "--out", str(out), "--view", "text",
                                      "--force"])
    seconds = time.perf_counter() - start
    if result.exit_code != 0:
        raise SystemExit(f"attnlens view failed: {result.output}")
    return out, seconds


def measure(page: Path) -> dict:
    from selenium.webdriver.common.by import By

    with browser(1400, 1000) as driver:
        driver.get(page.as_uri())
        wait_ready(driver, 300)
        stats = dict(driver.execute_script("return window.AL_VIEWER.stats"))
        spans = driver.find_elements(By.CSS_SELECTOR, "#textview .tok")
        middle = spans[len(spans) // 2]
        driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", middle)
        hover(driver, middle, 3, 3)
        stats["colourMs"] = driver.execute_script("return window.AL_VIEWER.stats.colourMs")
        for view in ("head", "matrix"):
            driver.find_element(By.CSS_SELECTOR, f'.tab[data-view="{view}"]').click()
            stats[f"{view}Ms"] = driver.execute_script("return window.AL_VIEWER.stats.renderMs")
        stats["tilesAfterMatrix"] = driver.execute_script("return window.AL_VIEWER.stats.tiles")
    return stats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", default="1024,4096,8192")
    args = parser.parse_args()
    lengths = [int(x) for x in args.lengths.split(",")]
    with tempfile.TemporaryDirectory(prefix="attnlens-bench-viewer-") as tmp:
        folder = Path(tmp)
        model = save_tiny_llama(folder / "llama")
        print("tokens | write page | page MB | weights/query | text view ready | recolour "
              "| head view | matrix view | tiles")
        for tokens in lengths:
            page, seconds = write_page(model, tokens, folder)
            text = page.read_text(encoding="utf-8")
            payload = json.loads(re.search(r'id="attnlens-data">(.*?)</script>', text,
                                           re.S).group(1))
            packed = payload["patterns"]
            per_query = (packed["stats"]["mean_entries"] if packed["format"] == "sparse"
                         else float(tokens))
            s = measure(page)
            print(f"{tokens} | {seconds:.1f} s | {page.stat().st_size / 1e6:.1f} | "
                  f"{per_query:.1f} | {s['readyMs']:.0f} ms | {s['colourMs']:.0f} ms | "
                  f"{s['headMs']:.0f} ms | {s['matrixMs']:.0f} ms | {s['tilesAfterMatrix']}")
            if tokens == 4096:
                print(f"  text view at 4,096 tokens / target {TEXT_VIEW_TARGET_MS} ms: "
                      f"{s['readyMs'] / TEXT_VIEW_TARGET_MS:.2f}")
            if tokens == 8192:
                print(f"  page at 8,192 tokens / target {PAGE_TARGET_MB} MB: "
                      f"{page.stat().st_size / 1e6 / PAGE_TARGET_MB:.2f}")


if __name__ == "__main__":
    main()
