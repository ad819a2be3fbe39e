"""The README's pictures: the sample report and viewer in headless Chromium.

    python docs/img/screenshots.py reports/minilm docs/img     (or: make screenshots)

Needs selenium and Debian's chromium + chromium-driver (`make browser`).
"""

from __future__ import annotations

import io
import sys
import tempfile
import time
from pathlib import Path

from PIL import Image
from selenium import webdriver
from selenium.webdriver.chrome.service import Service

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
        " Number(c.dataset.tokenWidth) / 2, clientY: r.top + 46 + 2 * 20 + 10}));")
    shoot(viewer, out / "viewer.png", hover_keeper, size=(1360, 900))


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
