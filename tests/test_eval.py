"""`tinylm eval`: bits per byte as the training log has it, exact-match as SFT logs it, pass@k by its
estimator, preference accuracy, GSM8K-layout files, the sandboxed code task, the recorded scores, and
bad input as one line."""

from __future__ import annotations

import itertools
import json
import math
import re
import shutil
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from eval_support import TASK, base_run, sft_run
from tinylm.checkpoint import load_model
from tinylm.cli.main import main
from tinylm.errors import TinyLMError
from tinylm.evaluate.bpb import corpus_bpb
from tinylm.evaluate.exact_match import pass_at_k, pass_at_k_estimate
from tinylm.evaluate.preference_accuracy import preference_accuracy
from tinylm.evaluate.scores import EVALS
from tinylm.metrics import read_metrics
from tinylm.tasks.code import CodeTask
from tinylm.tasks.gsm8k import GSM8KTask, final_number
from tinylm.tasks.preference_pairs import preference_pairs
from tinylm.tasks.registry import get_task
from tinylm.tokenizer.chat_format import ChatFormat

pytestmark = pytest.mark.usefixtures("one_thread")
DATA = Path(__file__).parent.parent / "evals" / "data"


def _copy(run: Path, tmp_path: Path) -> Path:
    """A private copy of a shared run, so recording scores in it touches no other test."""
    return Path(shutil.copytree(run, tmp_path / run.name))


def test_bpb_equals_the_training_logs_dev_bpb() -> None:
    model, tokenizer, meta = load_model(base_run())
    logged = [r["dev_bpb"] for r in read_metrics(base_run()) if "dev_bpb" in r][-1]
    data = [link["data"] for link in meta["lineage"] if link["stage"] == "pretrain"][0]
    # the training evaluation's windows: batch 4 x seq_len 16, 4 batches
    assert corpus_bpb(model, tokenizer, data, batch_size=4, max_batches=4, seq_len=16)["bpb"] == logged


def test_exact_match_equals_what_sft_logged_at_its_end() -> None:
    logged = [r["exact_match"] for r in read_metrics(sft_run()) if "exact_match" in r][-1]
    out = _eval_json(sft_run(), TASK, "--examples", "8", "--seed", "3", "--max-new-tokens", "4", "--no-record")
    assert out["scores"][TASK]["exact_match"] == logged
    assert out["stage"] == "sft" and len(out["samples"][TASK]) == 3


def _eval_json(run: Path, tasks: str, *extra: str) -> dict:
    import contextlib
    import io

    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        assert main(["eval", "--checkpoint", str(run), "--tasks", tasks, "--json", *extra]) == 0
    return json.loads(buffer.getvalue())


def test_a_lora_checkpoint_is_evaluated_with_its_adapters_folded_in(tmp_path: Path) -> None:
    from eval_support import SFT_OPTIONS
    from tinylm.stages.sft.config import SFTConfig
    from tinylm.stages.sft.stage import SFTStage
    from tinylm.train.loop import run_training

    options = {**SFT_OPTIONS, "max_steps": 2, "eval_every": 0}
    run_training(SFTConfig(base=str(base_run()), out=str(tmp_path / "lora"), lora_rank=4, **options), stage=SFTStage())
    out = _eval_json(tmp_path / "lora", f"prefs:{TASK}", "--examples", "4", "--no-record")
    assert 0 <= out["scores"][f"prefs:{TASK}"]["preference_accuracy"] <= 1 and out["stage"] == "sft"


def test_pass_at_k_estimator_equals_counting_every_draw() -> None:
    for n, c, k in [(5, 2, 2), (6, 0, 3), (4, 4, 1), (7, 3, 5), (8, 1, 1)]:
        outcomes = [True] * c + [False] * (n - c)
        draws = list(itertools.combinations(outcomes, k))
        assert math.isclose(pass_at_k_estimate(n, c, k), sum(any(d) for d in draws) / len(draws))


def test_pass_at_k_samples_deterministically_and_counts_verified_replies() -> None:
    model, tokenizer, _ = load_model(sft_run())
    chat = ChatFormat.from_tokenizer(tokenizer)
    task = get_task(TASK)
    examples = task.examples("test", 4, 0)
    first = pass_at_k(model, chat, task, examples, 4, k=2, samples=4, temperature=1.0, seed=5)
    again = pass_at_k(model, chat, task, examples, 4, k=2, samples=4, temperature=1.0, seed=5)
    assert first == again
    assert first.score == sum(pass_at_k_estimate(4, c, 2) for c in first.correct) / 4


@torch.no_grad()
def _answer_logprob(model: torch.nn.Module, prompt: list[int], answer: list[int]) -> float:
    """log p(answer | prompt) by one plain forward over the whole sequence (independent of the scorer)."""
    ids = torch.tensor([prompt + answer])
    logits, _ = model(ids[:, :-1])
    logprobs = F.log_softmax(logits.float(), dim=-1)[0, len(prompt) - 1:]
    return float(logprobs.gather(1, torch.tensor(answer)[:, None]).sum())


def test_preference_accuracy_compares_the_two_answers_likelihoods() -> None:
    model, tokenizer, _ = load_model(sft_run())
    chat = ChatFormat.from_tokenizer(tokenizer)
    pairs = preference_pairs(TASK, "test", 8, seed=0)
    wins = 0
    for pair in pairs:
        prompt = chat.prompt_ids(pair.example.prompt)
        chosen, rejected = ([*chat.content_ids(a), chat.end_id] for a in (pair.chosen, pair.rejected))
        wins += _answer_logprob(model, prompt, chosen) > _answer_logprob(model, prompt, rejected)
    assert preference_accuracy(model, chat, pairs, batch_size=3) == wins / len(pairs)


def test_prefs_file_scores_the_users_own_pairs(tmp_path: Path) -> None:
    """prefs:FILE reads prompt/chosen/rejected rows (text or message lists) and scores them as prefs:builtin does."""
    model, tokenizer, _ = load_model(sft_run())
    chat = ChatFormat.from_tokenizer(tokenizer)
    pairs = preference_pairs(TASK, "test", 6, seed=0)
    rows = [{"prompt": p.example.prompt[-1]["content"], "chosen": p.chosen, "rejected": p.rejected} for p in pairs]
    rows[0] = {"prompt": pairs[0].example.prompt, "chosen": [{"role": "assistant", "content": pairs[0].chosen}],
               "rejected": [{"role": "assistant", "content": pairs[0].rejected}]}  # trl's conversational layout
    file = tmp_path / "pairs.jsonl"
    file.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    out = _eval_json(sft_run(), f"prefs:{file}", "--examples", "5", "--no-record")
    assert out["scores"][f"prefs:{file}"]["preference_accuracy"] == preference_accuracy(model, chat, pairs[:5])


@pytest.mark.parametrize("case", ["missing", "malformed_json", "no_rejected", "identical"])
def test_a_bad_prefs_file_is_one_line_naming_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                      case: str) -> None:
    file = tmp_path / "pairs.jsonl"
    good = json.dumps({"prompt": "1 + 1?", "chosen": "2", "rejected": "3"})
    bad = {"malformed_json": '{"prompt": "2 + 2?", "chosen": "4"',
           "no_rejected": json.dumps({"prompt": "x", "chosen": "4"}),
           "identical": json.dumps({"prompt": "x", "chosen": "4", "rejected": "4"})}
    expected = {"missing": f"preference file not found: {file}", "malformed_json": f"{file}:2: malformed JSON",
                "no_rejected": f"{file}:2: a preference pair needs prompt, chosen and rejected",
                "identical": f"{file}:2: chosen and rejected are identical"}[case]
    if case != "missing":
        file.write_text(f"{good}\n{bad[case]}\n", encoding="utf-8")
    # the file is read before any checkpoint: this one does not even exist
    assert main(["eval", "--checkpoint", str(tmp_path / "no-run"), "--tasks", f"prefs:{file}"]) == 1
    err = capsys.readouterr().err.strip()
    assert expected in err and len(err.splitlines()) == 1, err


def test_gsm8k_reads_the_number_after_the_hashes(tmp_path: Path) -> None:
    assert final_number("3 + 4 = 7\n#### 1,234") == 1234
    assert final_number("the answer is 7.0 apples") == final_number("#### 7")
    file = tmp_path / "gsm.jsonl"
    file.write_text(json.dumps({"question": "2 + 2?", "answer": "2 + 2 = 4\n#### 4"}) + "\n", encoding="utf-8")
    task = GSM8KTask(str(file))
    [example] = task.examples("test", 10)
    assert task.verify("It is 4.", example) and task.verify("#### 4 then 5", example)
    assert not task.verify("It is 5.", example) and not task.verify("no idea", example)


def test_code_task_runs_replies_against_tests_in_the_sandbox() -> None:
    task = CodeTask()
    examples = task.examples("test", 40, 0)
    train_keys = {e.key for e in task.examples("train", 400, 0)}
    assert examples and not train_keys & {e.key for e in examples}  # disjoint held-out split
    for example in examples[:3]:
        assert task.verify(example.answer, example)  # the reference passes
        assert task.verify(f"```python\n{example.answer}```", example)  # fenced
        assert not task.verify("def f(x):\n    return None\n", example)  # runs, fails the tests
        assert not task.verify("def f(x) return", example)  # not Python
    assert not task.verify("import os\ndef f(x):\n    return os.listdir('/')\n", examples[0])


def test_eval_records_scores_and_is_deterministic(tmp_path: Path) -> None:
    run = _copy(sft_run(), tmp_path)
    gsm8k, arc = (f"{kind}:{DATA / f'synthetic_{kind}.jsonl'}" for kind in ("gsm8k", "arc"))
    tasks = f"bpb,{TASK},prefs:{TASK},code,{gsm8k},{arc}"
    first = _eval_json(run, tasks, "--examples", "6", "--max-new-tokens", "4", "--pass-k", "2")
    second = _eval_json(run, tasks, "--examples", "6", "--max-new-tokens", "4", "--pass-k", "2")
    assert first["scores"] == second["scores"]
    assert set(first["scores"]) == {"bpb", TASK, f"prefs:{TASK}", "code", gsm8k, arc, "core"}
    assert {"exact_match", "pass@2"} <= set(first["scores"]["code"])
    recorded = [json.loads(line) for line in (run / EVALS).read_text().splitlines()]
    assert [r["scores"] for r in recorded] == [first["scores"], second["scores"]]
    assert "preference_accuracy" in (run / "report.md").read_text()


@pytest.mark.parametrize("case", ["unknown_task", "malformed_row", "no_tokenizer", "no_checkpoint"])
def test_bad_input_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str) -> None:
    run, tasks = base_run(), "bpb"
    if case == "unknown_task":
        tasks, expected = "builtin:nope", "unknown task 'builtin:nope'"
    elif case == "malformed_row":
        file = tmp_path / "arc.jsonl"
        good = {"question": "q", "choices": {"text": ["a", "b"], "label": ["A", "B"]}, "answerKey": "A"}
        file.write_text(json.dumps(good) + "\n" + json.dumps({**good, "answerKey": "Z"}) + "\n", encoding="utf-8")
        tasks, expected = f"arc:{file}", f"{file}:2: not a valid arc row"
    elif case == "no_tokenizer":
        run = _copy(base_run(), tmp_path)
        for tokenizer in run.rglob("tokenizer.json"):
            tokenizer.unlink()
        expected = "has no tokenizer.json"
    else:
        run, expected = tmp_path / "missing", "checkpoint not found"
    assert main(["eval", "--checkpoint", str(run), "--tasks", tasks]) == 1
    err = capsys.readouterr().err.strip()
    assert expected in err and len(err.splitlines()) == 1


def test_unknown_evaluation_kind_names_the_known_ones() -> None:
    from tinylm.evaluate.tasks import parse_tasks

    with pytest.raises(TinyLMError, match="known are bpb"):
        parse_tasks("bpb,squad:file.jsonl")


def test_a_base_model_on_a_chat_task_gets_one_note(capsys: pytest.CaptureFixture[str]) -> None:
    """A base model has no chat template: a task asked in the chat format scores near 0, and the user is told why."""
    gsm8k = f"gsm8k:{DATA / 'synthetic_gsm8k.jsonl'}"
    quick = ["--examples", "2", "--max-new-tokens", "2", "--no-record"]
    for run, tasks, notes in ((base_run(), f"bpb,{TASK},{gsm8k}", 1), (sft_run(), f"{TASK},{gsm8k}", 0),
                              (base_run(), "bpb", 0)):
        capsys.readouterr()
        assert main(["eval", "--checkpoint", str(run), "--tasks", tasks, *quick]) == 0
        lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("note:")]
        assert len(lines) == notes, lines
        for line in lines:
            assert "base model" in line and "chat format" in line and "tinylm sft" in line


def test_the_eval_help_names_files_that_exist() -> None:
    from tinylm.cli.commands import eval as eval_command

    named = re.findall(r"evals/\S+?\.jsonl", eval_command.__doc__ or "")
    root = Path(__file__).parent.parent
    assert named and all((root / name).is_file() for name in named), named
