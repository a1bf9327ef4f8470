"""The studio's Inside page in a real headless browser (Debian's chromium via Selenium).

A prompt typed redraws the logit lens and the attention heatmap over its tokens, the attribution bars add
up to the logit, patching draws its three grids, a neuron's top windows and the induction curves over a
run's snapshots appear, and a reward-model checkpoint is refused with the reason on the page.
Screenshots are taken by the test itself (TINYLM_DOCS_SCREENSHOT_DIR=docs/img keeps them for the docs).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import WebDriverWait

from browser_support import console_errors, headless_chromium  # skips this module where no browser is installed
from inside_support import inside_root
from studio_support import studio
from tinylm.interpret.loading import load_for_inspection

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def browser() -> Iterator[webdriver.Chrome]:
    yield from headless_chromium(1280, 1600)


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return inside_root(tmp_path_factory.mktemp("inside-browser"))


def screenshot(browser: webdriver.Chrome, folder: Path, name: str) -> None:
    browser.save_screenshot(str(folder / name))
    assert (folder / name).stat().st_size > 10_000  # a page was drawn, not a blank
    keep = os.environ.get("TINYLM_DOCS_SCREENSHOT_DIR")
    if keep:
        browser.save_screenshot(str(Path(keep) / name))


def grid(browser: webdriver.Chrome, table: str) -> list[list[str]]:
    """A heatmap's cells, row by row (their data-value), [] while it is not drawn."""
    return browser.execute_script(
        f"const t = document.getElementById('{table}'); if (!t) return [];"
        "return [...t.querySelectorAll('tr')].slice(1)"
        ".map(r => [...r.querySelectorAll('td')].map(c => c.dataset.value));")


def test_a_prompt_typed_redraws_the_lens_attention_and_attribution(browser: webdriver.Chrome, root: Path,
                                                                     tmp_path: Path) -> None:
    inspected = load_for_inspection(root / "lm")
    with studio(root) as url:
        browser.get(f"{url}/inside?name=lm")
        box = browser.find_element(By.ID, "prompt")
        box.clear()
        box.send_keys("return alpha + beta", Keys.ENTER)
        n = len(inspected.encode("return alpha + beta"))
        wait = WebDriverWait(browser, 30)
        wait.until(lambda b: len(grid(b, "lens-grid")) == 2 and len(grid(b, "lens-grid")[0]) == n)
        wait.until(lambda b: len(grid(b, "attention-grid")) == n)
        pattern = [[float(v) for v in row] for row in grid(browser, "attention-grid")]
        assert all(abs(sum(row) - 1) < 1e-5 for row in pattern)  # each query's probabilities
        assert all(pattern[q][k] == 0 for q in range(n) for k in range(q + 1, n))  # never ahead
        wait.until(lambda b: b.find_elements(By.CSS_SELECTOR, "#attribution .bar-row"))
        assert "residual error" in browser.find_element(By.ID, "attribution").text
        rows = browser.find_elements(By.CSS_SELECTOR, "#head-scores tr")
        assert len(rows) == 1 + 2 * 2  # a header, then 2 layers x 2 heads
        screenshot(browser, tmp_path, "studio-inside.png")

        browser.find_element(By.ID, "clean").clear()
        browser.find_element(By.ID, "clean").send_keys("return 12")
        browser.find_element(By.ID, "corrupt").clear()
        browser.find_element(By.ID, "corrupt").send_keys("return 37")
        browser.find_element(By.ID, "patch-go").click()
        wait.until(lambda b: len(grid(b, "patch-residual")) == 3)
        tokens = len(inspected.encode("return 12"))
        assert len(grid(browser, "patch-residual")[0]) == tokens and len(grid(browser, "patch-heads")) == 2
        assert float(grid(browser, "patch-residual")[-1][-1]) == pytest.approx(1.0, abs=1e-6)
        browser.execute_script("document.getElementById('patch-section').scrollIntoView()")
        screenshot(browser, tmp_path, "studio-inside-patching.png")

        browser.find_element(By.ID, "n-index").clear()
        browser.find_element(By.ID, "n-index").send_keys("3")
        browser.find_element(By.ID, "neuron-go").click()
        wait.until(lambda b: len(b.find_elements(By.CSS_SELECTOR, "#neurons .example")) == 10)

        browser.find_element(By.ID, "induction-go").click()
        wait.until(lambda b: len(b.find_elements(By.CSS_SELECTOR, "#induction .chart")) == 1)
        chart = browser.find_element(By.CSS_SELECTOR, "#induction .chart")
        assert chart.get_attribute("data-points") == str(3 * 4)  # 3 snapshots x (2 layers x 2 heads)
        assert browser.find_element(By.CSS_SELECTOR, "#icl .chart").get_attribute("data-points") == "3"
        browser.execute_script("document.getElementById('induction-section').scrollIntoView()")
        screenshot(browser, tmp_path, "studio-inside-induction.png")

        box = browser.find_element(By.ID, "prompt")
        box.clear()
        box.send_keys("x" * 40, Keys.ENTER)  # longer than the 32-token context: one line on the page
        wait.until(lambda b: not b.find_element(By.ID, "error").get_attribute("hidden"))
        assert "context" in browser.find_element(By.ID, "error").text
        assert not [e for e in console_errors(browser) if "/api/inside" not in e]


def test_a_reward_model_checkpoint_is_refused_on_the_page(browser: webdriver.Chrome, root: Path) -> None:
    with studio(root) as url:
        browser.get(f"{url}/inside?name=scorer")
        WebDriverWait(browser, 30).until(lambda b: not b.find_element(By.ID, "error").get_attribute("hidden"))
        assert "reward model" in browser.find_element(By.ID, "error").text
        assert grid(browser, "lens-grid") == []
