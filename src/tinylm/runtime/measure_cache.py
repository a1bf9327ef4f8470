"""Measurements worth keeping: one small JSON file per kind under `<tinylm home>/cache/`.

A policy that decides by measuring (bf16 or fp32, compile or not) must not pay for the measurement on
every run, yet must measure again on another machine: the CPU can change from one session to the next
while the home folder stays. So every entry is keyed by the machine (`machine_key`: CPU model, its
flags, the thread count, the torch version) and by what was measured. A cache that cannot be read or
written never stops a run: it is only a shortcut, and the measurement is simply taken again.

A decision is taken once per machine and shape and kept, busy machine or not: measuring again on
every busy run costs seconds each time and may decide differently, and two runs of one command must
compute the same thing. What makes a busy machine's decision safe to keep is the rule, not the
moment: `best_of_alternating` reports how far its ratio could move (`Alternated.spread`), and a
ratio that does not clear its threshold by more than that is "too close to call", decided (and
kept) as the safe default (`verdict`).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tinylm.paths import tinylm_home


def cache_file(kind: str) -> Path:
    return tinylm_home() / "cache" / f"{kind}.json"


def cpu_info() -> dict[str, str]:
    """The first processor's fields from /proc/cpuinfo (empty where there is none, e.g. macOS)."""
    info: dict[str, str] = {}
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return info
    for line in text.splitlines():
        if not line.strip():
            if info:
                break
            continue
        name, _, value = line.partition(":")
        info.setdefault(name.strip().lower(), value.strip())
    return info


def cpu_model_name() -> str:
    info = cpu_info()
    return info.get("model name") or info.get("cpu model") or platform.processor() or platform.machine()


def machine_key() -> str:
    """What makes a timing valid: this CPU model with these features, these threads, this torch."""
    import torch

    info = cpu_info()
    features = " ".join(sorted((info.get("flags") or info.get("features") or "").split()))
    digest = hashlib.sha256(features.encode()).hexdigest()[:10]
    return f"{cpu_model_name()} | flags {digest} | {torch.get_num_threads()} threads | torch {torch.__version__}"


MIN_PAIRS = 3  # a budget never cuts below this: one burst of load must not be the only evidence


def clock() -> float:
    """The timer every measurement reads, looked up at each call so a test can make it noisy."""
    return time.perf_counter()


@dataclass(frozen=True)
class Alternated:
    """Best seconds of two passes timed in turn; `ratio` > 1 means the second is faster.

    `spread` is twice how far the ratio moves when either side's second-best pass stands in for its
    best. Two clean passes of each side agree and keep it small; load that reached the best passes
    widens it. Twice: the gap to the second-best is one draw of the noise, and the best pass itself
    is off from the machine's true speed by about as much again.
    """

    first_s: float
    second_s: float
    spread: float = 0.0

    @property
    def ratio(self) -> float:
        return self.first_s / max(self.second_s, 1e-12)


def best_of_alternating(first: Callable[[], object], second: Callable[[], object], repeats: int,
                        budget_s: float) -> Alternated:
    """Time `first` and `second` in turn, after one warm-up of each: the best of each and the ratio's spread.

    Best, not median: load from other processes only ever slows a pass down, so the fastest pass is
    the closest to what the machine can do, and alternating makes a burst of load slow both alike.
    At least two pairs (a spread needs a second-best), `MIN_PAIRS` whatever the budget; past that no
    new pair starts once `budget_s` has passed (a slow machine gets fewer repeats, not a long wait).
    """

    def timed(run: Callable[[], object]) -> float:
        start = clock()
        run()
        return clock() - start

    wanted = max(2, repeats)
    floor = min(MIN_PAIRS, wanted)
    first(), second()  # warm-up: allocator, kernel selection, thread pool
    began = clock()
    pairs: list[tuple[float, float]] = []
    while len(pairs) < wanted and (len(pairs) < floor or clock() - began < budget_s):
        pairs.append((timed(first), timed(second)))
    a = sorted(max(t, 1e-12) for t, _ in pairs)
    b = sorted(max(t, 1e-12) for _, t in pairs)
    ratio = a[0] / b[0]
    return Alternated(a[0], b[0], 2 * max(ratio - a[0] / b[1], a[1] / b[0] - ratio))


def verdict(ratio: float, spread: float, margin: float) -> str:
    """How `ratio` stands to `margin`: "pays" (clear of it by more than the spread), "noise" or "below".

    Only "pays" leaves the safe default: a decision the noise could flip would not be reproducible.
    """
    if ratio - spread > margin:
        return "pays"
    return "noise" if ratio + spread >= margin else "below"


def config_digest(config: Any, exclude: tuple[str, ...] = ()) -> str:
    """10 hex digits naming a model config's fields (less `exclude`): part of a measurement's cache key."""
    fields = {k: v for k, v in config.to_dict().items() if k not in exclude}
    return hashlib.sha256(json.dumps(fields, sort_keys=True, default=str).encode()).hexdigest()[:10]


def machine_busy() -> bool:
    """More runnable work than cores over the last minute (Unix load average; never busy where unknown).

    Said in a measured choice's reason, next to what the measurement took; it no longer stops caching.
    """
    try:
        return os.getloadavg()[0] > (os.cpu_count() or 1)
    except (AttributeError, OSError):
        return False


def load_entry(kind: str, key: str) -> dict[str, Any] | None:
    """The stored measurement for `key` on this machine, or None (absent, unreadable or corrupt)."""
    try:
        entries = json.loads(cache_file(kind).read_text(encoding="utf-8"))
        entry = entries.get(machine_key(), {}).get(key)
    except (OSError, ValueError, AttributeError):
        return None
    return entry if isinstance(entry, dict) else None


def load_numbers(kind: str, key: str, names: tuple[str, ...]) -> dict[str, float] | None:
    """The stored entry's `names` as floats, or None (absent, or written by another version: measure again)."""
    return _numbers(load_entry(kind, key), names)


def _numbers(entry: dict[str, Any] | None, names: tuple[str, ...]) -> dict[str, float] | None:
    try:
        return None if entry is None else {name: float(entry[name]) for name in names}
    except (KeyError, TypeError, ValueError):
        return None


@dataclass(frozen=True)
class Decided:
    """A decision read back from the cache: the value's name, its reason, the numbers it was taken on."""

    value: str
    reason: str
    numbers: dict[str, float]


def load_decision(kind: str, key: str, names: tuple[str, ...], values: tuple[str, ...]) -> Decided | None:
    """The decision stored for `key` on this machine, or None (absent, another version's, or a value not in `values`).

    The stored value is what the run takes, not a re-decision from the numbers: decided once, kept.
    """
    entry = load_entry(kind, key)
    numbers = _numbers(entry, names)
    if entry is None or numbers is None:
        return None
    value, reason = entry.get("value"), entry.get("reason")
    if value not in values or not isinstance(reason, str):
        return None
    return Decided(value, reason, numbers)


def measured_now(wall_s: float, kept: bool) -> str:
    """The end of a fresh decision's reason: what the measurement took, on what machine, whether it was kept."""
    busy = ", machine busy" if machine_busy() else ""
    return f"measured now in {wall_s:.1f} s{busy}{'' if kept else ', not cached'}"


def store_decision(kind: str, key: str, value: str, reason: str, numbers: dict[str, float]) -> bool:
    """Keep a decision with its reason (without "measured now in ...") and its numbers; False if not written."""
    return store_entry(kind, key, {"value": value, "reason": reason, **numbers})


def store_entry(kind: str, key: str, value: dict[str, Any]) -> bool:
    """Record a measurement, stamped with its time, atomically (a reader never sees half a file).

    Kept busy machine or not (the module's docstring says why); returns False if the home is unwritable.
    """
    path = cache_file(kind)
    try:
        entries = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
        if not isinstance(entries, dict):
            entries = {}
    except (OSError, ValueError):
        entries = {}
    entries.setdefault(machine_key(), {})[key] = {**value, "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S")}
    temporary: Path | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=path.parent, suffix=".tmp", delete=False, encoding="utf-8") as f:
            temporary = Path(f.name)
            json.dump(entries, f, indent=1, sort_keys=True)
        os.replace(temporary, path)
    except OSError:
        if temporary is not None:
            temporary.unlink(missing_ok=True)
        return False
    return True
