"""The studio's pages in a real headless browser (Debian's chromium via Selenium) while a real run trains.

A `tinylm train` process writes its folder; the run page's loss curve grows without a reload, a reload
shows every point again, a restarted studio finds the run still running and live, SIGTERM to the
process turns its status to "stopped" on the open page, and the compare page overlays two runs with the
config fields that differ. The data page marks the loss mask of `builtin:arith` and shows a bad row's
file:line; the chat page talks to two checkpoints side by side; a run page shows its samples and builds
its report card. Charts fit their grid cells at every window width and follow a resize, a flat series
draws as a flat line, damaged rows are named, each chart says what its metric measures, and a page says
when the studio stops answering.

Set TINYLM_DOCS_SCREENSHOT_DIR=docs/img to save the screenshots the docs show.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import uvicorn
from selenium import webdriver
from selenium.common.exceptions import TimeoutException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from browser_support import console_errors, headless_chromium  # skips this module where no browser is installed
from serve_support import free_port, uvicorn_in_thread
from studio_support import studio
from test_train_support import cli_args, train_process, wait_for
from tinylm.checkpoint.layout import CONFIG, WEIGHTS
from tinylm.cli.main import main
from tinylm.studio.app import SHUTDOWN_GRACE_S, create_app
from tinylm.studio.metric_notes import NOTES
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


# ---- chart layout, flat series, damaged rows, metric notes, a studio gone, compare's absent settings -------------
COLUMNS = {1280: 2, 1440: 3, 1920: 4, 390: 1}  # the grid's columns (cells of 440 px or more) at each window width

LAYOUT = """
const problems = [], cells = [...document.querySelectorAll('.chart')], px = Math.round;
for (const cell of cells) {
  const box = cell.getBoundingClientRect(), inner = cell.clientWidth - 12;  // less its 6 px padding
  for (const part of cell.querySelectorAll('.uplot, canvas')) {
    const r = part.getBoundingClientRect(), what = cell.dataset.metric + ' ' + part.tagName.toLowerCase();
    if (r.left < box.left - 1 || r.right > box.right + 1)
      problems.push(`${what} spans ${px(r.left)}-${px(r.right)} px, its cell ${px(box.left)}-${px(box.right)}`);
    else if (part.classList.contains('uplot') && r.width < inner - 2)
      problems.push(`${what} is ${px(r.width)} px wide in a ${px(inner)} px cell`);
  }
}
const page = document.documentElement;
if (page.scrollWidth > page.clientWidth)
  problems.push(`the page scrolls sideways: ${page.scrollWidth} > ${page.clientWidth} px`);
if (!cells.length || cells.some((c) => !c.querySelector('canvas'))) problems.push('charts not drawn yet');
return problems;
"""
COLUMNS_SHOWN = ("return new Set([...document.querySelectorAll('.chart')]"
                 ".map(c => Math.round(c.getBoundingClientRect().left))).size;")
PLOT_WIDTHS = "return [...document.querySelectorAll('.chart .uplot')].map(u => u.getBoundingClientRect().width);"
NOTES_SHOWN = ("return [...document.querySelectorAll('.chart')].map(c => "
               "[c.dataset.metric, c.querySelector('.note')?.textContent ?? '', c.querySelector('h3').title]);")
BANNER = "const g = document.getElementById('gone'); return g && !g.hidden ? g.textContent : '';"


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two short real runs, evaluated twice: loss, lr, grad_norm, tokens_per_s, dev_loss, dev_bpb... to chart."""
    root = tmp_path_factory.mktemp("trained")
    assert main(cli_args(root / "a", "--max-steps", "6", "--eval-every", "3")) == 0
    assert main(cli_args(root / "b", "--max-steps", "6", "--eval-every", "3", "--lr", "0.01")) == 0
    return root


@pytest.fixture
def window(browser: webdriver.Chrome) -> Iterator[webdriver.Chrome]:
    """The shared browser, its console cleared; its 1280 x 900 window (the docs' screenshots) is given back after."""
    browser.get("about:blank")
    console_errors(browser)
    yield browser
    browser.set_window_size(1280, 900)


def layout_problems(browser: webdriver.Chrome) -> list[str]:
    """What is wrong with the charts' layout once it settles (a resize redraws after a short pause): [] when none."""
    with contextlib.suppress(TimeoutException):
        WebDriverWait(browser, 10).until(lambda b: not b.execute_script(LAYOUT))
    return browser.execute_script(LAYOUT)


def write_run(folder: Path, lines: list[str], config: dict | None = None) -> None:
    """A run folder by hand: metrics.jsonl holding `lines`, and a checkpoint whose config.json is `config`."""
    folder.mkdir(parents=True)
    (folder / "metrics.jsonl").write_text("".join(line + "\n" for line in lines))
    if config is not None:
        checkpoint = folder / "checkpoints" / "step_00000001"
        checkpoint.mkdir(parents=True)
        (checkpoint / CONFIG).write_text(json.dumps(config))
        (checkpoint / WEIGHTS).write_bytes(b"")


@contextlib.contextmanager
def studio_at(root: Path, port: int) -> Iterator[str]:
    """A studio on a port chosen beforehand, so that one can stop and come back where a page expects it."""
    config = uvicorn.Config(create_app(root), host="127.0.0.1", port=port, log_level="warning",
                            timeout_graceful_shutdown=SHUTDOWN_GRACE_S)
    with uvicorn_in_thread(config):
        yield f"http://127.0.0.1:{port}"


@pytest.mark.parametrize("width", list(COLUMNS))
def test_charts_fit_their_cells_at_every_window_width(window: webdriver.Chrome, trained: Path, width: int) -> None:
    """Each chart is drawn the width of its own grid cell (it was half the grid's: 3-4 columns overlapped), the page
    never scrolls sideways (at 390 px a single column), and each chart says what its metric measures."""
    window.set_window_size(width, 900)
    assert abs(window.execute_script("return window.innerWidth;") - width) <= 16
    with studio(trained) as url:
        for page in ("/run?name=a", "/compare?name=a&name=b"):
            window.get(url + page)
            WebDriverWait(window, 20).until(lambda b: len(b.find_elements(By.CSS_SELECTOR, ".chart canvas")) >= 6)
            assert layout_problems(window) == [], page
            assert window.execute_script(COLUMNS_SHOWN) == COLUMNS[width], page
            shown = window.execute_script(NOTES_SHOWN)
            assert {"loss", "grad_norm", "dev_bpb"} <= {metric for metric, _, _ in shown}
            for metric, note, title in shown:
                unit, meaning = NOTES[metric]
                assert note == meaning and unit in title, metric
            if width == 1440 and page.startswith("/run"):
                screenshot(window, "studio-run-wide.png")
            assert console_errors(window) == [], page  # read while the studio serves: stopping cuts the stream


def test_charts_follow_the_window_when_it_shrinks(window: webdriver.Chrome, trained: Path) -> None:
    window.set_window_size(1920, 900)
    with studio(trained) as url:
        window.get(f"{url}/run?name=a")
        assert layout_problems(window) == []
        wide = window.execute_script(PLOT_WIDTHS)
        window.set_window_size(1280, 900)
        assert layout_problems(window) == []
        narrow = window.execute_script(PLOT_WIDTHS)
        assert len(narrow) == len(wide) >= 6 and all(n > w + 100 for n, w in zip(narrow, wide))  # 4 columns -> 2
        window.set_window_size(1920, 900)
        assert layout_problems(window) == []
        assert window.execute_script(PLOT_WIDTHS) == pytest.approx(wide, abs=2)
        assert console_errors(window) == []


def test_a_series_flat_up_to_float_noise_draws_a_flat_line(window: webdriver.Chrome, tmp_path: Path) -> None:
    """tis_weight 1.0, 1.0, 0.99999994: uPlot threw `RangeError: Invalid array length` and drew an empty box."""
    weights = [1.0, 1.0, 0.99999994, 1.0, 0.99999994, 1.0]
    write_run(tmp_path / "rl", [json.dumps({"step": i + 1, "loss": 1.0 / (i + 1), "tis_weight": w})
                                for i, w in enumerate(weights)])
    stroke = """
      const c = document.querySelector('.chart[data-metric="tis_weight"] canvas');
      if (!c) return [];
      const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data, rows = new Set();
      const near = (i, value) => Math.abs(d[i] - value) < 40;
      for (let i = 0; i < d.length; i += 4)  // the series' colour, #2f6fde
        if (near(i, 47) && near(i + 1, 111) && near(i + 2, 222) && d[i + 3] > 100)
          rows.add(Math.floor(i / 4 / c.width));
      return [...rows];"""
    with studio(tmp_path) as url:
        window.get(f"{url}/run?name=rl")
        WebDriverWait(window, 20).until(lambda b: b.execute_script(stroke))
        rows = window.execute_script(stroke)
        assert max(rows) - min(rows) <= 6  # one flat line, a few pixel rows thick
        assert window.find_element(By.CSS_SELECTOR, '.chart[data-metric="tis_weight"]').get_attribute(
            "data-points") == "6"
        window.find_element(By.ID, "logy").click()  # on a log axis as well
        WebDriverWait(window, 20).until(lambda b: b.execute_script(stroke))
        rows = window.execute_script(stroke)
        assert max(rows) - min(rows) <= 6
        assert console_errors(window) == []


def test_the_run_page_names_the_damaged_rows_it_skipped(window: webdriver.Chrome, tmp_path: Path) -> None:
    write_run(tmp_path / "damaged", ['{"step": 1, "loss": 2.0}', "not json", "[1, 2, 3]", '{"step": "ten"}',
                                     '{"step": 2, "loss": 1.5}'])
    with studio(tmp_path) as url:
        window.get(f"{url}/run?name=damaged")
        WebDriverWait(window, 20).until(lambda b: b.find_element(By.ID, "damaged").is_displayed())
        note = window.find_element(By.ID, "damaged").text
        assert note.startswith("skipped 3 damaged rows of metrics.jsonl: line 2 (not JSON text), "
                               "line 3 (not a JSON object), line 4 (step 'ten' is not a whole number >= 0)")
        assert window.find_element(By.ID, "rows").text == "2 rows"


def test_a_page_says_when_the_studio_stops_answering(window: webdriver.Chrome, trained: Path) -> None:
    """The run page's polls and event stream fail once the studio stops: a banner says so, and goes when it is back."""
    port = free_port()
    with studio_at(trained, port) as url:
        window.get(f"{url}/run?name=a")
        WebDriverWait(window, 20).until(lambda b: loss_points(b) == 6)
        assert window.execute_script(BANNER) == ""
    WebDriverWait(window, 20).until(lambda b: b.execute_script(BANNER))
    assert window.execute_script(BANNER) == "the studio is not answering (stopped?)"
    with studio_at(trained, port):
        WebDriverWait(window, 20).until(lambda b: b.execute_script(BANNER) == "")
        assert loss_points(window) == 6


def test_compare_shows_a_setting_one_run_lacks_as_absent(window: webdriver.Chrome, tmp_path: Path) -> None:
    row = '{"step": 1, "loss": 2.0}'
    write_run(tmp_path / "x", [row], {"train": {"lr": 0.001, "eval_data": "dev.jsonl"}})
    write_run(tmp_path / "y", [row], {"train": {"lr": 0.01}})
    with studio(tmp_path) as url:
        window.get(f"{url}/compare?name=x&name=y")
        cells = ("return [...document.querySelectorAll('tr[data-field=\"train.eval_data\"] td')]"
                 ".map(t => t.textContent);")
        WebDriverWait(window, 20).until(lambda b: b.execute_script(cells))
        assert window.execute_script(cells) == ["train.eval_data", '"dev.jsonl"', "\u2014"]
