"""A headless Debian chromium driven by Selenium, for the tests of tinylm's web pages (chat page, studio).

Importing this module skips the importing test module when no browser is installed (.ci/run installs one).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest

CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")
if CHROMIUM is None or DRIVER is None:
    pytest.skip("no headless browser: install Debian's chromium and chromium-driver (.ci/run does)",
                allow_module_level=True)

from selenium import webdriver  # noqa: E402 - only once a browser is known to exist
from selenium.webdriver.chrome.service import Service  # noqa: E402


def headless_chromium(width: int, height: int) -> Iterator[webdriver.Chrome]:
    """A fresh browser window of that size, closed when the generator ends (use as a fixture's body)."""
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 f"--window-size={width},{height}", "--no-first-run", "--disable-extensions"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})  # the page's console, for console_errors
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def console_errors(driver: webdriver.Chrome) -> list[str]:
    """The page console's errors since the last call (an uncaught exception, a failed request); reading clears them."""
    return [entry["message"] for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]
