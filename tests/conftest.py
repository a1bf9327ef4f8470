"""Suite-wide safety: no test touches the real home folder or the network, plots need no display."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("MPLBACKEND", "Agg")
for variable in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
    os.environ[variable] = "1"


@pytest.fixture(autouse=True)
def _isolated_tinylm_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test gets a private TINYLM_HOME (prepared data, caches); a test may set its own on top."""
    monkeypatch.setenv("TINYLM_HOME", str(tmp_path_factory.mktemp("tinylm_home")))
