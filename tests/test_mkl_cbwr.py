"""The `tinylm` command runs MKL in its strict reproducibility mode (`MKL_CBWR=AUTO,STRICT`) unless told otherwise.

Without it MKL's fp32 matmul sums depend on how many threads MKL takes for a call, and one command
gave different losses from run to run (issue 23). MKL reads the variable at its first call, so only
a fresh process can show it: each test runs the command in one, with `MKL_VERBOSE` on, where MKL
prints the mode of every call (`CNR:AUTO,STRICT`).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from test_train_support import cli_args
from tinylm.runtime import mkl_cbwr

pytestmark = pytest.mark.skipif(not torch.backends.mkl.is_available(), reason="torch without MKL")


def run_command(tmp_path: Path, command: list[str], **env: str) -> str:
    """One 1-step `tinylm train` in a fresh process; its stdout and stderr together."""
    clean = {k: v for k, v in os.environ.items() if k not in (mkl_cbwr.VARIABLE, mkl_cbwr.MARKER)}
    args = cli_args(tmp_path / "run", "--max-steps", "1")
    result = subprocess.run([*command, *args], capture_output=True, text=True, timeout=300,
                            env={**clean, "MKL_VERBOSE": "1", **env})
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout + result.stderr


def mkl_modes(output: str) -> set[str]:
    return {line.rsplit("CNR:", 1)[1].split()[0] for line in output.splitlines() if "MKL_VERBOSE" in line and
            "CNR:" in line}


def test_a_command_run_sets_the_strict_mode_and_says_so(tmp_path: Path) -> None:
    output = run_command(tmp_path, [sys.executable, "-m", "tinylm"])
    assert mkl_modes(output) == {"AUTO,STRICT"}  # every MKL call of the run, the first one included
    assert "numerics: MKL_CBWR=AUTO,STRICT (tinylm's default" in output


def test_the_users_own_value_wins(tmp_path: Path) -> None:
    script = Path(sys.executable).with_name("tinylm")  # the console script, which skips __main__.py
    command = [str(script)] if script.is_file() else [sys.executable, "-m", "tinylm"]
    output = run_command(tmp_path, command, MKL_CBWR="AUTO")
    assert mkl_modes(output) == {"AUTO"} and "numerics: MKL_CBWR=AUTO (yours)" in output


def test_a_process_that_loaded_torch_first_is_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """A library caller (this test process) may have run MKL already: setting it now would be a claim, not a fact."""
    monkeypatch.delenv(mkl_cbwr.VARIABLE, raising=False)
    monkeypatch.delenv(mkl_cbwr.MARKER, raising=False)
    assert not mkl_cbwr.set_default() and mkl_cbwr.VARIABLE not in os.environ
    assert mkl_cbwr.describe().startswith("numerics: MKL_CBWR unset")  # type: ignore[union-attr]


def test_the_serving_benchmark_measures_its_reference_under_the_servers_numerics() -> None:
    """bench_serve compares `tinylm serve` (the command: strict mode) with an engine in its own process: that process
    must set the mode before torch loads, or the reference decodes without it (a one-row GEMM runs up to 1.7x
    faster there) and the ratio compares two numerics."""
    clean = {k: v for k, v in os.environ.items() if k not in (mkl_cbwr.VARIABLE, mkl_cbwr.MARKER)}
    benchmarks = Path(__file__).resolve().parents[1] / "benchmarks"
    probe = (f"import sys; sys.path.insert(0, {str(benchmarks)!r}); import bench_serve, os; "
             "print(os.environ.get('MKL_CBWR'))")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, env=clean)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == mkl_cbwr.DEFAULT
