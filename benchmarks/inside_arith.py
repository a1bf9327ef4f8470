"""Where does the pipeline's SFT arithmetic model compute the answer's first digit? Activation patching, averaged.

    python benchmarks/inside_arith.py --checkpoint runs/pipeline/sft [--pairs 20] [--screenshots docs/img]

Pairs of two-digit sums whose second operand differs in its tens digit, so the answers' first digits
differ (`What is 23 + 45?` -> 68, `What is 23 + 55?` -> 78), each a user message in the model's chat
format up to its answer. For every pair, `tinylm inspect patch`'s three grids with the logit difference
between the two first digits; the grids averaged over the pairs the model answers right (both first
digits its top guess). Prints one JSON object: the mean grids, the cells restoring at least half of the
clean behaviour, and the share of cells they are. With --screenshots, the studio's Inside page patching
the first pair (chromium) is saved as inside-arith-*.png in that folder.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path


def pairs(n: int, seed: int) -> list[tuple[int, int, int]]:
    """(a, b, b2): a + b and a + b2 both two-digit, b2 = b with its tens digit moved."""
    rng, out = random.Random(seed), []
    while len(out) < n:
        a, b = rng.randrange(10, 90), rng.randrange(10, 90)
        b2 = b + rng.choice((-10, 10))
        if 10 <= b2 < 100 and 10 <= a + b < 100 and 10 <= a + b2 < 100:
            out.append((a, b, b2))
    return out


def mean_grid(grids: list[list[list[float]]]) -> list[list[float]]:
    return [[sum(g[r][c] for g in grids) / len(grids) for c in range(len(grids[0][0]))] for r in range(len(grids[0]))]


def screenshots(run: Path, folder: Path, a: int, b: int, b2: int) -> None:
    """The Inside page patching one pair, in headless chromium."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    port = 8700 + random.randrange(200)
    command = [sys.executable, "-m", "tinylm", "studio", "--runs", str(run.parent), "--port", str(port)]
    studio = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "chromium"  # Debian's, as the tests use
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,1500"):
        options.add_argument(flag)
    browser = webdriver.Chrome(service=Service(shutil.which("chromedriver") or "chromedriver"), options=options)
    try:
        time.sleep(4)
        browser.get(f"http://127.0.0.1:{port}/inside?name={run.name}")
        browser.find_element(By.ID, "chat").click()
        prompt = browser.find_element(By.ID, "prompt")
        prompt.clear()
        prompt.send_keys(f"What is {a} + {b}?")
        browser.find_element(By.ID, "look").click()
        for field, text in (("clean", f"What is {a} + {b}?"), ("corrupt", f"What is {a} + {b2}?")):
            box = browser.find_element(By.ID, field)
            box.clear()
            box.send_keys(text)
        browser.find_element(By.ID, "patch-go").click()
        WebDriverWait(browser, 60).until(lambda d: d.find_elements(By.ID, "patch-heads"))
        time.sleep(1)
        browser.execute_script("window.scrollTo(0, 0)")
        browser.save_screenshot(str(folder / "inside-arith-lens.png"))
        browser.execute_script("document.getElementById('patch-section').scrollIntoView()")
        browser.save_screenshot(str(folder / "inside-arith-patching.png"))
    finally:
        browser.quit()
        studio.terminate()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", type=Path, required=True)
    parser.add_argument("--pairs", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--screenshots", type=Path, default=None)
    args = parser.parse_args()

    from tinylm.interpret.lens import lens_logits
    from tinylm.interpret.loading import load_for_inspection
    from tinylm.interpret.patching import activation_patching

    inspected = load_for_inspection(args.checkpoint)
    kept, skipped, tokens, first = [], 0, None, None
    for a, b, b2 in pairs(args.pairs, args.seed):
        clean = inspected.encode(f"What is {a} + {b}?", chat=True)
        corrupt = inspected.encode(f"What is {a} + {b2}?", chat=True)
        right, other = inspected.token_id(str(a + b)[0]), inspected.token_id(str(a + b2)[0])
        says = [int(lens_logits(inspected, ids)[-1, -1].argmax()) for ids in (clean, corrupt)]
        if says != [right, other] or len(clean) != len(corrupt):
            skipped += 1
            continue
        kept.append(activation_patching(inspected, clean, corrupt, "logit_diff", right, other))
        tokens, first = tokens or kept[-1]["clean"]["tokens"], first or (a, b, b2)
    if not kept:
        raise SystemExit("the model answers none of the pairs' first digits right: nothing to localise")
    grids = {name: mean_grid([k[name] for k in kept]) for name in ("residual", "mlp", "heads")}
    strong = {name: [[r, c, round(v, 3)] for r, row in enumerate(grid) for c, v in enumerate(row) if v >= 0.5]
              for name, grid in grids.items()}
    cells = {name: len(grid) * len(grid[0]) for name, grid in grids.items()}
    print(json.dumps({"checkpoint": str(args.checkpoint), "pairs": len(kept), "skipped_wrong": skipped,
                      "tokens": tokens, "mean": grids, "restoring_half": strong,
                      "share_of_cells": {n: round(len(strong[n]) / cells[n], 3) for n in grids}}))
    if args.screenshots:
        screenshots(args.checkpoint, args.screenshots, *first)


if __name__ == "__main__":
    main()
