"""`tinylm report`: exact counts from the command line, meta-device builds, one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tinylm.cli.commands.report import build_report
from tinylm.cli.main import main
from tinylm.presets import PRESETS, preset_config


def test_report_13m_classic_json_from_the_command_line() -> None:
    out = subprocess.run([sys.executable, "-m", "tinylm", "report", "--preset", "13m", "--arch", "classic", "--json"],
                         capture_output=True, text=True, check=True).stdout
    report = json.loads(out)
    assert report["params"] == 13_142_656
    assert {"params", "non_embedding_params", "flops_per_token"} <= report.keys()


def test_report_tiny_modern_matches_llama_count(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", "--preset", "tiny", "--arch", "modern", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["params"] == 1_311_872
    assert report["kv_cache_bytes_per_token"] == 4 * 2 * 2 * 32 * 4  # blocks * (k,v) * kv heads * head_dim * fp32


@pytest.mark.parametrize("arch", ["classic", "modern"])
def test_every_preset_reports_on_meta_without_memory(arch: str) -> None:
    for name in PRESETS:
        report = build_report(preset_config(name, arch), batch_size=1)
        assert report["params"] > 0 and report["flops_per_token"] > 6 * report["non_embedding_params"]
        memory = report["memory_bytes"]
        assert memory["weights"] == 4 * report["params"] and memory["optimizer"] == 8 * report["params"]
    assert build_report(preset_config("3b", arch), batch_size=1)["params"] > 2_500_000_000


def test_moe_override_reports_fewer_active_params(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", "--preset", "tiny", "--set", "n_experts=8", "--set", "n_experts_per_token=2", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["active_params"] < report["params"]


def test_human_readable_report(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", "--preset", "13m", "--arch", "classic"]) == 0
    assert "13,142,656" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["report", "--set", "n_kv_head=3"], "invalid config: n_kv_head=3: must divide n_head=4"),
        (["report", "--preset", "huge"], "unknown preset 'huge'"),
        (["report", "--set", "colour=blue"], "unknown model field 'colour'"),
        (["report", "--checkpoint", "/nonexistent/run"], "checkpoint not found: /nonexistent/run"),
        (["report", "--set", "arch=classic"], "arch is its own option: use --arch classic, not --set arch=classic"),
        (["report", "--preset", "13m", "--set", "arch=modern"], "use --arch modern"),
    ],
)
def test_bad_input_is_one_clear_line(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_report_of_a_run_folder_reads_its_newest_checkpoint(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    from tinylm.checkpoint import save_checkpoint
    from tinylm.models.factory import build_model

    config = preset_config("tiny", "modern", n_blocks=1, vocab_size=256)
    save_checkpoint(tmp_path / "run", 5, build_model(config), config)
    assert main(["report", "--checkpoint", str(tmp_path / "run"), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["config"] == config.to_dict()


def test_config_file_sets_options(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "report.toml").write_text('preset = "13m"\narch = "classic"\njson = true\n')
    assert main(["report", "--config", str(tmp_path / "report.toml")]) == 0
    assert json.loads(capsys.readouterr().out)["params"] == 13_142_656
    (tmp_path / "bad.json").write_text('{"no_such_option": 1}')
    assert main(["report", "--config", str(tmp_path / "bad.json")]) == 1
    assert "unknown option(s)" in capsys.readouterr().err
