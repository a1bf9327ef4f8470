"""A run page's samples, evaluations and report card, read from the run's own files."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from studio_support import studio
from test_train_support import cli_args
from tinylm.cli.main import main
from tinylm.metrics import SAMPLES, read_samples
from tinylm.studio.run_files import samples_by_step

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("studio-files")
    assert main(cli_args(root / "run", "--max-steps", "3", "--sample-tokens", "8", "--prompt", "def")) == 0
    return root


def test_the_final_sample_and_the_evaluations_are_served(root: Path) -> None:
    evaluation = {"checkpoint": "step_00000003", "step": 3, "stage": "pretrain",
                  "scores": {"arith": {"exact_match": 0.25}}, "outcomes": {"arith": "0100"},
                  "samples": {"arith": [{"prompt": "1+1", "reply": "2", "ok": True}]}}
    (root / "run" / "evals.jsonl").write_text(json.dumps(evaluation) + "\n")
    with studio(root) as url:
        samples = httpx.get(f"{url}/api/samples", params={"name": "run"}).json()
        evals = httpx.get(f"{url}/api/evaluations", params={"name": "run"}).json()
    written = read_samples(root / "run")
    assert samples == {"steps": [3], "samples": {"3": [{"prompt": "def", "reply": written[0]["reply"]}]}}
    assert written[0]["reply"]  # eight sampled tokens
    assert evals["evaluations"][0]["scores"] == evaluation["scores"] and "outcomes" not in evals["evaluations"][0]


def test_the_report_card_is_built_on_request_and_served(root: Path) -> None:
    with studio(root) as url:
        assert httpx.get(f"{url}/api/report", params={"name": "run"}).status_code == 404
        assert not httpx.get(f"{url}/api/evaluations", params={"name": "run"}).json()["report"]
        built = httpx.post(f"{url}/api/report", json={"name": "run"}, timeout=120)
        assert built.status_code == 200, built.text
        card = httpx.get(f"{url}/api/report", params={"name": "run"})
        assert card.status_code == 200 and card.headers["content-type"].startswith("text/html")
        assert "<html" in card.text and "data:image/png;base64," in card.text  # self-contained: figures inlined
        assert httpx.get(f"{url}/api/evaluations", params={"name": "run"}).json()["report"]
        assert httpx.post(f"{url}/api/report", json={"name": "../run"}).status_code == 404


def test_the_first_steps_samples_are_kept_next_to_the_newest(tmp_path: Path) -> None:
    rows = [{"step": step, "prompt": "p", "reply": f"r{step}", "verified": step > 50} for step in range(0, 100, 2)]
    (tmp_path / SAMPLES).write_text("".join(json.dumps(r) + "\n" for r in rows) + "not json\n")
    shown = samples_by_step(tmp_path, steps=5)
    assert shown["steps"] == [0, 92, 94, 96, 98]  # how it started, and the latest answers
    assert shown["samples"]["98"] == [{"prompt": "p", "reply": "r98", "verified": True}]
