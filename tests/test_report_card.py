"""The report card: report.md and a self-contained report.html rebuilt from a run folder alone, with the
model's parameter count, its lineage, the training figures, the curves as embedded PNGs and the eval scores."""

from __future__ import annotations

import base64
import re
import shutil
from pathlib import Path

import pytest

from eval_support import TASK, sft_run
from tinylm.checkpoint import load_model
from tinylm.cli.main import main
from tinylm.errors import TinyLMError
from tinylm.evaluate.report_card import REPORT_HTML, REPORT_MD, curves_section, write_report_card
from tinylm.metrics import read_metrics
from tinylm.stages import report_curves

pytestmark = pytest.mark.usefixtures("one_thread")


def test_card_shows_model_lineage_training_and_scores(tmp_path: Path) -> None:
    run = Path(shutil.copytree(sft_run(), tmp_path / "sft"))
    assert main(["eval", "--checkpoint", str(run), "--tasks", f"{TASK},prefs:{TASK}", "--examples", "4",
                 "--max-new-tokens", "4"]) == 0  # eval appends its scores and rebuilds the card
    markdown = (run / REPORT_MD).read_text()
    model, _, _ = load_model(run)
    assert f"| parameters | {model.num_params():,} |" in markdown
    assert "pretrain -> sft" in markdown
    steps = [r for r in read_metrics(run) if "tokens_per_s" in r]
    assert f"| tokens | {steps[-1]['tokens']:,} |" in markdown
    assert f"| sft step 6 | prefs:{TASK} | preference_accuracy |" in markdown
    assert "## Samples" in markdown and "What is" in markdown
    for name in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", markdown):
        assert (run / name).read_bytes().startswith(b"\x89PNG")


def test_html_is_self_contained(tmp_path: Path) -> None:
    run = Path(shutil.copytree(sft_run(), tmp_path / "sft"))
    page = write_report_card(run, report_curves).read_text()
    assert page == (run / REPORT_HTML).read_text()
    assert not re.search(r"(src|href)=\"(?!data:)", page)  # nothing fetched: no links, no external images
    images = re.findall(r'src="data:image/png;base64,([^"]+)"', page)
    assert images and all(base64.b64decode(data).startswith(b"\x89PNG") for data in images)
    assert "pretrain -&gt; sft" in page


def test_report_run_rebuilds_the_card(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = Path(shutil.copytree(sft_run(), tmp_path / "sft"))
    assert not (run / REPORT_MD).exists()
    assert main(["report", "--run", str(run)]) == 0
    assert f"report card: {run / REPORT_HTML}" in capsys.readouterr().out
    assert (run / REPORT_MD).read_text().startswith("# sft: sft checkpoint step_00000006")
    assert main(["report", "--run", str(tmp_path / "absent")]) == 1
    assert "run folder not found" in capsys.readouterr().err


def test_a_folder_that_is_not_a_run_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(TinyLMError, match="run folder not found"):
        write_report_card(tmp_path / "nothing", report_curves)
    (tmp_path / "empty").mkdir()
    with pytest.raises(TinyLMError, match="no checkpoint in"):
        write_report_card(tmp_path / "empty", report_curves)


def test_an_rl_card_leads_with_what_the_stage_optimises() -> None:
    """GRPO's loss is 0 by construction (advantages centred per group): the card leads with reward and held-out
    exact-match, drops that loss, and keeps PPO's value loss (a regression that does fall) last."""
    rl = [{"step": 0, "exact_match": 0.0}, *({"step": s, "loss": 1e-7 * (-1) ** s, "reward": 0.1 * s,
                                               "accuracy": 0.05 * s, "tokens_per_s": 1.0} for s in (1, 2)),
          {"step": 2, "exact_match": 0.25}]
    assert [name for name, _ in curves_section(rl, report_curves("rl")).figures] == ["reward", "evaluation"]
    assert all("loss" not in keys for keys in report_curves("rl").values())
    ppo = [*rl, {"step": 2, "value_loss": 0.4, "loss": 0.1}]
    figures = curves_section(ppo, report_curves("rl")).figures
    assert [name for name, _ in figures] == ["reward", "evaluation", "value_loss"]
    sft = [{"step": 1, "loss": 2.0}, {"step": 1, "dev_loss": 2.1, "exact_match": 0.0}]
    assert [name for name, _ in curves_section(sft, report_curves("sft")).figures] == ["loss", "evaluation"]
