"""The Inside page's JSON routes: each is what `tinylm inspect VIEW --json` prints, and every bad question a 4xx
JSON error with the reason while the studio keeps serving."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from inside_support import inside_root
from studio_support import studio
from tinylm.cli.main import main

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return inside_root(tmp_path_factory.mktemp("inside"))


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    capsys.readouterr()
    assert main(["inspect", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_every_view_answers_what_the_command_prints(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = str(root / "lm")
    prompt = "def alpha(beta):"
    with studio(root) as url:
        def get(view: str, **params: str) -> dict:
            reply = httpx.get(f"{url}/api/inside/{view}", params={"name": "lm", **params}, timeout=60)
            assert reply.status_code == 200, reply.text
            return reply.json()

        assert get("lens", prompt=prompt) == cli(capsys, "lens", "--checkpoint", run, "--prompt", prompt)
        assert get("attention", prompt=prompt) == cli(capsys, "attention", "--checkpoint", run, "--prompt", prompt)
        assert get("attribution", prompt=prompt) == cli(capsys, "attribution", "--checkpoint", run, "--prompt", prompt)
        assert get("patch", clean="return 12", corrupt="return 37") == cli(
            capsys, "patch", "--checkpoint", run, "--clean", "return 12", "--corrupt", "return 37")
        assert get("neurons", layer="1", neuron="2") == cli(capsys, "neurons", "--checkpoint", run, "--layer", "1",
                                                            "--neuron", "2")
        assert get("induction") == cli(capsys, "induction", "--checkpoint", run)
        assert get("lens", prompt=prompt, step="12") == get("lens", prompt=prompt)  # the newest checkpoint
        assert httpx.get(f"{url}/api/inside/steps", params={"name": "lm"}).json() == {"steps": [4, 8, 12]}
        snapshot = get("lens", prompt=prompt, step="4")  # a weights-only snapshot
        assert snapshot == cli(capsys, "lens", "--checkpoint", str(root / "lm" / "snapshots" / "checkpoints" /
                                                                  "step_00000004"), "--prompt", prompt)


def test_bad_questions_are_4xx_with_the_reason_and_the_studio_keeps_serving(root: Path) -> None:
    with studio(root) as url:
        def refused(view: str, status: int, **params: str) -> str:
            reply = httpx.get(f"{url}/api/inside/{view}", params=params, timeout=60)
            assert reply.status_code == status, reply.text
            return reply.json()["error"]["message"]

        assert "same token length" in refused("patch", 400, name="lm", clean="return 1", corrupt="return 1 + 2")
        assert "out of range" in refused("attention", 400, name="lm", prompt="x", layer="7")
        assert "not one" in refused("lens", 400, name="lm", prompt="x", target="alpha beta gamma")
        assert "reward model" in refused("lens", 409, name="scorer", prompt="x")
        assert "no checkpoint" in refused("lens", 404, name="lm", prompt="x", step="5")
        assert "prompt" in refused("lens", 422, name="lm")
        assert refused("lens", 404, name="nothing", prompt="x")
        assert httpx.get(f"{url}/api/inside/lens", params={"name": "lm", "prompt": "x"}).status_code == 200
