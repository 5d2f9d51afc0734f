"""Headless Chromium for the web console's tests and benchmark, driven by Selenium.

The system's Chromium and chromedriver (Debian's ``chromium`` and
``chromium-driver`` packages; ``scripts/setup --test`` installs them where
it can) are used, never a browser Selenium would download.
:func:`missing` says why a browser cannot run here (the tests skip with it).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
#: Flags that work in containers and offline (no sandbox as root, no GPU,
#: no calls home).
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
)
#: Seconds a page may take to show what a test waits for (a hang guard on a
#: slow, busy machine, not a timing assertion).
WAIT = 60.0


def chromium() -> str | None:
    """The Chromium binary (``$MISSIVE_TEST_CHROMIUM``, else the first on PATH)."""
    found = os.environ.get("MISSIVE_TEST_CHROMIUM")
    if found:
        return found
    for name in CHROMIUM_NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


def missing() -> str | None:
    """Why the browser tests cannot run here, or None when they can."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -e '.[test]')"
    if chromium() is None:
        return "no Chromium on PATH (Debian: apt-get install chromium chromium-driver)"
    if shutil.which("chromedriver") is None:
        return "no chromedriver on PATH (Debian: apt-get install chromium-driver)"
    return None


@contextmanager
def browser(downloads: Path | None = None, width: int = 1400, height: int = 900) -> Iterator[Any]:
    """A headless Chromium with a fresh profile, its console log kept
    (``driver.get_log("browser")``) and, with ``downloads``, files saved
    there without asking."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    binary = chromium()
    driver_path = shutil.which("chromedriver")
    assert binary and driver_path, missing()
    with tempfile.TemporaryDirectory(prefix="missive-chromium-") as profile:
        options = webdriver.ChromeOptions()
        for flag in FLAGS:
            options.add_argument(flag)
        options.add_argument(f"--user-data-dir={profile}")
        options.add_argument(f"--window-size={width},{height}")
        options.binary_location = binary
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        if downloads is not None:
            options.add_experimental_option(
                "prefs",
                {
                    "download.default_directory": str(downloads),
                    "download.prompt_for_download": False,
                },
            )
        driver = webdriver.Chrome(options=options, service=Service(driver_path))
        try:
            yield driver
        finally:
            driver.quit()


def errors(driver: Any) -> list[dict[str, Any]]:
    """The console's error entries since the last call (JavaScript errors,
    ``console.error``, failed loads)."""
    return [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]


def wait_for(driver: Any, condition: Any, what: str, timeout: float = WAIT) -> Any:
    """Poll ``condition(driver)`` until it is truthy; fail naming ``what``."""
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    # The page redraws its views as it polls: an element found a moment ago
    # may be gone; look again.
    ignored = (NoSuchElementException, StaleElementReferenceException)
    wait = WebDriverWait(driver, timeout, poll_frequency=0.05, ignored_exceptions=ignored)
    return wait.until(condition, f"timed out waiting for {what}")


def text_of(driver: Any, selector: str) -> str:
    """The text of the first element ``selector`` matches (``""``: none), read at once."""
    return str(
        driver.execute_script(
            "const e = document.querySelector(arguments[0]); return e ? e.textContent : ''", selector
        )
    )


def rows(driver: Any, selector: str) -> list[list[str]]:
    """The texts of the cells of each table row ``selector`` matches, read at once."""
    return list(
        driver.execute_script(
            "return [...document.querySelectorAll(arguments[0])].map((r) => [...r.cells].map((c) => "
            "c.textContent))",
            selector,
        )
    )


def choose(driver: Any, select_id: str, value: str) -> None:
    """Choose ``value`` in the ``<select>`` ``select_id`` as a user does
    (its ``change`` event), once the option is there."""
    wait_for(
        driver,
        lambda d: d.execute_script(
            "const s = document.getElementById(arguments[0]);"
            "if (![...s.options].some((o) => o.value === arguments[1])) return false;"
            "s.value = arguments[1]; s.dispatchEvent(new Event('change', {bubbles: true})); return true;",
            select_id,
            value,
        ),
        f"option {value!r} of #{select_id}",
    )


def click(driver: Any, selector: str, what: str) -> None:
    """Click the first element ``selector`` matches, once it is there."""
    from selenium.webdriver.common.by import By

    wait_for(driver, lambda d: d.find_element(By.CSS_SELECTOR, selector).click() or True, what)


#: The figures of a first load, from the Navigation and Resource Timing APIs:
#: bytes over the wire (headers included) of the page's own files and of its
#: first data calls, their decoded sizes, the load event and the first data
#: shown (the page's ``missive-first-data`` mark), in ms from navigation start.
LOAD_FIGURES_JS = """
const nav = performance.getEntriesByType("navigation")[0];
const files = performance.getEntriesByType("resource").filter((r) => r.name.includes("/console/static/"));
const data = performance.getEntriesByType("resource").filter((r) => !r.name.includes("/console/static/"));
const sum = (list, key) => list.reduce((n, r) => n + r[key], 0);
const mark = performance.getEntriesByName("missive-first-data")[0];
return {
  files: files.length + 1,
  transfer_bytes: nav.transferSize + sum(files, "transferSize"),
  decoded_bytes: nav.decodedBodySize + sum(files, "decodedBodySize"),
  data_calls: data.length,
  data_transfer_bytes: sum(data, "transferSize"),
  load_ms: nav.loadEventEnd - nav.startTime,
  first_data_ms: mark ? mark.startTime : null,
};
"""
