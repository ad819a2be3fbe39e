"""Headless Chromium for the page tests (Debian's chromium + chromium-driver, via selenium).

``browser()`` yields a driver or skips with the reason; under ``CI=true`` a missing browser
fails instead (the CI machine must run these tests). ``make test`` installs the packages
where it can (``make browser``).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

CHROMIUM = ("/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome")
DRIVER = ("/usr/bin/chromedriver", "/usr/lib/chromium/chromedriver")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--hide-scrollbars", "--force-device-scale-factor=1")


def _first(paths: tuple[str, ...]) -> str | None:
    return next((p for p in paths if os.path.exists(p)), None)


def missing_reason() -> str | None:
    """Why the browser tests cannot run here, or None."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -e '.[dev]')"
    if _first(CHROMIUM) is None:
        return "no chromium (apt-get install chromium chromium-driver; `make browser`)"
    if _first(DRIVER) is None:
        return "no chromedriver (apt-get install chromium-driver; `make browser`)"
    return None


def require_browser() -> None:
    reason = missing_reason()
    if reason is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true but the browser tests cannot run: {reason}")
    pytest.skip(reason)


@contextmanager
def browser(width: int = 1400, height: int = 1000) -> Iterator:
    """A fresh headless Chromium (own profile folder) with console logging enabled."""
    require_browser()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="attnlens-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = _first(CHROMIUM)
    for flag in (*FLAGS, f"--user-data-dir={profile}", f"--window-size={width},{height}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(_first(DRIVER)))
    try:
        driver.set_page_load_timeout(120)
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def console_errors(driver) -> list[str]:
    """Console messages of level SEVERE (errors) since the last call."""
    return [entry["message"] for entry in driver.get_log("browser")
            if entry.get("level") == "SEVERE"]


def wait_ready(driver, timeout: float = 30.0) -> None:
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(driver, timeout).until(
        lambda d: d.execute_script("return document.body.getAttribute('data-ready')") == "1")


def hover(driver, element, x: float, y: float) -> None:
    """Move the real mouse to (x, y) px from ``element``'s top-left corner.

    WebDriver offsets count from the centre of the element's *visible* part, so that
    centre is measured first."""
    from selenium.webdriver.common.action_chains import ActionChains

    centre_x, centre_y = driver.execute_script(
        """const r = arguments[0].getBoundingClientRect();
        const top = Math.max(r.top, 0), bottom = Math.min(r.bottom, window.innerHeight);
        const left = Math.max(r.left, 0), right = Math.min(r.right, window.innerWidth);
        return [(left + right) / 2 - r.left, (top + bottom) / 2 - r.top];""", element)
    ActionChains(driver).move_to_element_with_offset(
        element, int(x - centre_x), int(y - centre_y)).perform()
