"""Measurements worth keeping: one small JSON file per kind under `<tinylm home>/cache/`.

A policy that decides by measuring (bf16 or fp32, compile or not) must not pay for the measurement on
every run, yet must measure again on another machine: the CPU can change from one session to the next
while the home folder stays. So every entry is keyed by the machine (`machine_key`: CPU model, its
flags, the thread count, the torch version) and by what was measured. A cache that cannot be read or
written never stops a run: it is only a shortcut, and the measurement is simply taken again. A
measurement taken while other work keeps every core busy is used for this run but not kept: under
heavy load bf16 and fp32 passes can come out in any order, and a cached wrong answer would outlive
the load.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import tempfile
import time
from collections.abc import Callable
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


def best_of_alternating(first: Callable[[], float], second: Callable[[], float], repeats: int, budget_s: float,
                        began: float) -> tuple[float, float]:
    """Best seconds of each of two timed passes, run in turn after one warm-up of each.

    Best, not median: load from other processes only ever slows a pass down, so the fastest pass is
    the closest to what the machine can do, and alternating makes a burst of load slow both alike.
    No new pair starts once `budget_s` has passed since `began` (a slow machine gets fewer repeats).
    """
    first(), second()  # warm-up: allocator, kernel selection, thread pool
    pairs = [(first(), second())]
    while len(pairs) < repeats and time.perf_counter() - began < budget_s:
        pairs.append((first(), second()))
    return min(a for a, _ in pairs), min(b for _, b in pairs)


def config_digest(config: Any, exclude: tuple[str, ...] = ()) -> str:
    """10 hex digits naming a model config's fields (less `exclude`): part of a measurement's cache key."""
    fields = {k: v for k, v in config.to_dict().items() if k not in exclude}
    return hashlib.sha256(json.dumps(fields, sort_keys=True, default=str).encode()).hexdigest()[:10]


def machine_busy() -> bool:
    """More runnable work than cores over the last minute (Unix load average; never busy where unknown)."""
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
    entry = load_entry(kind, key)
    try:
        return None if entry is None else {name: float(entry[name]) for name in names}
    except (KeyError, TypeError, ValueError):
        return None


def store_entry(kind: str, key: str, value: dict[str, Any]) -> bool:
    """Record a measurement, stamped with its time, atomically (a reader never sees half a file).

    Returns False if it was not kept (a busy machine, an unwritable home).
    """
    if machine_busy():
        return False
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
