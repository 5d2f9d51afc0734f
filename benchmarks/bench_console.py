"""What the web console weighs and how fast it loads, in headless Chromium
against a local server (the echo driver; no keys, so no key dialog).

For ``--runs`` loads each, from the browser's Navigation and Resource Timing:

* cold: a fresh profile's first visit (the browser cache cleared and off):
  bytes over the wire (headers included) of the page and its files, their
  decoded size, and the page's first data calls; the load event; the first
  data shown (the ``missive-first-data`` mark the page sets after its first
  successful refresh);
* warm: a later visit with the cache on (the files revalidated, 304s);
* baseline: ``GET /livez`` (a 16-byte JSON answer) loaded by the same
  browser from the same server, so the ratio leaves out what the browser
  and the machine cost for any page.

Needs Chromium, chromedriver and selenium (as tests/test_console_browser.py)::

    .venv/bin/python benchmarks/bench_console.py --runs 7
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from browser import LOAD_FIGURES_JS, browser, missing, wait_for  # noqa: E402

from missive.testing import serve_process  # noqa: E402

NAVIGATION_JS = (
    "const n = performance.getEntriesByType('navigation')[0]; return n.loadEventEnd - n.startTime;"
)


def load_console(driver: Any, url: str) -> dict[str, Any]:
    driver.get("about:blank")  # the same URL again would be a fragment navigation, not a load
    driver.get(f"{url}/console/#now")
    wait_for(
        driver,
        lambda d: d.execute_script(
            "return performance.getEntriesByName('missive-first-data').length > 0"
            " && performance.getEntriesByType('navigation')[0].loadEventEnd > 0"
        ),
        "the console's first data",
    )
    figures: dict[str, Any] = driver.execute_script(LOAD_FIGURES_JS)
    return figures


def load_baseline(driver: Any, url: str) -> float:
    driver.get(f"{url}/livez")
    wait_for(
        driver,
        lambda d: d.execute_script("return performance.getEntriesByType('navigation')[0].loadEventEnd > 0"),
        "the baseline page",
    )
    return float(driver.execute_script(NAVIGATION_JS))


def median(values: list[float]) -> float:
    return float(statistics.median(values))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--json", action="store_true", help="print the raw figures as JSON")
    args = parser.parse_args()
    if missing():
        sys.exit(f"bench_console: {missing()}")
    config = {"models": {"echo": {"driver": "echo", "context_window": 1000}}}
    with serve_process(config) as server, browser() as driver:
        driver.execute_cdp_cmd("Network.enable", {})
        cold, warm, baseline = [], [], []
        for _ in range(args.runs):
            driver.execute_cdp_cmd("Network.clearBrowserCache", {})
            driver.execute_cdp_cmd("Network.setCacheDisabled", {"cacheDisabled": True})
            baseline.append(load_baseline(driver, server.url))
            cold.append(load_console(driver, server.url))
            driver.execute_cdp_cmd("Network.setCacheDisabled", {"cacheDisabled": False})
            load_console(driver, server.url)  # fills the cache
            warm.append(load_console(driver, server.url))
    if args.json:
        print(json.dumps({"cold": cold, "warm": warm, "baseline_ms": baseline}, indent=1))
    base = median(baseline)
    print(f"runs: {args.runs}; medians; baseline GET /livez page load {base:.1f} ms")
    for name, runs in (("cold", cold), ("warm", warm)):
        load, first = median([r["load_ms"] for r in runs]), median([r["first_data_ms"] for r in runs])
        print(
            f"{name}: {runs[0]['files']} files, {median([r['transfer_bytes'] for r in runs]):.0f} bytes "
            f"transferred ({median([r['decoded_bytes'] for r in runs]):.0f} decoded), first data calls "
            f"{median([r['data_transfer_bytes'] for r in runs]):.0f} bytes; load event {load:.1f} ms "
            f"({load / base:.2f}x baseline), first data shown {first:.1f} ms ({first / base:.2f}x baseline)"
        )


if __name__ == "__main__":
    main()
