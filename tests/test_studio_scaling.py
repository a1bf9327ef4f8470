"""The studio's Scaling page: a sweep's points, fits and PNGs through its JSON routes (4xx for a wrong name or
file, and the studio keeps serving), and the page in a headless browser drawing the IsoFLOP curves and the law."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from studio_support import studio
from test_scaling_fit import PLANTED, planted_points
from tinylm.cli.main import main
from tinylm.scaling.sweep import POINTS, SWEEP


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A runs root holding one sweep whose points follow a planted law, fitted by `tinylm scaling fit`."""
    root = tmp_path_factory.mktemp("scaling-studio")
    sweep = root / "sweeps" / "laptop"
    sweep.mkdir(parents=True)
    (sweep / SWEEP).write_text(json.dumps({"fixed": {"arch": "modern", "data": None, "seed": 1, "train": {}},
                                           "budgets": [1e11, 3e11, 1e12], "depths": [1, 2, 3, 4, 5]}))
    rows = [{"run": f"c{p.flops:.3g}-d{i % 7 + 1}", "budget": p.flops, "depth": i % 7 + 1, "params": p.params,
             "tokens": p.tokens, "flops": p.flops, "steps": 100, "seed": 1, "loss": p.loss, "dev_bpb": p.loss / 2,
             "wall_s": 10.0}
            for i, p in enumerate(planted_points(PLANTED["laptop"], (1e11, 3e11, 1e12), noise=0.002))]
    (sweep / POINTS).write_text("".join(json.dumps(row) + "\n" for row in rows))
    assert main(["scaling", "fit", "--out", str(sweep), "--bootstrap", "20"]) == 0
    return root


def test_the_routes_answer_what_the_sweep_folder_holds(root: Path) -> None:
    sweep = root / "sweeps" / "laptop"
    with studio(root) as url:
        assert httpx.get(f"{url}/api/scaling").json() == {"sweeps": ["sweeps/laptop"]}
        record = httpx.get(f"{url}/api/scaling/sweep", params={"name": "sweeps/laptop"}).json()
        assert record["fit"] == json.loads((sweep / "fit.json").read_text())
        assert [row["loss"] for row in record["points"]] == [json.loads(line)["loss"] for line in
                                                             (sweep / POINTS).read_text().splitlines()]
        assert record["plots"] == ["isoflop.png", "frontier.png", "law.png"] and record["prediction"] is None
        png = httpx.get(f"{url}/api/scaling/plot", params={"name": "sweeps/laptop", "file": "isoflop.png"})
        assert png.status_code == 200 and png.content == (sweep / "isoflop.png").read_bytes()
        for params in ({"name": "sweeps"}, {"name": "../etc"}, {"name": "sweeps/laptop", "file": "fit.json"}):
            route = "plot" if "file" in params else "sweep"
            reply = httpx.get(f"{url}/api/scaling/{route}", params=params)
            assert reply.status_code == 404 and "no " in reply.json()["error"]["message"]
        assert httpx.get(f"{url}/api/scaling").status_code == 200  # still serving


def test_the_page_draws_the_curves_and_the_law(root: Path, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    from browser_support import console_errors, headless_chromium  # skips where no browser is installed
    from test_studio_inside_browser import screenshot

    window = headless_chromium(1280, 1800)
    browser = next(window)
    try:
        with studio(root) as url:
            browser.get(f"{url}/scaling?name=sweeps/laptop")
            wait = WebDriverWait(browser, 30)
            wait.until(lambda b: b.find_elements(By.CSS_SELECTOR, "#isoflop canvas"))
            wait.until(lambda b: b.find_elements(By.CSS_SELECTOR, "#law tr"))
            fit = json.loads((root / "sweeps" / "laptop" / "fit.json").read_text())
            law = browser.find_element(By.ID, "law").text
            assert "alpha" in law and "beta" in law
            series = browser.execute_script("return [...document.querySelectorAll('#isoflop .u-series')]"
                                            ".map(s => s.textContent)")
            assert sum("FLOPs" in s for s in series) == 3 and sum("parabola" in s for s in series) == 3
            assert len(browser.find_elements(By.CSS_SELECTOR, "#points-table tr")) == 1 + 21
            wait.until(lambda b: all(img.get_property("naturalWidth") > 0
                                     for img in b.find_elements(By.CSS_SELECTOR, "#plots img")))
            assert len(browser.find_elements(By.CSS_SELECTOR, "#plots img")) == 3
            assert f"{fit['alpha']:.4f}"[:4] in law.replace(",", "")
            assert console_errors(browser) == []
            screenshot(browser, tmp_path, "studio-scaling.png")
    finally:
        window.close()  # the generator's own cleanup quits the browser
