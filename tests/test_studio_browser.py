"""The studio's pages in a real headless browser (Debian's chromium via Selenium) while a real run trains.

A `tinylm train` process writes its folder; the run page's loss curve grows without a reload, a reload
shows every point again, a restarted studio finds the run still running and live, SIGTERM to the
process turns its status to "stopped" on the open page, and the compare page overlays two runs with the
config fields that differ. The data page marks the loss mask of `builtin:arith` and shows a bad row's
file:line; the chat page talks to two checkpoints side by side; a run page shows its samples and builds
its report card.

Set TINYLM_DOCS_SCREENSHOT_DIR=docs/img to save the screenshots the docs show.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from browser_support import headless_chromium  # skips this module where no browser is installed
from studio_support import studio
from test_train_support import cli_args, train_process, wait_for
from tinylm.cli.main import main
from tinylm.train.run_status import read_status

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def browser() -> Iterator[webdriver.Chrome]:
    yield from headless_chromium(1280, 900)


def screenshot(browser: webdriver.Chrome, name: str) -> None:
    folder = os.environ.get("TINYLM_DOCS_SCREENSHOT_DIR")
    if folder:
        browser.save_screenshot(str(Path(folder) / name))


def status_text(browser: webdriver.Chrome) -> str:
    """The run page's status badge, read in one script call: the page replaces the element as updates come."""
    return browser.execute_script("const s = document.getElementById('status'); return s ? s.textContent : '';")


def loss_points(browser: webdriver.Chrome) -> int:
    """Points on the loss chart (read in one script call: a chart is rebuilt when its series change)."""
    return int(browser.execute_script(
        "const c = document.querySelector('.chart[data-metric=\"loss\"]'); return c ? c.dataset.points || 0 : 0;"))


def test_a_live_run_grows_on_its_page_survives_a_reload_and_a_studio_restart_and_stops(browser: webdriver.Chrome,
                                                                                       tmp_path: Path) -> None:
    run = tmp_path / "live"
    proc = train_process(run, "--max-steps", "100000")
    try:
        wait_for(lambda: (status := read_status(run)) is not None and status["step"] >= 2, process=proc)
        with studio(tmp_path) as url:
            browser.get(f"{url}/")
            WebDriverWait(browser, 20).until(lambda b: b.find_elements(By.CSS_SELECTOR, 'tr[data-run="live"]'))
            row = browser.find_element(By.CSS_SELECTOR, 'tr[data-run="live"]')
            assert "running" in row.text and "pretrain" in row.text
            browser.get(f"{url}/run?name=live")
            WebDriverWait(browser, 20).until(lambda b: loss_points(b) > 0)
            first = loss_points(browser)
            WebDriverWait(browser, 30).until(lambda b: loss_points(b) >= first + 5)  # pushed, not reloaded
            screenshot(browser, "studio-run.png")
            browser.refresh()
            WebDriverWait(browser, 20).until(lambda b: loss_points(b) >= first + 5)  # a reload loses nothing
        assert proc.poll() is None  # the studio stopped; the run trains on
        with studio(tmp_path) as url:  # a restarted studio finds it running and follows it live
            browser.get(f"{url}/run?name=live")
            WebDriverWait(browser, 20).until(lambda b: status_text(b) == "running" and loss_points(b) > 0)
            again = loss_points(browser)
            WebDriverWait(browser, 30).until(lambda b: loss_points(b) >= again + 3)
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
            WebDriverWait(browser, 20).until(lambda b: status_text(b) == "stopped")
            assert "--resume latest" in browser.execute_script("return document.getElementById('state').textContent;")
            stopped_at = read_status(run)["step"]
            WebDriverWait(browser, 20).until(lambda b: loss_points(b) >= stopped_at)  # every logged step shown
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
    assert proc.returncode == 130


def test_compare_overlays_two_runs_and_lists_what_differs(browser: webdriver.Chrome, tmp_path: Path) -> None:
    assert main(cli_args(tmp_path / "a", "--max-steps", "6")) == 0
    assert main(cli_args(tmp_path / "b", "--max-steps", "6", "--lr", "0.01")) == 0
    with studio(tmp_path) as url:
        browser.get(f"{url}/")
        WebDriverWait(browser, 20).until(lambda b: len(b.find_elements(By.CSS_SELECTOR, "#runs tbody tr")) == 2)
        for box in browser.find_elements(By.CSS_SELECTOR, "#runs tbody input[type=checkbox]"):
            box.click()
        screenshot(browser, "studio-runs.png")
        browser.find_element(By.ID, "compare").click()
        WebDriverWait(browser, 20).until(lambda b: b.find_elements(By.CSS_SELECTOR, 'tr[data-field="train.lr"]'))
        lr = browser.find_element(By.CSS_SELECTOR, 'tr[data-field="train.lr"]').text
        assert "0.01" in lr
        assert not browser.find_elements(By.CSS_SELECTOR, 'tr[data-field="model.n_embed"]')  # equal: not listed
        WebDriverWait(browser, 20).until(lambda b: loss_points(b) == 12)  # both runs' six steps on one chart
        legend = browser.find_element(By.CSS_SELECTOR, '.chart[data-metric="loss"] .u-legend').text
        assert "a" in legend and "b" in legend
        screenshot(browser, "studio-compare.png")


def test_a_box_labelled_with_a_no_flag_is_that_flag(browser: webdriver.Chrome, tmp_path: Path) -> None:
    """`--no-packing` starts unchecked (the flag absent, packing on) and checking it adds the flag; the same for
    every --no- box (it was the other way round: checked with the flag absent)."""
    from selenium.webdriver.support.ui import Select

    with studio(tmp_path) as url:
        browser.get(f"{url}/launch")
        WebDriverWait(browser, 20).until(lambda b: b.find_elements(By.ID, "field-batch_size"))
        Select(browser.find_element(By.ID, "stage")).select_by_value("sft")
        WebDriverWait(browser, 20).until(lambda b: b.find_elements(By.ID, "field-packing"))
        boxes = {name: browser.find_element(By.ID, f"field-{name}") for name in ("packing", "learn_reasoning",
                                                                                 "progress")}
        assert not any(box.is_selected() for box in boxes.values())
        browser.find_element(By.ID, "field-base").send_keys("runs/base")
        WebDriverWait(browser, 20).until(lambda b: "--base runs/base" in b.find_element(By.ID, "preview").text)
        assert "--no-" not in browser.find_element(By.ID, "preview").text
        boxes["packing"].click()
        WebDriverWait(browser, 20).until(lambda b: "--no-packing" in b.find_element(By.ID, "preview").text)
        assert "--no-learn-reasoning" not in browser.find_element(By.ID, "preview").text


@pytest.mark.slow  # ~28 s; launch, stop and resume through the API stay in the default suite (test_studio_launch)
def test_launch_from_the_form_then_stop_resume_and_finish_from_the_run_page(browser: webdriver.Chrome,
                                                                           tmp_path: Path) -> None:
    """The form is the stage's options: a value out of range shows the CLI's line; Launch, Stop, Resume work."""
    from selenium.webdriver.support.ui import Select

    from test_studio_launch import micro_options

    values = micro_options(max_steps=100000)
    with studio(tmp_path) as url:
        browser.get(f"{url}/launch")
        WebDriverWait(browser, 20).until(lambda b: b.find_elements(By.ID, "field-batch_size"))
        Select(browser.find_element(By.ID, "stage")).select_by_value("pretrain")
        name = browser.find_element(By.ID, "name")
        name.clear()
        name.send_keys("from-form")
        for field, value in values.items():
            text = " ".join(f"{k}={v}" for k, v in value.items()) if isinstance(value, dict) else str(value)
            element = browser.find_element(By.ID, f"field-{field}")
            if element.tag_name == "select":
                Select(element).select_by_value(text)
            else:
                element.clear()
                element.send_keys(text)
        batch = browser.find_element(By.ID, "field-batch_size")
        batch.clear()
        batch.send_keys("0")
        refusal = "--batch-size must be >= 1 (got 0)"  # the command line's own line
        WebDriverWait(browser, 20).until(lambda b: refusal in b.find_element(By.ID, "error").text)
        batch.clear()
        batch.send_keys("4")
        WebDriverWait(browser, 20).until(lambda b: "--batch-size 4" in b.find_element(By.ID, "preview").text)
        screenshot(browser, "studio-launch.png")
        browser.find_element(By.ID, "launch").click()
        WebDriverWait(browser, 60).until(lambda b: status_text(b) == "running")
        WebDriverWait(browser, 30).until(lambda b: loss_points(b) > 3)
        browser.find_element(By.ID, "stop").click()
        WebDriverWait(browser, 60).until(lambda b: status_text(b) == "stopped")
        browser.find_element(By.ID, "resume").click()
        WebDriverWait(browser, 60).until(lambda b: status_text(b) == "running")
        WebDriverWait(browser, 20).until(lambda b: "resumed from" in b.find_element(By.ID, "console").text)
        browser.find_element(By.ID, "stop").click()
        WebDriverWait(browser, 60).until(lambda b: status_text(b) == "stopped")
        # resumed once more with a budget (as the page's resume, with the option a form would add): it finishes
        stopped_at = read_status(tmp_path / "from-form")["step"]
        httpx.post(f"{url}/api/resume", json={"name": "from-form", "options": {"max_steps": stopped_at + 10}}
                   ).raise_for_status()
        WebDriverWait(browser, 60).until(lambda b: status_text(b) == "finished")
        browser.refresh()  # nothing lost: every step of the three processes is on the chart
        WebDriverWait(browser, 20).until(lambda b: loss_points(b) >= stopped_at + 10)
    assert read_status(tmp_path / "from-form")["status"] == "finished"


def test_the_tokenizer_playground_colours_each_token(browser: webdriver.Chrome, tmp_path: Path) -> None:
    from tinylm.checkpoint.layout import list_checkpoints
    from tinylm.tokenizer.load import load_tokenizer

    assert main(cli_args(tmp_path / "a", "--max-steps", "2")) == 0
    tokenizer = load_tokenizer(list_checkpoints(tmp_path / "a")[-1] / "tokenizer.json")
    with studio(tmp_path) as url:
        browser.get(f"{url}/tokens?name=a")
        box = browser.find_element(By.ID, "text")
        box.clear()
        box.send_keys("the quick brown fox <|endoftext|>")
        expected = tokenizer.encode("the quick brown fox <|endoftext|>")
        shown = ("return [...document.querySelectorAll('#tokens .token')].map("
                 "s => [Number(s.dataset.id), s.classList.contains('special'), s.textContent]);")
        WebDriverWait(browser, 20).until(lambda b: [t[0] for t in b.execute_script(shown)] == expected)
        assert [t[2] for t in browser.execute_script(shown) if t[1]] == ["<|endoftext|>"]
        screenshot(browser, "studio-tokens.png")


def test_the_data_page_shows_the_loss_mask_and_a_bad_rows_file_and_line(browser: webdriver.Chrome,
                                                                       tmp_path: Path) -> None:
    from tinylm.stages.sft.data import load_conversations

    assert main(cli_args(tmp_path / "base", "--max-steps", "2")) == 0
    (tmp_path / "bad.jsonl").write_text('{"messages": [oops\n')
    answers = [c[-1]["content"] for c in load_conversations("builtin:arith", limit=3).conversations]
    learned = ("return [...document.querySelectorAll('#rows .row')].map(r => [...r.querySelectorAll('.token.learn')]"
               ".map(t => t.textContent).join(''));")
    with studio(tmp_path) as url:
        browser.get(f"{url}/data?stage=sft&data=builtin:arith&run=base")
        WebDriverWait(browser, 30).until(lambda b: len(b.execute_script(learned)) == 5)
        assert browser.execute_script(learned)[:3] == [a + "<|end|>" for a in answers]
        screenshot(browser, "studio-data.png")
        spec = browser.find_element(By.ID, "spec")
        spec.clear()
        spec.send_keys("bad.jsonl\n")
        WebDriverWait(browser, 30).until(lambda b: b.find_element(By.ID, "error").is_displayed())
        assert f"{(tmp_path / 'bad.jsonl').resolve()}:1: malformed JSON" in browser.find_element(By.ID, "error").text


def test_chat_side_by_side_sends_the_whole_conversation_to_two_checkpoints(browser: webdriver.Chrome,
                                                                           tmp_path: Path) -> None:
    from chat_stop_support import chat_checkpoint
    from test_studio_chat import plain_reply, reversed_reply

    chat_checkpoint(tmp_path, plain_reply, "sft")
    chat_checkpoint(tmp_path, reversed_reply, "rl")
    replies = ("return [...document.querySelectorAll('.pane')].map(p => [...p.querySelectorAll('.assistant')]"
               ".map(m => m.textContent));")
    finished = ("return [...document.querySelectorAll('.pane')].map(p => "
                "p.querySelectorAll('.assistant:not(.streaming)').length);")  # a reply still streaming is not one
    with studio(tmp_path) as url:
        browser.get(f"{url}/chat?a=sft%0Astep_00000001&b=rl%0Astep_00000001")
        browser.execute_script("localStorage.clear();")
        browser.refresh()
        WebDriverWait(browser, 20).until(lambda b: b.find_elements(By.CSS_SELECTOR, "#pane-b .model option"))
        for turn, text in enumerate(("hi", "and again"), start=1):
            box = browser.find_element(By.ID, "message")
            box.send_keys(text)
            browser.find_element(By.ID, "send").click()
            WebDriverWait(browser, 60).until(lambda b, n=turn: b.execute_script(finished) == [n, n])
        assert browser.execute_script(replies) == [["return", "return"], ["urnret", "urnret"]]
        screenshot(browser, "studio-chat.png")
        browser.refresh()  # the conversation is kept in the browser: a refresh loses nothing
        WebDriverWait(browser, 20).until(lambda b: [len(p) for p in b.execute_script(replies)] == [2, 2])


def test_a_chat_pane_shows_reasoning_and_tool_rounds_and_sends_them_back(browser: webdriver.Chrome,
                                                                          tmp_path: Path) -> None:
    from chat_stop_support import chat_checkpoint
    from test_serve_tools import TOOL_CORPUS, server_calling_chain
    from tinylm.inference.tool_loop import MAX_TURNS

    chat_checkpoint(tmp_path, server_calling_chain, "caller", TOOL_CORPUS, context_length=512)
    parts = ("return [...document.querySelectorAll('#pane-a .assistant')].map(m => "
             "[...m.querySelectorAll('.part')].map(p => p.className.replace('part ', '')));")
    with studio(tmp_path) as url:
        browser.get(f"{url}/chat?a=caller%0Astep_00000001")
        browser.execute_script("localStorage.clear();")
        browser.refresh()
        WebDriverWait(browser, 20).until(lambda b: b.find_elements(By.CSS_SELECTOR, "#pane-a .model option"))
        browser.find_element(By.ID, "max_tokens").clear()
        browser.find_element(By.ID, "max_tokens").send_keys("200")
        browser.find_element(By.CSS_SELECTOR, "input.tool[value=calculator]").click()
        browser.find_element(By.ID, "message").send_keys("2 times 3?")
        browser.find_element(By.ID, "send").click()
        done = "#pane-a .assistant:not(.streaming)"
        WebDriverWait(browser, 60).until(lambda b: b.find_elements(By.CSS_SELECTOR, done))
        kinds = ["reasoning", "tool-call", "tool-result"] * (MAX_TURNS - 1) + ["reasoning", "tool-call"]
        assert browser.execute_script(parts) == [kinds]
        sent = browser.execute_script("return JSON.parse(localStorage.getItem('tinylm-studio-chat')).replies[0][0];")
        assert [m["role"] for m in sent["rounds"]] == ["assistant", "tool"] * (MAX_TURNS - 1)
        assert sent["rounds"][1]["content"] == "6"


def test_a_run_page_shows_its_samples_and_builds_its_report_card(browser: webdriver.Chrome, tmp_path: Path) -> None:
    from tinylm.metrics import read_samples

    assert main(cli_args(tmp_path / "run", "--max-steps", "3", "--sample-tokens", "8", "--prompt", "def")) == 0
    reply = read_samples(tmp_path / "run")[0]["reply"]
    with studio(tmp_path) as url:
        browser.get(f"{url}/run?name=run")
        shown = "return [...document.querySelectorAll('#samples tbody td pre')].map(p => p.textContent);"
        WebDriverWait(browser, 20).until(lambda b: b.execute_script(shown) == ["def", reply])
        assert not browser.find_element(By.ID, "report-link").is_displayed()
        browser.find_element(By.ID, "build-report").click()
        WebDriverWait(browser, 60).until(lambda b: b.find_element(By.ID, "report-link").is_displayed())
        assert (tmp_path / "run" / "report.html").is_file()
        browser.execute_script("document.querySelector('h2').scrollIntoView();")
        screenshot(browser, "studio-samples.png")
