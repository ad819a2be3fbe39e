"""The README's pictures: the sample report and viewer in headless Chromium.

    python docs/img/screenshots.py reports/minilm docs/img     (or: make screenshots)

viewer.png is the sample report's viewer page; viewer-text.png (MiniLM on a paragraph) and
viewer-long.png (a tiny random Llama on 4,096 tokens: the causal mask and the tiled matrix
view) are pages written here into a temporary folder. Needs selenium and Debian's chromium +
chromium-driver (`make browser`).
"""

from __future__ import annotations

import io
import os
import sys
import tempfile
import time
from pathlib import Path

from PIL import Image
from selenium import webdriver
from selenium.webdriver.chrome.service import Service

ROOT = Path(__file__).resolve().parents[2]
PARAGRAPH = ("The keeper climbed the stairs because the old lamp at the top had to be lit before "
             "dark. When he reached it, he struck a match, and the flame caught at once. Far "
             "below, the ships saw the light and turned away from the rocks.")
# The mouse on a token of the text view (its index in the page's tokens).
HOVER_TEXT = ("const s = document.querySelectorAll('#textview .tok')[{index}];"
              "const r = s.getBoundingClientRect();"
              "s.dispatchEvent(new MouseEvent('mousemove', {{bubbles: true, clientX: r.left + 4,"
              " clientY: r.top + 4}}));")

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars", "--force-device-scale-factor=1")
WIDTH = 1000  # pixels of the saved pictures


def driver(width: int, height: int):
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in (*FLAGS, f"--user-data-dir={tempfile.mkdtemp()}",
                 f"--window-size={width},{height}"):
        options.add_argument(flag)
    return webdriver.Chrome(options=options, service=Service("/usr/bin/chromedriver"))


def shoot(url: str, out: Path, script: str = "", size=(1360, 900)) -> None:
    browser = driver(*size)
    try:
        browser.get(url)
        for _ in range(100):
            if browser.execute_script("return document.body.getAttribute('data-ready')"):
                break
            time.sleep(0.1)
        if script:
            browser.execute_script(script)
            time.sleep(0.5)
        image = Image.open(io.BytesIO(browser.get_screenshot_as_png())).convert("RGB")
    finally:
        browser.quit()
    scale = WIDTH / image.width
    image = image.resize((WIDTH, round(image.height * scale)), Image.LANCZOS)
    image.quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(out, optimize=True)
    print(f"wrote {out} ({out.stat().st_size // 1024} KiB)")


def main(report: Path, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    index = (report / "index.html").resolve().as_uri()
    shoot(index, out / "report.png")
    shoot(index, out / "report-card.png",
          "document.getElementById('heads').scrollIntoView(); AL.openCard(2, 8);")
    viewer = (report / "viewer.html").resolve().as_uri()
    hover_keeper = (  # the mouse on "keeper" (row 2 of the left column)
        "const c = document.querySelector('#stage canvas.main');"
        "const r = c.getBoundingClientRect();"
        "c.dispatchEvent(new MouseEvent('mousemove', {clientX: r.left + 16 +"
        " Number(c.dataset.tokenWidth) / 2, clientY: r.top + Number(c.dataset.top) + 2 * 20 +"
        " 10}));")
    shoot(viewer, out / "viewer.png", hover_keeper, size=(1360, 960))
    with tempfile.TemporaryDirectory(prefix="attnlens-shots-") as tmp:
        text_page, long_page = extra_pages(Path(tmp))
        # "he" (token 25) pinned on L3H1, which resolves it to "keeper"; the mouse on it.
        shoot(text_page.as_uri() + "#view=text&layer=3&heads=1&query=25",
              out / "viewer-text.png", HOVER_TEXT.format(index=25), size=(1360, 760))
        shoot(long_page.as_uri() + "#view=matrix&layer=0&heads=0&query=40",
              out / "viewer-long.png", "window.scrollTo(0, 330);", size=(1360, 900))


def extra_pages(folder: Path) -> tuple[Path, Path]:
    """The text-view page (MiniLM, a paragraph) and a 4,096-token causal page."""
    sys.path.insert(0, str(ROOT))
    from attnlens.cli.app import app
    from typer.testing import CliRunner

    from tests.viewer_models import long_text, save_tiny_llama

    runner = CliRunner()
    text_page = folder / "text.html"
    result = runner.invoke(app, ["view", PARAGRAPH, "--out", str(text_page), "--view", "text",
                                 "--report", "reports/minilm"])  # as typed in the repository
    assert result.exit_code == 0, result.output
    save_tiny_llama(folder / "tiny-random-llama")
    source = folder / "long.txt"
    source.write_text(long_text(4096), encoding="utf-8")
    long_page = folder / "long.html"
    here = Path.cwd()
    os.chdir(folder)  # the page names the model as given: tiny-random-llama
    try:
        result = runner.invoke(app, ["view", "tiny-random-llama", "--file", str(source),
                                     "--max-length", "4096", "--out", str(long_page)])
    finally:
        os.chdir(here)
    assert result.exit_code == 0, result.output
    return text_page, long_page


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
