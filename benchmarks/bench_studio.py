"""What watching a run in `tinylm studio` costs it, and how the run page of a long run loads: one JSON object.

1. streaming: the same small pretraining run (fixed seed, a row every step, the same threads) trained
   alternately without a studio (A) and with a real `tinylm studio` subprocess on loopback (B) whose run
   page is open in `--clients` emulated pages: each reads /api/run, /api/samples, /api/evaluations and
   /api/metrics as the page does on load, then follows /api/events for the whole run (and polls
   /api/console every 2 s, as the page does). Training tokens/s of each run comes from its own rows; the
   cost is one minus the median of the B/A ratios of neighbouring runs, so a machine that slows down
   during the benchmark does not count against either side. The studio's own CPU seconds (from
   /proc/PID/stat) and the clients' are recorded too: on 2 cores they are what competes with training.
2. page_load: a 20,000-step run (the rows a real tiny run logs, a dev row every 250 steps, the real run's
   checkpoint and status) read as its page loads: /api/run and the extras, then /api/metrics from offset 0
   following `offset` until no rows come; and, where Debian's chromium and chromedriver are installed,
   the real page in headless chromium until every row is counted and its charts are drawn, the
   browser's main-thread time per live update of that page, and how many run-page tabs open at once.
3. live_update: follow.read_after from the end of files of 1k, 10k and 100k rows after 10 rows are
   appended (what one live update reads), next to reading the whole file from offset 0.

    .venv/bin/python benchmarks/bench_studio.py [--pairs 5] [--run-seconds 20] [--threads 1] [--clients 2]
    .venv/bin/python benchmarks/bench_studio.py --quick      # tiny sizes, seconds: the smoke test's run
    .venv/bin/python benchmarks/bench_studio.py --only page_load,live_update   # no training pairs

Nothing leaves the loopback. Timings are wall clock on a shared machine: only same-run ratios compare.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import importlib.metadata
import json
import math
import os
import platform
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx

from tinylm.data.prepare import prepare_dataset
from tinylm.data.pystdlib import stdlib_files
from tinylm.metrics import METRICS
from tinylm.studio.app import POLL_S
from tinylm.studio.follow import MAX_READ, read_after
from tinylm.train.run_lock import LOCK_FILE
from tinylm.train.run_status import STATUS_FILE, read_status, run_state

RUN_NAME = "run"  # the run the pages watch, under each root
SKIP_STEPS = 5  # the first steps warm caches and allocators: not the steady rate either side trains at
NEW_ROWS = 10  # rows appended before each timed live read
SECTIONS = ("streaming", "page_load", "live_update")
CONSOLE_POLL_S = 2.0  # how often the run page asks for the console tail (studio.js: setInterval(tail, 2000))


# ---- machine and helpers ---------------------------------------------------------------------------
def machine() -> dict[str, Any]:
    """What the numbers were measured on, and how busy it was (other test runs share these cores)."""
    try:
        torch_version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        torch_version = None
    return {"cpu": platform.processor() or platform.machine(), "cpu_count": os.cpu_count(),
            "python": platform.python_version(), "torch": torch_version,
            "loadavg": [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None}


def percentile(values: list[float], q: float) -> float:
    """Linear-interpolated percentile `q` (0-100) of `values`; a single value is every percentile."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    at = (len(ordered) - 1) * q / 100
    low, high = math.floor(at), math.ceil(at)
    return ordered[low] + (ordered[high] - ordered[low]) * (at - low)


def spread(values_ms: list[float]) -> dict[str, Any]:
    return {"p50_ms": round(percentile(values_ms, 50), 3), "p95_ms": round(percentile(values_ms, 95), 3),
            "samples_ms": [round(v, 3) for v in values_ms]}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def process_cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of a live process, all its threads (/proc/PID/stat; None off Linux).

    getrusage(RUSAGE_CHILDREN) only counts a child once it is reaped, and then together with every
    other reaped child; /proc reads the studio alone, while it runs.
    """
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def self_cpu_s() -> float:
    """CPU seconds of this process, all threads: the emulated pages' share of the machine."""
    return time.process_time()


def start_studio(root: Path) -> tuple[subprocess.Popen, str]:
    """A real `tinylm studio --runs ROOT` process on a free loopback port, once it answers."""
    port = free_port()
    studio = subprocess.Popen([sys.executable, "-m", "tinylm", "studio", "--runs", str(root), "--port", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if studio.poll() is not None:
            raise SystemExit(f"the studio did not start: {studio.stderr.read().decode() if studio.stderr else ''}")
        try:
            if httpx.get(url + "/api/stages", timeout=2).status_code == 200:
                return studio, url
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    studio.kill()
    raise SystemExit("the studio did not answer within 120 s")


def stop_studio(studio: subprocess.Popen) -> None:
    studio.terminate()
    try:
        studio.wait(30)
    except subprocess.TimeoutExpired:
        studio.kill()
        studio.wait()


# ---- the training run ------------------------------------------------------------------------------
def prepare_data(root: Path, files: int, vocab_size: int) -> Path:
    """A small real data folder: the first `files` standard-library modules, a byte-level BPE."""
    corpus = root / "corpus"
    corpus.mkdir()
    for i, path in enumerate(stdlib_files()[:files]):
        shutil.copy(path, corpus / f"{i:04d}.py")
    return prepare_dataset(corpus=str(corpus), vocab_size=vocab_size, out=root / "data", dev_fraction=0.1,
                           progress=False, context_length=256)


def train_command(args: argparse.Namespace, data: Path, out: Path, steps: int) -> list[str]:
    """`tinylm train` of the `tiny` preset (two blocks), fixed seed and kernels, a metrics row every step."""
    return [sys.executable, "-m", "tinylm", "train", "--preset", "tiny", "--set", f"n_blocks={args.blocks}",
            "--set", f"vocab_size={args.vocab_size}", "--data", str(data), "--out", str(out),
            "--batch-size", str(args.batch_size), "--seq-len", str(args.seq_len), "--max-steps", str(steps),
            "--warmup-steps", "20", "--log-every", "1", "--eval-every", "0", "--eval-batches", "2",
            "--sample-tokens", "0", "--no-progress", "--seed", "1", "--threads", str(args.threads),
            "--dtype", "fp32", "--compile", "off", "--attention", "sdpa"]


def read_rows(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / METRICS).read_text().splitlines() if line.strip()]


def train_rate(rows: list[dict[str, Any]]) -> tuple[float, int]:
    """(tokens/s, steps counted) over the steps after the first SKIP_STEPS: tokens over summed step times.

    With a row every step each row's tokens_per_s is its own step's, so a step's time is its tokens over
    it; the sum is the run's training time, as the loop's own summary counts it.
    """
    train = [r for r in rows if "loss" in r and isinstance(r.get("tokens_per_s"), (int, float))]
    tokens = seconds = 0.0
    counted = 0
    for before, row in zip(train, train[1:], strict=False):
        if row["step"] <= SKIP_STEPS or row["tokens_per_s"] <= 0:
            continue
        step_tokens = (row["tokens"] - before["tokens"]) / max(1, row["step"] - before["step"])
        tokens += step_tokens
        seconds += step_tokens / row["tokens_per_s"]
        counted += 1
    return (tokens / seconds if seconds else 0.0), counted


class Page(threading.Thread):
    """One open run page: what studio.js asks for on load, then /api/events followed until told to stop.

    The event stream is read from a raw socket with a short timeout, so the page can be closed between
    events; the chunked body is decoded here and every event's rows counted.
    """

    def __init__(self, url: str, name: str, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.url, self.name, self.stop = url, name, stop
        self.rows = 0
        self.offset = 0
        self.events = 0
        self.error: str | None = None

    def run(self) -> None:
        try:
            with httpx.Client(base_url=self.url, timeout=60) as client:
                self.follow(client)
        except Exception as exc:  # a failed page is reported in the JSON, not a crash of the benchmark
            self.error = f"{type(exc).__name__}: {exc}"

    def extras(self, client: httpx.Client) -> None:
        for path in ("/api/samples", "/api/evaluations"):
            client.get(path, params={"name": self.name})

    def follow(self, client: httpx.Client) -> None:
        client.get("/api/run", params={"name": self.name}).raise_for_status()
        self.extras(client)
        first = client.get("/api/metrics", params={"name": self.name}).raise_for_status().json()
        self.rows, self.offset = len(first["rows"]), first["offset"]
        host, port = self.url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(f"GET /api/events?name={self.name}&offset={first['offset']}&line={first['first_line']} "
                         f"HTTP/1.1\r\nHost: {host}:{port}\r\nAccept: text/event-stream\r\n\r\n".encode())
            sock.settimeout(0.2)
            raw, body, head = b"", b"", True
            next_console = time.monotonic() + CONSOLE_POLL_S
            while not self.stop.is_set():
                if time.monotonic() >= next_console:
                    client.get("/api/console", params={"name": self.name})
                    next_console += CONSOLE_POLL_S
                try:
                    block = sock.recv(65536)
                except TimeoutError:
                    continue
                if not block:
                    raise ConnectionError("the studio closed the event stream")
                raw += block
                if head:
                    if b"\r\n\r\n" not in raw:
                        continue
                    status, raw = raw.split(b"\r\n\r\n", 1)
                    if b" 200 " not in status.split(b"\r\n", 1)[0]:
                        raise ConnectionError(status.decode(errors="replace"))
                    head = False
                while b"\r\n" in raw:  # chunked transfer: SIZE CRLF DATA CRLF
                    size_line, rest = raw.split(b"\r\n", 1)
                    size = int(size_line.split(b";")[0], 16)
                    if len(rest) < size + 2:
                        break
                    body += rest[:size]
                    raw = rest[size + 2:]
                while b"\n\n" in body:
                    event, body = body.split(b"\n\n", 1)
                    self.on_event(client, event)

    def on_event(self, client: httpx.Client, event: bytes) -> None:
        data = b"".join(line[6:] for line in event.split(b"\n") if line.startswith(b"data: "))
        if not data:
            return
        update = json.loads(data)
        self.events += 1
        self.rows = len(update["rows"]) if update.get("reset") else self.rows + len(update["rows"])
        self.offset = update["offset"]
        if update.get("reset") or any("loss" not in r for r in update["rows"]) or update.get("state") != "running":
            self.extras(client)  # the page reads its samples and evaluations again after an evaluation


def one_run(args: argparse.Namespace, data: Path, root: Path, steps: int, watched: bool) -> dict[str, Any]:
    """Train once into root/RUN_NAME, with (B) or without (A) a studio and its open pages, and measure it."""
    root.mkdir(parents=True)
    run_dir = root / RUN_NAME
    studio = url = None
    if watched:
        studio, url = start_studio(root)
    studio_cpu0 = process_cpu_s(studio.pid) if studio else None
    self0 = self_cpu_s()
    start = time.perf_counter()
    train = subprocess.Popen(train_command(args, data, run_dir, steps), stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, env={**os.environ, "OMP_NUM_THREADS": str(args.threads)})
    stop = threading.Event()
    pages: list[Page] = []
    try:
        if watched:
            while not (run_dir / METRICS).exists() and train.poll() is None:
                time.sleep(0.02)  # the page opens once the run is a run (the studio 404s a folder that is not)
            pages = [Page(url, RUN_NAME, stop) for _ in range(args.clients)]
            for page in pages:
                page.start()
        _, stderr = train.communicate()
        wall = time.perf_counter() - start
        if train.returncode != 0:
            raise SystemExit(f"training failed ({train.returncode}): {stderr.decode()[-2000:]}")
        size = (run_dir / METRICS).stat().st_size
        deadline = time.monotonic() + 10
        while pages and time.monotonic() < deadline and any(p.offset < size and p.error is None for p in pages):
            time.sleep(0.05)  # the last rows reach the pages at the studio's next poll
    finally:
        stop.set()
        for page in pages:
            page.join(10)
        studio_cpu = process_cpu_s(studio.pid) if studio else None
        if studio:
            stop_studio(studio)
    rows = read_rows(run_dir)
    rate, counted = train_rate(rows)
    result: dict[str, Any] = {"kind": "B" if watched else "A", "tokens_per_s": round(rate, 1), "steps": counted,
                              "wall_s": round(wall, 2)}
    if watched:
        result.update({
            "studio_cpu_s": None if studio_cpu is None or studio_cpu0 is None else round(studio_cpu - studio_cpu0, 3),
            "pages_cpu_s": round(self_cpu_s() - self0, 3),
            "rows_in_file": len(rows), "rows_followed": [p.rows for p in pages], "events": [p.events for p in pages],
            "page_errors": [p.error for p in pages if p.error]})
    return result


def streaming(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """A/B pairs of the same run; the calibration run (not counted) sets the steps for --run-seconds."""
    data = prepare_data(work, args.corpus_files, args.vocab_size)
    steps = args.steps
    calibration = None
    if steps is None:
        probe = one_run(args, data, work / "calibrate", 200, watched=False)
        steps_per_s = probe["tokens_per_s"] / (args.batch_size * args.seq_len)
        steps = max(50, round(steps_per_s * args.run_seconds))
        calibration = {"steps": 200, "tokens_per_s": probe["tokens_per_s"], "wall_s": probe["wall_s"]}
    runs = []
    for pair in range(args.pairs):
        order = (False, True) if pair % 2 == 0 else (True, False)  # ABBA: neither side always goes first
        for watched in order:
            runs.append(one_run(args, data, work / f"pair{pair}-{'B' if watched else 'A'}", steps, watched))
            print(json.dumps(runs[-1]), file=sys.stderr, flush=True)  # progress: a long benchmark shows each run
    a = [r for r in runs if r["kind"] == "A"]
    b = [r for r in runs if r["kind"] == "B"]
    ratios = [rb["tokens_per_s"] / ra["tokens_per_s"] for ra, rb in zip(a, b, strict=True)]
    ratio = statistics.median(ratios)
    b_wall = sum(r["wall_s"] for r in b)
    studio_cpu = [r["studio_cpu_s"] for r in b if r["studio_cpu_s"] is not None]
    return {
        "train_command": ["tinylm", *train_command(args, Path("DATA"), Path("ROOT") / RUN_NAME, steps)[3:]],
        "threads": args.threads, "clients": args.clients, "steps_per_run": steps, "calibration": calibration,
        "tokens_per_step": args.batch_size * args.seq_len, "poll_s": POLL_S, "runs": runs,
        "tokens_per_s_a": statistics.median(r["tokens_per_s"] for r in a),
        "tokens_per_s_b": statistics.median(r["tokens_per_s"] for r in b),
        "ratios_b_over_a": [round(x, 4) for x in ratios], "ratio_b_over_a": round(ratio, 4),
        "cost_pct": round(100 * (1 - ratio), 2), "goal_cost_pct": 2.0,
        "studio_cpu_s": studio_cpu,
        "studio_cpu_share_of_one_core": round(sum(studio_cpu) / b_wall, 4) if studio_cpu and b_wall else None,
        "pages_cpu_s": [r["pages_cpu_s"] for r in b],
        # the most the studio and its pages could cost: every CPU second of theirs taken from training's wall time
        "cpu_bound_pct": (round(100 * statistics.median((r["studio_cpu_s"] + r["pages_cpu_s"]) / r["wall_s"]
                                                        for r in b), 2) if studio_cpu else None),
        "all_rows_followed": all(not r["page_errors"] and all(n == r["rows_in_file"] for n in r["rows_followed"])
                                 for r in b),
    }


# ---- a long run's metrics, written -----------------------------------------------------------------
def synthetic_rows(steps: int, dev_every: int, train_keys: list[str], dev_keys: list[str],
                   tokens_per_step: int, seed: int = 0) -> list[dict[str, Any]]:
    """Rows shaped like a pretraining run's: one per step with the real run's keys, a dev row every `dev_every`.

    Values are floats at full precision (as json writes the real ones), so each line is as long as a real one.
    """
    rng = random.Random(seed)
    rows: list[dict[str, Any]] = []
    values: dict[str, Any] = {}
    for step in range(1, steps + 1):
        loss = 1.8 + 6.5 * math.exp(-step / 3000) + rng.gauss(0, 0.05)
        values = {"step": step, "loss": loss, "lr": 0.003 * (0.1 + 0.45 * (1 + math.cos(math.pi * step / steps))),
                  "tokens": step * tokens_per_step, "tokens_per_s": 21000 + rng.gauss(0, 600),
                  "mfu": 0.37 + rng.gauss(0, 0.01), "grad_norm": abs(0.9 + rng.gauss(0, 0.2)),
                  "elapsed_s": step * 0.0245 + rng.random() * 1e-3}
        rows.append({k: values.get(k, rng.random()) for k in train_keys})
        if step % dev_every == 0 or step == steps:
            dev = {"step": step, "dev_loss": loss + 0.3 + rng.gauss(0, 0.02), "dev_bpb": (loss + 0.3) / 2.05,
                   "tokens": step * tokens_per_step}
            rows.append({k: dev.get(k, rng.random()) for k in dev_keys})
    return rows


def write_rows(path: Path, rows: list[dict[str, Any]], mode: str = "w") -> None:
    with path.open(mode, encoding="utf-8") as f:
        f.write("".join(json.dumps(r) + "\n" for r in rows))


def key_sets(rows: list[dict[str, Any]]) -> tuple[list[str], list[str]]:
    """The keys of a real run's training rows and of its dev rows, in the order it writes them."""
    train = next(r for r in reversed(rows) if "loss" in r)
    dev = next((r for r in reversed(rows) if "dev_loss" in r), {"step": 0, "dev_loss": 0, "dev_bpb": 0, "tokens": 0})
    return list(train), list(dev)


def long_run(source: Path, root: Path, steps: int, dev_every: int) -> LiveRun:
    """A copy of a real run folder (checkpoint, status) whose metrics.jsonl is a `steps`-step run's.

    Copying a real run keeps what /api/run reads real (its checkpoint's config.json, status.json); only
    the rows are written, with the real run's keys, so each line is as long as the run would write it.
    """
    run_dir = root / RUN_NAME
    shutil.copytree(source, run_dir, ignore=shutil.ignore_patterns("train_state.pt", LOCK_FILE))
    real = read_rows(source)
    train_keys, dev_keys = key_sets(real)
    per_step = next(r for r in real if "loss" in r)["tokens"]
    rows = synthetic_rows(steps + 1000, dev_every, train_keys, dev_keys, per_step)
    cut = next(i for i, r in enumerate(rows) if r["step"] > steps)
    write_rows(run_dir / METRICS, rows[:cut])
    status = read_status(run_dir) or {}
    (run_dir / STATUS_FILE).write_text(json.dumps({**status, "step": steps, "total_steps": steps}, indent=2))
    return LiveRun(run_dir, rows[:cut], rows[cut:])


# ---- page load -------------------------------------------------------------------------------------
def api_load(client: httpx.Client) -> dict[str, Any]:
    """One load of the run page through the API: the record, the extras, then every row following `offset`."""
    t0 = time.perf_counter()
    client.get("/api/run", params={"name": RUN_NAME}).raise_for_status()
    t1 = time.perf_counter()
    for path in ("/api/samples", "/api/evaluations"):
        client.get(path, params={"name": RUN_NAME})
    t2 = time.perf_counter()
    offset, line, rows, answers, first_rows = 0, 1, 0, 0, None
    while True:
        update = client.get("/api/metrics", params={"name": RUN_NAME, "offset": offset, "line": line}).json()
        if not update["rows"]:
            break
        answers += 1
        rows += len(update["rows"])
        first_rows = len(update["rows"]) if first_rows is None else first_rows
        offset, line = update["offset"], update["first_line"]
    t3 = time.perf_counter()
    return {"total_ms": 1000 * (t3 - t0), "run_ms": 1000 * (t1 - t0), "extras_ms": 1000 * (t2 - t1),
            "metrics_ms": 1000 * (t3 - t2), "answers": answers, "rows": rows, "first_answer_rows": first_rows}


def browser_load(url: str, rows: int, repeats: int, live: LiveRun, tabs: int) -> dict[str, Any]:
    """The real run page in headless chromium: ms from navigation until every row is counted and charts drawn.

    Done is what studio.js shows when it has drawn all rows: "#rows" reads "N rows" and #charts holds a
    uPlot canvas per metric. The clock is the page's own (performance.now() from navigation start),
    read when the count is shown. Then, with the run made live, the browser's main-thread time per live
    update of NEW_ROWS rows (Chrome's Performance.getMetrics TaskDuration and ScriptDuration, before and
    after): the page's share of an update, which the server's O(new lines) does not cover. Last, with
    `tabs`, run pages opened in new tabs, each left open, until one does not load within 10 s: each open
    page holds an event stream, and a browser opens at most 6 HTTP/1.1 connections to one host.
    """
    chromium, driver_path = shutil.which("chromium"), shutil.which("chromedriver")
    if chromium is None or driver_path is None:
        return {"available": False, "reason": "no Debian chromium and chromium-driver installed"}
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        return {"available": False, "reason": "selenium is not installed"}
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--window-size=1400,1000", "--no-first-run", "--disable-extensions"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    driver.set_page_load_timeout(60)
    driver.set_script_timeout(60)
    # resolves when "#rows" reads the count: studio.js sets it right after drawing every chart, in the same task;
    # an observer, not polling from here, so waiting costs the page (and the 2 cores) nothing
    wait = ("const [want, done] = arguments; const r = document.getElementById('rows');"
            "const seen = [[r.textContent, performance.now()]];"
            "const finish = () => done([performance.now(), seen, document.querySelectorAll('#charts .chart').length,"
            " document.querySelectorAll('#charts canvas').length]);"
            "if (r.textContent === want) return finish();"
            "new MutationObserver((_, o) => { seen.push([r.textContent, performance.now()]);"
            " if (r.textContent === want) { o.disconnect(); finish(); } })"
            ".observe(r, { childList: true, characterData: true, subtree: true });")

    def shown(count: int) -> tuple[float, list[list[Any]], int]:
        now, seen, charts, canvases = driver.execute_async_script(wait, f"{count} rows")
        if not charts or canvases < charts:
            raise RuntimeError(f"{count} rows counted but {canvases} canvases in {charts} charts")
        return now, seen, charts

    def main_thread_s() -> tuple[float, float]:
        found = {m["name"]: m["value"] for m in driver.execute_cdp_cmd("Performance.getMetrics", {})["metrics"]}
        return found["TaskDuration"], found["ScriptDuration"]

    times, firsts, task_ms, script_ms = [], [], [], []
    charts = 0
    try:
        for i in range(repeats + 1):  # the first load warms the browser's caches: not counted
            # straight from the last page (as a reload): through about:blank chromium kept the old pages' event
            # streams open for a minute, and the 7th load waited for one of its 6 connections to the host
            driver.get(f"{url}/run?name={RUN_NAME}")
            now, seen, charts = shown(rows)
            if i:
                times.append(now)
                firsts.append(next(([text, round(t, 1)] for text, t in seen if text != "0 rows"), None))
        driver.execute_cdp_cmd("Performance.enable", {})
        with live.running():
            time.sleep(1.5)  # the page sees the run start: its extras are read again, then it is quiet
            for i in range(repeats + 1):
                task0, script0 = main_thread_s()
                shown(live.append(NEW_ROWS))
                time.sleep(0.1)  # layout and paint after the draw
                task1, script1 = main_thread_s()
                if i:
                    task_ms.append(1000 * (task1 - task0))
                    script_ms.append(1000 * (script1 - script0))
        stalled = open_tabs(driver, url, tabs, lambda: shown(live.rows)) if tabs else None
    finally:
        driver.quit()
    return {"available": True, "reason": None, **spread(times), "charts": charts, "first_draw": firsts,
            "live_update_rows_on_page": live.rows, "live_update_task_p50_ms": round(percentile(task_ms, 50), 2),
            "live_update_script_p50_ms": round(percentile(script_ms, 50), 2),
            "live_update_task_samples_ms": [round(x, 2) for x in task_ms],
            "tabs_tried": tabs, "tab_that_did_not_load": stalled}


def open_tabs(driver: Any, url: str, tabs: int, loaded: Callable[[], Any]) -> int | None:
    """The number of the first run-page tab (the first is open) that does not load in 10 s; None if all do.

    Each tab is followed until it shows every row (its event stream open), as a reader opening tabs sees them.
    """
    from selenium.common.exceptions import TimeoutException

    driver.set_page_load_timeout(10)
    driver.set_script_timeout(10)
    for tab in range(2, tabs + 1):
        driver.switch_to.new_window("tab")
        try:
            driver.get(f"{url}/run?name={RUN_NAME}")
            loaded()
        except TimeoutException:
            return tab
    return None


class LiveRun:
    """The long run made live: status "running" with its lock held (as a training process holds it), rows appended."""

    def __init__(self, run_dir: Path, rows: list[dict[str, Any]], more: list[dict[str, Any]]) -> None:
        self.run_dir, self.more, self.rows = run_dir, more, len(rows)

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        status_file = self.run_dir / STATUS_FILE
        before = status_file.read_text()
        with (self.run_dir / LOCK_FILE).open("a+") as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)  # the studio's lock probe now finds the run held: "running"
            status_file.write_text(json.dumps({**json.loads(before), "status": "running", "reason": None}))
            try:
                yield
            finally:
                status_file.write_text(before)

    def append(self, n: int) -> int:
        """Append the next `n` rows, as the training loop does; the rows the file holds now."""
        write_rows(self.run_dir / METRICS, self.more[:n], mode="a")
        self.more = self.more[n:]
        self.rows += n
        return self.rows


def page_load(args: argparse.Namespace, source: Path, work: Path) -> dict[str, Any]:
    """The long run's page loads: through the API (`--page-repeats`), then in chromium where it is installed."""
    root = work / "long"
    live = long_run(source, root, args.page_steps, args.dev_every)
    rows, run_dir = live.rows, live.run_dir
    size = (run_dir / METRICS).stat().st_size
    studio, url = start_studio(root)
    try:
        with httpx.Client(base_url=url, timeout=60) as client:
            loads = [api_load(client) for _ in range(args.page_repeats + 1)][1:]  # the first warms the OS cache
        browser = (browser_load(url, rows, args.browser_repeats, live, args.tabs) if args.browser_repeats
                   else {"available": False, "reason": "--browser-repeats 0"})
    finally:
        stop_studio(studio)
    return {"steps": args.page_steps, "dev_every": args.dev_every, "rows": rows, "bytes": size,
            "max_read": MAX_READ, "answers": loads[0]["answers"], "first_answer_rows": loads[0]["first_answer_rows"],
            "all_rows_read": all(x["rows"] == rows for x in loads),
            "api": {**spread([x["total_ms"] for x in loads]),
                    "run_p50_ms": round(percentile([x["run_ms"] for x in loads], 50), 3),
                    "extras_p50_ms": round(percentile([x["extras_ms"] for x in loads], 50), 3),
                    "metrics_p50_ms": round(percentile([x["metrics_ms"] for x in loads], 50), 3)},
            "browser": browser, "goal_ms": 1000}


# ---- one live update -------------------------------------------------------------------------------
def live_update(args: argparse.Namespace, source_rows: list[dict[str, Any]], work: Path) -> dict[str, Any]:
    """read_after from the end of a file after NEW_ROWS are appended, by file size, next to a whole-file read."""
    train_keys, dev_keys = key_sets(source_rows)
    per_step = next(r for r in source_rows if "loss" in r)["tokens"]
    sizes = []
    for n in args.live_sizes:
        folder = work / f"live-{n}"
        folder.mkdir()
        (folder / STATUS_FILE).write_text(json.dumps({"status": "finished", "stage": "pretrain", "step": n}))
        all_rows = synthetic_rows(n + NEW_ROWS * (args.live_repeats + 1), args.dev_every, train_keys, dev_keys,
                                  per_step, seed=n)
        write_rows(folder / METRICS, all_rows[:n])
        tail, polls, line, offset = [], [], n + 1, (folder / METRICS).stat().st_size
        for i in range(args.live_repeats + 1):  # the first read is not counted
            write_rows(folder / METRICS, all_rows[n + i * NEW_ROWS:n + (i + 1) * NEW_ROWS], mode="a")
            t0 = time.perf_counter()
            update = read_after(folder, offset, line)
            t1 = time.perf_counter()
            found = read_status(folder)  # the rest of one event-stream poll (app.py), constant per poll
            run_state(folder, found)
            t2 = time.perf_counter()
            assert len(update.rows) == NEW_ROWS, update
            offset, line = update.offset, update.first_line
            if i:
                tail.append(1000 * (t1 - t0))
                polls.append(1000 * (t2 - t0))
        full, answers = [], 0
        for _ in range(3):
            t0 = time.perf_counter()
            at, number, answers = 0, 1, 0
            while (update := read_after(folder, at, number)).rows:
                at, number, answers = update.offset, update.first_line, answers + 1
            full.append(1000 * (time.perf_counter() - t0))
        sizes.append({"rows": n, "bytes": offset, "tail_read_p50_ms": round(percentile(tail, 50), 4),
                      "tail_read_p95_ms": round(percentile(tail, 95), 4),
                      "poll_p50_ms": round(percentile(polls, 50), 4),
                      "full_read_p50_ms": round(percentile(full, 50), 2), "full_read_answers": answers})
    return {"new_rows": NEW_ROWS, "repeats": args.live_repeats, "sizes": sizes,
            "tail_growth_largest_vs_smallest": round(sizes[-1]["tail_read_p50_ms"] / sizes[0]["tail_read_p50_ms"], 2),
            "full_growth_largest_vs_smallest": round(sizes[-1]["full_read_p50_ms"] / sizes[0]["full_read_p50_ms"], 2)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, seconds (the smoke test)")
    parser.add_argument("--pairs", type=int, default=5, help="A/B pairs of training runs (default 5)")
    parser.add_argument("--run-seconds", type=float, default=20.0, help="training time of each run (default 20)")
    parser.add_argument("--steps", type=int, default=None, help="steps per run (default: from --run-seconds)")
    parser.add_argument("--threads", type=int, default=1, help="training threads (default 1)")
    parser.add_argument("--clients", type=int, default=2, help="open run pages following the run (default 2)")
    parser.add_argument("--page-steps", type=int, default=20_000, help="steps of the long run (default 20,000)")
    parser.add_argument("--page-repeats", type=int, default=20)
    parser.add_argument("--browser-repeats", type=int, default=8, help="0: no browser")
    parser.add_argument("--live-repeats", type=int, default=30)
    parser.add_argument("--tabs", type=int, default=8, help="run-page tabs to open at once (0: not tried)")
    parser.add_argument("--only", default="streaming,page_load,live_update",
                        help="sections to run, comma-separated (default: all three)")
    args = parser.parse_args(argv)
    args.blocks, args.vocab_size, args.batch_size, args.seq_len = 2, 1024, 8, 64
    args.corpus_files, args.dev_every, args.live_sizes = 80, 250, (1_000, 10_000, 100_000)
    if args.quick:
        args.pairs, args.steps, args.clients, args.corpus_files = 1, 15, 1, 20
        args.page_steps, args.dev_every, args.page_repeats = 400, 50, 2
        args.browser_repeats, args.live_repeats, args.live_sizes = min(args.browser_repeats, 1), 3, (100, 1_000)
        args.tabs = 0
    sections = set(args.only.split(","))
    if sections - set(SECTIONS):
        parser.error(f"unknown section(s) {', '.join(sorted(sections - set(SECTIONS)))}: pick from {SECTIONS}")
    before = machine()
    result: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="tinylm-bench-studio-") as tmp:
        work = Path(tmp)
        if "streaming" in sections:
            result["streaming"] = streaming(args, work)
            source = work / ("calibrate" if (work / "calibrate").is_dir() else "pair0-A") / RUN_NAME
        elif sections & {"page_load", "live_update"}:
            args.steps = args.steps or 50
            source = work / "source" / RUN_NAME  # a real run to copy: one short run
            one_run(args, prepare_data(work, args.corpus_files, args.vocab_size), source.parent, args.steps, False)
        if "page_load" in sections:
            result["page_load"] = page_load(args, source, work)
        if "live_update" in sections:
            result["live_update"] = live_update(args, read_rows(source), work)
    print(json.dumps({"machine": before, "loadavg_end": machine()["loadavg"], "quick": args.quick,
                      "options": {k: v for k, v in vars(args).items() if k != "quick"}, **result}, indent=2))


if __name__ == "__main__":
    main()
