"""Multiple choice by log-likelihood: contexts built as lm-eval's task configs build them, pairs split into
ids as lm-eval splits them, batched scores equal scoring alone, acc / acc_norm by their definitions,
the chance-centred aggregate, and malformed rows named by file:line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from eval_support import base_run
from tinylm.checkpoint import load_model
from tinylm.errors import TinyLMError
from tinylm.evaluate import multiple_choice
from tinylm.evaluate.core import centred, core_score
from tinylm.evaluate.loglikelihood import Scored, score_continuations
from tinylm.evaluate.multiple_choice import Question, encode_pair, load_questions, score_questions

pytestmark = pytest.mark.usefixtures("one_thread")
DATA = Path(__file__).parent.parent / "evals" / "data"


def _write(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return str(path)


def test_contexts_are_lm_evals(tmp_path: Path) -> None:
    from lm_eval.tasks.hellaswag.utils import preprocess  # the field's own clean-up

    row = {"activity_label": "Baking", "ctx_a": "A man [header] mixes flour.", "ctx_b": "then he",
           "endings": [" bakes  it [step].", "sleeps"], "label": "0"}
    [q] = load_questions("hellaswag", _write(tmp_path / "h.jsonl", [row]))
    assert q.context == preprocess("Baking: A man [header] mixes flour. Then he")
    assert q.choices == (preprocess(" bakes  it [step]."), "sleeps") and q.gold == 0
    arc = {"question": "Which is hot?", "choices": {"text": ["ice", "fire"], "label": ["1", "2"]}, "answerKey": "2"}
    [q] = load_questions("arc", _write(tmp_path / "a.jsonl", [arc]))
    assert (q.context, q.choices, q.gold) == ("Question: Which is hot?\nAnswer:", ("ice", "fire"), 1)
    mmlu = {"question": " 2 + 2? ", "subject": "math", "choices": ["3", "4", "5", "6"], "answer": 1}
    [q] = load_questions("mmlu", _write(tmp_path / "m.jsonl", [mmlu]))
    assert q.context == "2 + 2?\nA. 3\nB. 4\nC. 5\nD. 6\nAnswer:" and q.choices == ("A", "B", "C", "D")


def test_encode_pair_moves_trailing_spaces_to_the_continuation() -> None:
    _, tokenizer, _ = load_model(base_run())
    context, continuation = encode_pair(tokenizer, "return value ", "+ 1")
    assert context == tokenizer.encode_ordinary("return value")
    assert context + continuation == tokenizer.encode_ordinary("return value + 1")


def test_batched_scores_equal_each_request_alone_even_when_truncated() -> None:
    model, _, _ = load_model(base_run())
    window = model.config.context_length
    requests = [([1, 2, 3], [4, 5]), ([7] * (window + 20), [8, 9, 10]), ([11], [12]), ([3] * 40, [2] * 5)]
    batched = score_continuations(model, requests, batch_size=3)
    for (context, continuation), got in zip(requests, batched, strict=True):
        ids = [*context, *continuation][-(window + 1):]  # lm-eval's truncation, written out
        with torch.no_grad():
            logits, _ = model(torch.tensor([ids[:-1]]))
        logprobs = F.log_softmax(logits.float(), -1)[0, -len(continuation):]
        target = torch.tensor(continuation)
        expected = float(logprobs.gather(1, target[:, None]).sum())
        assert got.logprob == pytest.approx(expected, abs=1e-5)
        assert got.greedy == bool((logprobs.argmax(-1) == target).all())


def test_acc_takes_the_likeliest_choice_and_acc_norm_divides_by_characters(monkeypatch: pytest.MonkeyPatch) -> None:
    # choice log-likelihoods chosen so that raw and per-character argmaxes differ
    lls = {("q1", " a"): -2.0, ("q1", " bbbbbb"): -3.0, ("q2", " x"): -1.0, ("q2", " yy"): -1.5}

    def fake(model: object, requests: list, batch_size: int) -> list[Scored]:
        return [Scored(lls[(str(c[0]), str(k[0]))], False) for c, k in requests]

    # the texts stand for their own ids, so the fake scorer can read each request back
    monkeypatch.setattr(multiple_choice, "encode_pair", lambda tok, ctx, cont: ([ctx], [cont]))
    monkeypatch.setattr(multiple_choice, "score_continuations", fake)
    questions = [Question("q1", ("a", "bbbbbb"), 1), Question("q2", ("x", "yy"), 0)]
    scores = score_questions(None, None, questions)  # type: ignore[arg-type]
    # q1: raw argmax "a" (wrong), per character -2/1 < -3/6 so "bbbbbb" (right)
    # q2: raw argmax "x" (right), per character -1/1 < -1.5/2 so "yy" (wrong)
    assert scores.accuracy == 0.5 and scores.accuracy_norm == 0.5
    assert scores.logprobs == [[-2.0, -3.0], [-1.0, -1.5]]
    assert scores.chance == 0.5


def test_core_is_the_mean_of_chance_centred_accuracies() -> None:
    assert centred(0.25, 0.25) == 0.0 and centred(1.0, 0.25) == 1.0
    assert core_score({"a": (0.625, 0.25), "b": (0.5, 0.5)}) == pytest.approx((0.5 + 0.0) / 2)
    assert core_score({"a": (0.0, 0.5)}) == -1.0


def test_the_shipped_synthetic_files_load() -> None:
    for layout in ("hellaswag", "arc", "mmlu"):
        questions = load_questions(layout, str(DATA / f"synthetic_{layout}.jsonl"))
        assert len(questions) == 24 and all(len(q.choices) == 4 for q in questions)


@pytest.mark.parametrize("bad,why", [("{not json", "malformed JSON"), ('{"question": "q"}', "missing field"),
                                     ('{"question": "q", "choices": ["a"], "answer": 0}', "4 choices")])
def test_a_malformed_row_is_named_by_file_and_line(tmp_path: Path, bad: str, why: str) -> None:
    file = tmp_path / "mmlu.jsonl"
    good = json.dumps({"question": "q", "subject": "s", "choices": ["a", "b", "c", "d"], "answer": 0})
    file.write_text(f"{good}\n\n{bad}\n", encoding="utf-8")
    with pytest.raises(TinyLMError, match=f"{file}:3: .*{why}"):
        load_questions("mmlu", str(file))


def test_hf_sources_fail_in_one_line_offline() -> None:
    with pytest.raises(TinyLMError, match="cannot read Hugging Face dataset 'tinylm-tests/absent'"):
        load_questions("arc", "hf:tinylm-tests/absent::test")
    with pytest.raises(TinyLMError, match="expected hf:NAME"):
        load_questions("arc", "hf:x?splt=test")
