"""The web chat page in a real headless browser (Debian's chromium, driven by Selenium): a reply streams in,
and Stop cancels a reply mid-stream, on the page and on the server; a reply's reasoning and the rounds of the
server's built-in tools are shown apart from its answer and kept in the conversation.

Set TINYLM_DOCS_SCREENSHOT=docs/img/serve-chat.png to save the screenshot the docs show.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from browser_support import headless_chromium  # skips this module where no browser is installed
from chat_stop_support import chat_checkpoint
from serve_support import GREETING, make_greeter_checkpoint, serving
from test_serve_tools import SERVER_CALL, TOOL_CORPUS, server_calling_chain
from tinylm.inference.tool_loop import MAX_TURNS
from tinylm.serve.metrics import metric_value
from tinylm.tools import get_tools

pytestmark = pytest.mark.usefixtures("one_thread")

STEP_DELAY_S = 0.0


@pytest.fixture(scope="module")
def browser() -> Iterator[webdriver.Chrome]:
    yield from headless_chromium(1100, 640)


def throttled(scheduler) -> None:
    """Each step waits STEP_DELAY_S first, so the test can press Stop while a reply is still streaming."""
    step = scheduler.step

    def slowed() -> None:
        if STEP_DELAY_S:
            time.sleep(STEP_DELAY_S)
        step()

    scheduler.step = slowed


def test_a_reply_streams_in_and_stop_cancels_the_next(browser: webdriver.Chrome, tmp_path: Path) -> None:
    global STEP_DELAY_S
    wait = WebDriverWait(browser, 30)
    with serving(make_greeter_checkpoint(tmp_path), wrap=throttled) as (url, served, _):
        browser.get(url + "/")
        wait.until(lambda d: "micro" in d.find_element(By.ID, "model").text)
        browser.find_element(By.ID, "temperature").clear()
        browser.find_element(By.ID, "temperature").send_keys("0")

        # a whole reply, streamed
        STEP_DELAY_S = 0.02
        browser.find_element(By.ID, "input").send_keys(GREETING[0]["content"])
        browser.find_element(By.ID, "send").click()
        replies = lambda d: d.find_elements(By.CSS_SELECTOR, ".message.assistant .text")  # noqa: E731
        wait.until(lambda d: replies(d) and replies(d)[0].text)
        partial = replies(browser)[0].text
        wait.until(lambda d: "finished" in d.find_element(By.ID, "status").text)
        reply = replies(browser)[0].text
        assert reply.startswith("Hi! I am a tiny model") and len(partial) < len(reply)  # it arrived in pieces
        assert browser.find_element(By.ID, "status").text == "finished: stop"

        # the second reply is stopped mid-stream
        STEP_DELAY_S = 0.2
        browser.find_element(By.ID, "input").send_keys("Tell me more about yourself, please.")
        browser.find_element(By.ID, "send").click()
        wait.until(lambda d: len(replies(d)) == 2 and replies(d)[1].text)
        browser.find_element(By.ID, "stop").click()
        wait.until(lambda d: d.find_element(By.ID, "status").text == "stopped")
        assert "stopped" in browser.find_elements(By.CSS_SELECTOR, ".message.assistant")[1].get_attribute("class")
        assert browser.find_element(By.ID, "send").is_enabled()
        if os.environ.get("TINYLM_DOCS_SCREENSHOT"):
            browser.save_screenshot(os.environ["TINYLM_DOCS_SCREENSHOT"])

        def metric(name: str) -> float:
            return metric_value(httpx.get(url + "/metrics").text, name)

        deadline = time.monotonic() + 10
        while metric('tinylm_requests_finished_total{reason="cancelled"}') < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert metric('tinylm_requests_finished_total{reason="cancelled"}') == 1
        assert metric("tinylm_requests_running") == 0
        STEP_DELAY_S = 0.0


def test_reasoning_and_the_servers_tool_rounds_are_shown_and_kept(browser: webdriver.Chrome, tmp_path: Path) -> None:
    wait = WebDriverWait(browser, 30)
    run_dir, _ = chat_checkpoint(tmp_path, server_calling_chain, "caller", TOOL_CORPUS, context_length=512)
    with serving(run_dir) as (url, served, _):
        served.tools = get_tools("calculator")
        browser.get(url + "/")
        wait.until(lambda d: d.find_element(By.ID, "tools").is_displayed())
        browser.find_element(By.ID, "temperature").clear()
        browser.find_element(By.ID, "temperature").send_keys("0")
        browser.find_element(By.CSS_SELECTOR, "input.tool[value=calculator]").click()
        browser.find_element(By.ID, "input").send_keys("What is 2 times 3?")
        browser.find_element(By.ID, "send").click()
        wait.until(lambda d: "finished" in d.find_element(By.ID, "status").text)
        assert browser.find_element(By.ID, "status").text == "finished: tool_calls"  # the last round's call
        parts = browser.execute_script("return [...document.querySelectorAll('.message.assistant .part')]"
                                       ".map(p => [p.className, p.textContent]);")
        call = ["part tool-call", "→ " + SERVER_CALL.replace("\n", " ")]
        round_ = [["part reasoning", "hm"], call, ["part tool-result", "← 6"]]
        assert parts == round_ * (MAX_TURNS - 1) + [["part reasoning", "hm"], call]
        conversation = browser.execute_script("return conversation;")
        assert [m["role"] for m in conversation] == ["user", *["assistant", "tool"] * (MAX_TURNS - 1), "assistant"]
        assert conversation[1]["tool_calls"][0]["function"] == {"name": "calculator",
                                                                "arguments": '{"expression": "2*3"}'}
        assert conversation[1]["reasoning_content"] == "hm" and conversation[2]["content"] == "6"
        assert conversation[-1] == {"role": "assistant", "content": "", "reasoning_content": "hm"}
