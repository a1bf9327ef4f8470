"""The local multiple-choice tasks give the same accuracies, and the same log-likelihoods, in `tinylm eval`
and in the field's harness: `lm_eval --model hf` on the exported folder, with the task configs shipped
in evals/lm_eval/ (offline, on the synthetic files in evals/data/)."""

from __future__ import annotations

from pathlib import Path

import pytest

from eval_support import base_run

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_thread")]
REPO = Path(__file__).parent.parent
LAYOUTS = ("hellaswag", "arc", "mmlu")


def test_lm_eval_hf_equals_tinylm_eval(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    datasets = pytest.importorskip("datasets")
    lm_eval = pytest.importorskip("lm_eval")
    from lm_eval.tasks import TaskManager

    from tinylm.checkpoint import load_model
    from tinylm.evaluate.multiple_choice import load_questions, score_questions
    from tinylm.evaluate.run import evaluate_checkpoint
    from tinylm.evaluate.tasks import parse_tasks
    from tinylm.interop.hf_export import export_checkpoint

    folder, _ = export_checkpoint(base_run(), tmp_path / "hf")
    monkeypatch.chdir(REPO)  # the task configs name their data relative to the repository root
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "datasets"))
    names = [f"tinylm_synthetic_{layout}" for layout in LAYOUTS]
    theirs = lm_eval.simple_evaluate(model="hf", model_args=f"pretrained={folder},dtype=float32", tasks=names,
                                     task_manager=TaskManager(include_path=str(REPO / "evals" / "lm_eval")),
                                     device="cpu", batch_size=8, log_samples=True)
    specs = ",".join(f"{layout}:evals/data/synthetic_{layout}.jsonl" for layout in LAYOUTS)
    ours = evaluate_checkpoint(base_run(), parse_tasks(specs)).scores()
    model, tokenizer, _ = load_model(base_run())
    for layout, name in zip(LAYOUTS, names, strict=True):
        result = theirs["results"][name]
        mine = ours[f"{layout}:evals/data/synthetic_{layout}.jsonl"]
        assert (mine["acc"], mine["acc_norm"]) == (result["acc,none"], result["acc_norm,none"])
        questions = load_questions(layout, f"evals/data/synthetic_{layout}.jsonl")
        logprobs = score_questions(model, tokenizer, questions).logprobs
        for sample in theirs["samples"][name]:
            their_lls = [resp[0][0] for resp in sample["resps"]]
            assert their_lls == pytest.approx(logprobs[sample["doc_id"]], abs=1e-4)
