"""metrics.jsonl: one JSON object per logged step or evaluation, appended and flushed as it happens.

A line-per-record file survives a crash (every finished line is valid), can be tailed while the run
goes, and is read back by `tinylm plot` and by tests. Python's `json` writes floats with `repr`,
which round-trips exactly, so losses in the file are the losses the run computed, bit for bit.
TensorBoard and Weights & Biases receive the same rows, but only when installed and asked for:
`--tensorboard [DIR]` writes event files (RUN/tensorboard by default), `--wandb` an offline W&B run
in RUN/wandb (no login, no network) unless the user's WANDB_MODE says otherwise.
"""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tinylm.errors import TinyLMError

METRICS = "metrics.jsonl"
TENSORBOARD = "tensorboard"  # the bare --tensorboard's folder inside the run
TENSORBOARD_IN_RUN = ""  # the bare --tensorboard's value: RUN/tensorboard (a DIR given is written as given)
SAMPLES = "samples.jsonl"  # the model's replies at each evaluation (and a pretraining run's final sample), by step


def _clean(value: Any) -> Any:
    """JSON has no NaN/inf; write them as strings so the file stays standard JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


NUMERIC_FIELDS = ("loss", "lr", "tokens", "tokens_per_s", "mfu", "grad_norm", "elapsed_s", "train_s", "dev_loss",
                  "dev_bpb")
NON_FINITE = ("nan", "inf", "-inf")  # how `_clean` writes them


def _stderr(line: str) -> None:
    print(line, file=sys.stderr)


def row_problem(row: Any) -> str | None:
    """Why a parsed line is not a metrics row we wrote (None when it is one)."""
    if not isinstance(row, dict):
        return "not a JSON object"
    step = row.get("step")
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        return f"step {step!r} is not a whole number >= 0"
    for name in NUMERIC_FIELDS:
        value = row.get(name)
        if value is None or value in NON_FINITE:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return f"{name} {value!r} is not a number"
    return None


def parse_rows(data: bytes, first_line: int = 1) -> tuple[list[dict[str, Any]], list[str], int]:
    """(rows, damaged lines, bytes used) of complete lines in `data`: the part after the last newline is left.

    That last part is a row still being written (or a torn write a kill left), so a reader that follows
    the file reads it whole on its next call, from the returned position.
    """
    end = data.rfind(b"\n") + 1
    rows, damaged = [], []
    for number, raw in enumerate(data[:end].split(b"\n")[:-1], start=first_line):
        if not raw.strip():
            continue
        try:
            row = json.loads(raw.decode("utf-8"))
            problem = row_problem(row)
        except (UnicodeDecodeError, json.JSONDecodeError):
            row, problem = None, "not JSON text"
        if problem is None:
            rows.append(row)
        else:
            damaged.append(f"line {number} ({problem})")
    return rows, damaged, end


def read_metrics(run_dir: str | Path, say: Callable[[str], None] = _stderr) -> list[dict[str, Any]]:
    """The rows of a run's metrics.jsonl; damaged ones (bad bytes, not JSON, wrong types) are skipped with a notice.

    A torn last line, left by a kill mid-write, is skipped silently: it is what a crash leaves behind.
    """
    path = Path(run_dir) / METRICS
    if not path.is_file():
        raise TinyLMError(f"no {METRICS} in {run_dir}: is it a tinylm run folder?")
    data = path.read_bytes()
    rows, damaged, end = parse_rows(data)
    last = parse_rows(data[end:] + b"\n")[0] if data[end:].strip() else []
    rows += last  # a last row without its newline counts when it is whole (a torn one does not parse)
    if damaged:
        shown = ", ".join(damaged[:3]) + (f" and {len(damaged) - 3} more" if len(damaged) > 3 else "")
        say(f"tinylm: {path}: skipped {len(damaged)} damaged row{'s' if len(damaged) > 1 else ''}: {shown}")
    return rows


def read_samples(run_dir: str | Path) -> list[dict[str, Any]]:
    """The rows of a run's samples.jsonl (none when it has none); a damaged line is skipped: they are only shown."""
    path = Path(run_dir) / SAMPLES
    if not path.is_file():
        return []
    rows = []
    for line in path.read_bytes().splitlines():
        try:
            row = json.loads(line)
        except (UnicodeDecodeError, json.JSONDecodeError):
            continue
        if isinstance(row, dict) and isinstance(row.get("step"), int) and isinstance(row.get("reply"), str):
            rows.append(row)
    return rows


def truncate_after(run_dir: str | Path, step: int) -> None:
    """Drop rows past `step` (metrics and samples): a resumed run redoes those steps and must not log them twice."""
    for name, read in ((METRICS, read_metrics), (SAMPLES, read_samples)):
        path = Path(run_dir) / name
        if not path.is_file():
            continue
        keep = [row for row in read(run_dir) if int(row.get("step", 0)) <= step]
        tmp = path.with_suffix(".jsonl.tmp")
        tmp.write_text("".join(json.dumps(row) + "\n" for row in keep), encoding="utf-8")
        tmp.replace(path)


def tensorboard_dir(option: str | None, run_dir: str | Path) -> Path | None:
    """Where --tensorboard writes: None = off, "" (the bare flag) = RUN/tensorboard, else the folder given."""
    if option is None:
        return None
    return Path(run_dir) / TENSORBOARD if option == TENSORBOARD_IN_RUN else Path(option).expanduser()


def _tensorboard_writer(log_dir: Path, purge_step: int) -> Any:
    """A SummaryWriter into `log_dir`; events at or past `purge_step` from an earlier invocation are hidden.

    That mirrors metrics.jsonl: a fresh run (0) starts it anew, a resumed one drops the steps it redoes.
    """
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        raise TinyLMError("--tensorboard needs the tensorboard package: pip install tensorboard") from None
    return SummaryWriter(log_dir=str(log_dir), purge_step=purge_step)


def _wandb_run(run_dir: Path, run_config: dict[str, Any]) -> tuple[Any, str]:
    """(a W&B run in RUN/wandb, the one line saying where it goes): offline unless the user set WANDB_MODE.

    Offline needs no account, no login prompt and no network; `wandb sync` uploads the folder later.
    W&B's own console lines are silenced (the caller prints ours) and its console capture is off.
    """
    try:
        import wandb
    except ImportError:
        raise TinyLMError("--wandb needs the wandb package: pip install wandb") from None
    # W&B suggests its LLM-call tracer (Weave) when it sees e.g. `openai` imported; a training run makes no such calls
    os.environ.setdefault("WANDB_DISABLE_WEAVE", "true")
    try:
        run = wandb.init(project=None if os.environ.get("WANDB_PROJECT") else "tinylm", dir=str(run_dir),
                         config=run_config, name=run_dir.name, resume="allow",
                         mode=None if os.environ.get("WANDB_MODE") else "offline",
                         settings=wandb.Settings(silent=True, console="off"))
    except wandb.errors.Error as exc:  # e.g. WANDB_MODE=online with no API key: one line, not a traceback
        raise TinyLMError(f"--wandb: {exc}") from None
    mode = run.settings.mode
    if mode in ("offline", "dryrun"):  # older releases call offline "dryrun"
        folder = run.settings.sync_dir
        return run, f"W&B: offline run in {folder} (upload it with: wandb sync {folder})"
    return run, "W&B: disabled (WANDB_MODE)" if mode == "disabled" else f"W&B: {run.url}"


class MetricsLogger:
    """Writes rows to metrics.jsonl (and optionally TensorBoard / W&B); inactive on non-zero ranks.

    `first_step`: the first step this invocation logs (0 fresh, the checkpoint's + 1 resumed), so TensorBoard
    hides what a resume redoes, as metrics.jsonl drops it. `notes`: one line per tracker saying where it writes.
    """

    def __init__(self, run_dir: str | Path, active: bool = True, tensorboard: str | Path | None = None,
                 wandb: bool = False, run_config: dict[str, Any] | None = None, first_step: int = 0) -> None:
        self.active = active
        self.path = Path(run_dir) / METRICS
        self.notes: list[str] = []
        self._file = None
        self._tb: Any = None
        self._wandb: Any = None
        if not active:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = self.path.open("a", encoding="utf-8")
        try:
            if tensorboard is not None:
                self._tb = _tensorboard_writer(Path(tensorboard), first_step)
                self.notes.append(f"TensorBoard: {tensorboard} (view it with: tensorboard --logdir {tensorboard})")
            if wandb:
                self._wandb, note = _wandb_run(Path(run_dir), run_config or {})
                self.notes.append(note)
        except BaseException:
            self.close()
            raise

    def log(self, row: dict[str, Any]) -> None:
        if not self.active or self._file is None:
            return
        self._file.write(json.dumps({k: _clean(v) for k, v in row.items()}) + "\n")
        self._file.flush()
        step = int(row.get("step", 0))
        numbers = {k: v for k, v in row.items() if isinstance(v, (int, float)) and k != "step"}
        if self._tb is not None:
            for key, value in numbers.items():
                self._tb.add_scalar(key, value, step)
            self._tb.flush()  # as metrics.jsonl: a TensorBoard open during the run sees each row as it comes
        if self._wandb is not None:
            self._wandb.log(numbers, step=step)

    def log_evaluation(self, step: int, tokens: int, scores: dict[str, float], samples: list[dict[str, Any]]) -> None:
        """An evaluation's row (when it scored anything) and the replies behind it."""
        if scores:
            self.log({"step": step, **scores, "tokens": tokens})
        self.log_samples(step, samples)

    def log_samples(self, step: int, samples: list[dict[str, Any]]) -> None:
        """Append the replies of step `step` to samples.jsonl (rank 0 only, like the rows)."""
        if not self.active or not samples:
            return
        with (self.path.parent / SAMPLES).open("a", encoding="utf-8") as f:
            f.write("".join(json.dumps({"step": step, **sample}, ensure_ascii=False) + "\n" for sample in samples))

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        if self._tb is not None:
            self._tb.close()
            self._tb = None
        if self._wandb is not None:
            self._wandb.finish()
            self._wandb = None
