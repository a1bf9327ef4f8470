"""Suite-wide safety: no test touches the real home folder or the network, plots need no display."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import torch

os.environ.setdefault("MPLBACKEND", "Agg")
for variable in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
    os.environ[variable] = "1"


MAX_WORKERS = 4  # each pytest-xdist worker holds torch and transformers (about 1 GB); past 4 the gain is small


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto` (pyproject's addopts): one worker per core, at most MAX_WORKERS."""
    return max(1, min(os.cpu_count() or 1, MAX_WORKERS))


@pytest.fixture(autouse=True)
def _isolated_tinylm_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test gets a private TINYLM_HOME (prepared data, caches); a test may set its own on top."""
    monkeypatch.setenv("TINYLM_HOME", str(tmp_path_factory.mktemp("tinylm_home")))


@pytest.fixture
def one_thread() -> Iterator[None]:
    """Tiny matmuls: one thread is faster than two that wait for each other on a busy machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
