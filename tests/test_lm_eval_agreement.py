"""The local multiple-choice tasks give the same accuracies, and the same log-likelihoods, in `tinylm eval`
and in the field's harness, with the task configs shipped in evals/lm_eval/ (offline, on the synthetic
files in evals/data/): `lm_eval --model hf` on the exported folder, and `lm_eval --model local-completions`
against `tinylm serve` (the server scores the prompts; only the tokenizer comes from the exported folder)."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from eval_support import base_run

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_thread")]
REPO = Path(__file__).parent.parent
LAYOUTS = ("hellaswag", "arc", "mmlu")
NAMES = [f"tinylm_synthetic_{layout}" for layout in LAYOUTS]


def run_lm_eval(model: str, model_args: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                **options: Any) -> dict[str, Any]:
    """lm-eval's results and per-request samples on the three synthetic tasks, from the repository root."""
    datasets = pytest.importorskip("datasets")
    lm_eval = pytest.importorskip("lm_eval")
    from lm_eval.tasks import TaskManager

    monkeypatch.chdir(REPO)  # the task configs name their data relative to the repository root
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "datasets"))
    return lm_eval.simple_evaluate(model=model, model_args=model_args, tasks=NAMES, log_samples=True,
                                   task_manager=TaskManager(include_path=str(REPO / "evals" / "lm_eval")),
                                   **options)


def assert_agrees_with_tinylm_eval(theirs: dict[str, Any]) -> None:
    """acc and acc_norm equal `tinylm eval`'s; each choice's (log-likelihood, greedy) equals the scorer's."""
    from tinylm.checkpoint import load_model
    from tinylm.evaluate.loglikelihood import score_continuations
    from tinylm.evaluate.multiple_choice import DELIMITER, encode_pair, load_questions
    from tinylm.evaluate.scores import evaluate_checkpoint
    from tinylm.evaluate.tasks import parse_tasks

    specs = ",".join(f"{layout}:evals/data/synthetic_{layout}.jsonl" for layout in LAYOUTS)
    ours = evaluate_checkpoint(base_run(), parse_tasks(specs)).scores()
    model, tokenizer, _ = load_model(base_run())
    for layout, name in zip(LAYOUTS, NAMES, strict=True):
        result = theirs["results"][name]
        mine = ours[f"{layout}:evals/data/synthetic_{layout}.jsonl"]
        assert (mine["acc"], mine["acc_norm"]) == (result["acc,none"], result["acc_norm,none"])
        questions = load_questions(layout, f"evals/data/synthetic_{layout}.jsonl")
        scored = score_continuations(model, [encode_pair(tokenizer, q.context, DELIMITER + choice)
                                             for q in questions for choice in q.choices])
        for sample in theirs["samples"][name]:
            first = sum(len(q.choices) for q in questions[: sample["doc_id"]])
            expected = scored[first : first + len(questions[sample["doc_id"]].choices)]
            assert [resp[0][0] for resp in sample["resps"]] == pytest.approx([s.logprob for s in expected], abs=1e-4)
            assert [bool(resp[0][1]) for resp in sample["resps"]] == [s.greedy for s in expected]


def test_lm_eval_hf_equals_tinylm_eval(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tinylm.interop.hf_export import export_checkpoint

    folder, _ = export_checkpoint(base_run(), tmp_path / "hf")
    theirs = run_lm_eval("hf", f"pretrained={folder},dtype=float32", tmp_path, monkeypatch, device="cpu",
                         batch_size=8)
    assert_agrees_with_tinylm_eval(theirs)


@contextmanager
def tinylm_serve(run_dir: Path, name: str) -> Iterator[str]:
    """The base URL of a real `tinylm serve` process on a free loopback port, stopped with SIGTERM."""
    process = subprocess.Popen([sys.executable, "-m", "tinylm", "serve", "--checkpoint", str(run_dir), "--port", "0",
                                "--threads", "1", "--model-name", name], stderr=subprocess.PIPE, text=True)
    try:
        banner = process.stderr.readline()  # printed once the model is loaded and the port is listening
        found = re.search(r"at (http://127\.0\.0\.1:\d+)/v1", banner)
        assert found, f"tinylm serve did not start: {banner}{process.stderr.read() if process.poll() else ''}"
        yield found.group(1)
        process.send_signal(signal.SIGTERM)
        assert process.wait(60) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)


def test_lm_eval_local_completions_against_tinylm_serve_equals_tinylm_eval(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Token ids go over the wire (tokenized_requests, lm-eval's default), so nothing is re-tokenised; max_length
    is the window, so lm-eval's input plus the one token it asks for always fit."""
    from tinylm.checkpoint import load_model
    from tinylm.interop.hf_export import export_checkpoint

    folder, _ = export_checkpoint(base_run(), tmp_path / "hf")
    window = load_model(base_run())[0].config.context_length
    with tinylm_serve(base_run(), "tinylm-base") as url:
        model_args = (f"base_url={url}/v1/completions,model=tinylm-base,tokenizer={folder},"
                      f"tokenizer_backend=huggingface,tokenized_requests=True,max_length={window},max_retries=1")
        theirs = run_lm_eval("local-completions", model_args, tmp_path, monkeypatch, batch_size=8)
    assert_agrees_with_tinylm_eval(theirs)
