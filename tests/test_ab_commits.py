"""benchmarks/ab_commits.py: two commits' benchmarks side by side (what issue 23's last criterion was measured with)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "ab_commits.py"


def _module():
    spec = importlib.util.spec_from_file_location("ab_commits", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_metrics_are_read_from_both_benchmark_layouts() -> None:
    """bench_train prints a JSON line per preset, bench_decode one object keyed by preset: both give the same names."""
    ab = _module()
    train = "\n".join(json.dumps({"preset": p, "train_tokens_per_s": t, "train_ratio_vs_transformers": r, "mfu": 0.5})
                      for p, t, r in (("tiny", 1000.0, 1.1), ("13m", 200.0, 1.3)))
    assert ab.read_metrics("train", train) == {"train tiny tokens/s": 1000.0, "train tiny vs transformers": 1.1,
                                               "train 13m tokens/s": 200.0, "train 13m vs transformers": 1.3}
    decode = json.dumps({"machine": {}, "tiny": {"cached_tokens_per_s": 900.0, "ratio_vs_transformers": 2.5},
                         "13m": {"cached_tokens_per_s": 250.0, "ratio_vs_transformers": 1.2}})
    assert ab.read_metrics("decode", decode) == {"decode tiny tokens/s": 900.0, "decode tiny vs transformers": 2.5,
                                                 "decode 13m tokens/s": 250.0, "decode 13m vs transformers": 1.2}


def test_summary_gives_each_sides_median_and_their_ratio() -> None:
    ab = _module()
    values = {"old": {"m": [1.0, 3.0, 2.0, 10.0]}, "new": {"m": [2.0, 4.0, 3.0]}}
    summary = ab.summarize(values, "old", "new")["m"]
    assert summary["old"] == {"median": 2.5, "values": [1.0, 3.0, 2.0, 10.0]}
    assert summary["new"]["median"] == 3.0
    assert summary["after_over_before"] == 1.2  # 3.0 / 2.5


def test_each_process_starts_with_the_numerics_its_commits_command_sets(tmp_path: Path) -> None:
    """Where the commit has tinylm.runtime.start_env, MKL_CBWR is set before the bench runs; where not, left unset."""
    ab = _module()
    probe = tmp_path / "probe.py"
    probe.write_text("import os, sys\nprint(os.environ.get('MKL_CBWR', 'unset'), sys.argv[1:])\n")
    env = {k: v for k, v in os.environ.items() if k not in ("MKL_CBWR", "TINYLM_DEFAULT_MKL_CBWR")}

    def launched(source: Path) -> str:
        done = subprocess.run([sys.executable, "-c", ab.LAUNCHER, str(probe), "--quick"], capture_output=True,
                              text=True, env={**env, "PYTHONPATH": str(source)}, check=True)
        return done.stdout.strip()

    assert launched(ROOT / "src") == "AUTO,STRICT ['--quick']"
    old = tmp_path / "old" / "src"
    (old / "tinylm").mkdir(parents=True)
    (old / "tinylm" / "__init__.py").write_text("")  # a commit from before start_env existed
    assert launched(old) == "unset ['--quick']"


def test_an_unknown_benchmark_is_one_line_and_exit_1() -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), "HEAD", "HEAD", "--benches", "train,serve"],
                          capture_output=True, text=True)
    assert done.returncode == 1 and "--benches takes train, decode" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


@pytest.mark.slow  # ~25 s: the decode benchmark twice
def test_two_commits_are_benchmarked_in_worktrees_that_are_removed_after() -> None:
    if not (ROOT / ".git").exists():
        pytest.skip("needs the git checkout")
    before = subprocess.run(["git", "-C", str(ROOT), "worktree", "list"], capture_output=True, text=True).stdout
    done = subprocess.run([sys.executable, str(SCRIPT), "HEAD", "HEAD", "--rounds", "1", "--quick", "--benches",
                           "decode"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)
    assert result["before"] == result["after"] and result["rounds"] == 1
    assert set(result["metrics"]) == {"decode tiny tokens/s", "decode tiny vs transformers",
                                      "decode 13m tokens/s", "decode 13m vs transformers"}
    for metric in result["metrics"].values():
        assert metric["before"]["values"][0] > 0 and metric["after"]["values"][0] > 0
        assert metric["after_over_before"] > 0
    assert subprocess.run(["git", "-C", str(ROOT), "worktree", "list"], capture_output=True,
                          text=True).stdout == before
