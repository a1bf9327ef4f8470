"""metrics.jsonl: one JSON object per logged step or evaluation, appended and flushed as it happens.

A line-per-record file survives a crash (every finished line is valid), can be tailed while the run
goes, and is read back by `tinylm plot` and by tests. Python's `json` writes floats with `repr`,
which round-trips exactly, so losses in the file are the losses the run computed, bit for bit.
TensorBoard and Weights & Biases receive the same rows, but only when installed and asked for.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tinylm.errors import TinyLMError

METRICS = "metrics.jsonl"


def _clean(value: Any) -> Any:
    """JSON has no NaN/inf; write them as strings so the file stays standard JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


NUMERIC_FIELDS = ("loss", "lr", "tokens", "tokens_per_s", "mfu", "grad_norm", "elapsed_s", "dev_loss", "dev_bpb")
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


def truncate_after(run_dir: str | Path, step: int) -> None:
    """Drop rows past `step`: a resumed run redoes those steps and must not log them twice."""
    path = Path(run_dir) / METRICS
    if not path.is_file():
        return
    keep = [row for row in read_metrics(run_dir) if int(row.get("step", 0)) <= step]
    tmp = path.with_suffix(".jsonl.tmp")
    tmp.write_text("".join(json.dumps(row) + "\n" for row in keep), encoding="utf-8")
    tmp.replace(path)


class MetricsLogger:
    """Writes rows to metrics.jsonl (and optionally TensorBoard / W&B); inactive on non-zero ranks."""

    def __init__(self, run_dir: str | Path, active: bool = True, tensorboard: bool = False,
                 wandb: bool = False, run_config: dict[str, Any] | None = None) -> None:
        self.active = active
        self.path = Path(run_dir) / METRICS
        self._file = None
        self._tb: Any = None
        self._wandb: Any = None
        if not active:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = self.path.open("a", encoding="utf-8")
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:
                raise TinyLMError("--tensorboard needs the tensorboard package: pip install tensorboard") from None
            self._tb = SummaryWriter(log_dir=str(Path(run_dir) / "tensorboard"))
        if wandb:
            try:
                import wandb as wandb_module
            except ImportError:
                raise TinyLMError("--wandb needs the wandb package: pip install wandb") from None
            self._wandb = wandb_module.init(project="tinylm", dir=str(run_dir), config=run_config or {},
                                            name=Path(run_dir).name, resume="allow")

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
        if self._wandb is not None:
            self._wandb.log(numbers, step=step)

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
