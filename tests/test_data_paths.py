"""Where prepared data goes by default: $TINYLM_HOME, else the XDG data folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from tinylm.data.folders import default_data_dir
from tinylm.paths import tinylm_home


def test_tinylm_home_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TINYLM_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert tinylm_home() == tmp_path / "home"
    assert default_data_dir() == tmp_path / "home" / "data" / "pystdlib-bpe4096"
    assert default_data_dir("pystdlib", "bpe", 8192).name == "pystdlib-bpe8192"
    assert default_data_dir("pystdlib", "r50k", 4096).name == "pystdlib-r50k"


def test_xdg_then_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TINYLM_HOME")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert tinylm_home() == tmp_path / "xdg" / "tinylm"
    monkeypatch.delenv("XDG_DATA_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    assert tinylm_home() == tmp_path / "user" / ".local" / "share" / "tinylm"


def test_slugs_are_safe_and_distinct(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    hub = default_data_dir("hf:roneneldan/TinyStories", "bpe", 4096).name
    assert hub == "hf-roneneldan-TinyStories-default-train-bpe4096"
    assert default_data_dir("hf:roneneldan/TinyStories::train").name == hub
    one, two = default_data_dir(str(tmp_path / "a" / "data")), default_data_dir(str(tmp_path / "b" / "data"))
    assert one != two and one.name.startswith("data-") and two.name.startswith("data-")
    assert default_data_dir("a/data") == one  # relative and absolute spellings agree
    tok = default_data_dir("pystdlib", str(tmp_path / "my tok.json")).name
    assert tok.startswith("pystdlib-my-tok-") and " " not in tok
