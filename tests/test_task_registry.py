"""One registry for every task: each spec form reaches its task from SFT data, DPO pairs, RL rewards and eval;
every task owns its verifier and its wrong answers, and the pairs they make are pinned."""

from __future__ import annotations

import ast
import hashlib
import json
import sys
from pathlib import Path

import pytest

from tinylm.errors import TinyLMError
from tinylm.evaluate.tasks import Generative, Preferences, parse_task
from tinylm.stages.preference.data import load_preferences
from tinylm.stages.rl.rewards import load_reward
from tinylm.stages.sft.data import load_conversations
from tinylm.tasks.code import CodeTask
from tinylm.tasks.gsm8k import GSM8KTask
from tinylm.tasks.preference_pairs import PreferencePair, preference_pairs, task_pairs
from tinylm.tasks.registry import TASKS, get_task, is_task_spec
from tinylm.tasks.stdlib_functions import INSTRUCTION, StdlibFunctionTask
from tinylm.tasks.task import Example, Task, conversation, split_of

ROOT = Path(__file__).resolve().parents[1]
ROWS = [{"question": f"Sam has {a} apples and gets {b} more. How many?", "answer": f"{a} + {b} = {a + b}\n#### {a + b}"}
        for a in range(10) for b in range(6)]


def _gsm8k_file(tmp_path: Path) -> Path:
    file = tmp_path / "gsm.jsonl"
    file.write_text("".join(json.dumps(row) + "\n" for row in ROWS), encoding="utf-8")
    return file


def _fingerprint(pairs: list[PreferencePair]) -> str:
    rows = [{"key": p.example.key, "messages": list(p.example.messages), "answer": p.example.answer,
             "chosen": p.chosen, "rejected": p.rejected, "mistake": p.mistake} for p in pairs]
    return hashlib.sha256(json.dumps(rows, sort_keys=True).encode()).hexdigest()


# Made by tasks/preference_pairs.py before the wrong answers moved onto the tasks (its per-type table).
ARITH_PAIRS = {
    ("builtin:arith", 0): "27f8ced3bbc948d248373661d2c3712f6f7f68438a7c4c2c8fc7b5addfa6447c",
    ("builtin:arith", 1): "f2ec05e3c1bbe20b54cc21e019011c110470adbcd1b8ea6aa1665af18fb52c6b",
    ("builtin:arith?digits=2&ops=+", 0): "b922c40a84c2bb688df594f71ab8fb99e022219b929203cb51b3118b2a724e9f",
    ("builtin:arith?digits=2&ops=+", 1): "270ed98e6dcddf150fe751f171e8835ef672b1cc7a04c8511ea9edc46a09bf8e",
}
STDLIB_PYTHON = "3.11.7"  # builtin:docstring reads the running interpreter's own library: pinned for this one
STDLIB_PAIRS = {0: (42, "9698c2224488ab6686032a925858b79e7b1c6ba9b0f6863a0fcf39ec1b1d2808"),
                1: (47, "7f6463d9a1e6d98d362231f717a9a712646b9b416d8c740ef730dd1061e5e57a")}
FIXED_FUNCTIONS = [  # any interpreter: the function mutations on sources written here
    'def clip(x, low):\n    """Never below low."""\n    if x < low:\n        return low\n    return x\n',
    'def tail(items):\n    """All but the first."""\n    rest = items[1:]\n    return rest\n',
    'def named(value):\n    """A label."""\n    if value is None:\n        return "none"\n    return f"v{value}"\n',
    'def total(xs):\n    """Sum plus two."""\n    out = 2\n    for x in xs:\n        out += x\n    return out\n',
]
FIXED_PAIRS = {0: "ef823d1b6c6c312df2c9efa9fbb1e1f142c4be543a310cf6863cb3582cc1726f",
               1: "87f8d9bb09d07afe505eaac5386de7cbeaca08955cc48e5f0e45d2c0f8f88b48",
               2: "ffc9af113050c0c06f8a82e51c7e57bca6e6573870bd4f7acaff7f4727113fd8"}


@pytest.mark.parametrize(("spec", "seed"), list(ARITH_PAIRS))
def test_arith_pairs_are_what_they_were(spec: str, seed: int) -> None:
    pairs = preference_pairs(spec, "train", 50, seed)
    assert len(pairs) == 50 and _fingerprint(pairs) == ARITH_PAIRS[spec, seed]


@pytest.mark.skipif(sys.version.split()[0] != STDLIB_PYTHON, reason=f"pinned on Python {STDLIB_PYTHON}'s stdlib")
@pytest.mark.parametrize("seed", list(STDLIB_PAIRS))
def test_docstring_pairs_are_what_they_were(seed: int) -> None:
    pairs = preference_pairs("builtin:docstring", "train", 50, seed)
    assert (len(pairs), _fingerprint(pairs)) == STDLIB_PAIRS[seed]


@pytest.mark.parametrize("seed", list(FIXED_PAIRS))
def test_function_mistakes_are_what_they_were(seed: int) -> None:
    examples = []
    for source in FIXED_FUNCTIONS:
        function = ast.parse(source).body[0]
        assert isinstance(function, ast.FunctionDef)
        function.body = function.body[:1]
        examples.append(conversation(f"fixed:{function.name}", f"{INSTRUCTION}\n\n{ast.unparse(function)}", source))
    pairs = task_pairs(StdlibFunctionTask(), examples, seed)
    rows = [{"key": p.example.key, "chosen": p.chosen, "rejected": p.rejected, "mistake": p.mistake} for p in pairs]
    assert hashlib.sha256(json.dumps(rows, sort_keys=True).encode()).hexdigest() == FIXED_PAIRS[seed]


def test_builtin_code_has_a_held_out_split_and_a_sandboxed_verifier() -> None:
    task = get_task("builtin:code")
    assert isinstance(task, CodeTask) and isinstance(get_task("code"), CodeTask)
    train, test = task.examples("train", 1000), task.examples("test", 1000)
    assert train and test and not {e.key for e in train} & {e.key for e in test}
    assert all(split_of(e.key) == "test" for e in test)
    assert task.examples("test", 5, seed=1) == get_task("code").examples("test", 5, seed=1)
    example = test[0]
    assert task.verify(example.answer, example)
    assert not task.verify(example.answer.replace("return ", "return 1 + ", 1), example)  # runs, fails its tests
    pairs = preference_pairs("builtin:code", "test", 2, seed=0)
    assert len(pairs) == 2 and all(task.verify(p.chosen, p.example) and not task.verify(p.rejected, p.example)
                                   for p in pairs)


def test_gsm8k_file_is_held_out_whole_and_builtin_gsm8k_splits_it(tmp_path: Path) -> None:
    file = _gsm8k_file(tmp_path)
    whole = get_task(f"gsm8k:{file}")
    assert isinstance(whole, GSM8KTask) and len(whole.examples("test", 1000)) == len(ROWS)
    assert [e.answer for e in whole.examples("test", 3)] == [r["answer"] for r in ROWS[:3]]  # file order
    with pytest.raises(TinyLMError, match=f"no train split: to train on it, use builtin:gsm8k\\?file={file}"):
        whole.examples("train", 1)
    task = get_task(f"builtin:gsm8k?file={file}")
    train, test = task.examples("train", 1000), task.examples("test", 1000)
    assert train and test and len(train) + len(test) == len(ROWS) and not {e.key for e in train} & {e.key for e in test}
    assert task.examples("train", 10, seed=3) == task.examples("train", 10, seed=3)
    assert get_task(f"builtin:gsm8k?file={file}&holdout=all").examples("test", 1000) == whole.examples("test", 1000)
    example = test[0]
    assert task.verify(example.answer, example) and not task.verify("#### 999", example)
    for pair in preference_pairs(f"builtin:gsm8k?file={file}", "test", 5):
        assert task.verify(pair.chosen, pair.example) and not task.verify(pair.rejected, pair.example)
        assert pair.rejected.rsplit("####", 1)[0] == pair.chosen.rsplit("####", 1)[0]  # the same work, a wrong end


def test_every_stage_reaches_every_spec_form(tmp_path: Path) -> None:
    file = _gsm8k_file(tmp_path)
    for spec in ("builtin:code", f"builtin:gsm8k?file={file}"):
        conversations = load_conversations(spec, "train", limit=3).conversations  # tinylm sft --data
        assert len(conversations) == 3 and conversations[0][-1]["role"] == "assistant"
        assert len(load_preferences(spec, "train", limit=2).rows) == 2  # tinylm dpo / reward --data
    for spec in ("builtin:code", "code", f"builtin:gsm8k?file={file}", f"gsm8k:{file}"):
        task = get_task(spec)  # tinylm rl --task
        example = task.examples("test", 1)[0]
        assert load_reward("exact", task).score([example.answer, "no"], [example, example]).rewards == [1.0, 0.0]
        assert isinstance(parse_task(spec), Generative) and isinstance(parse_task(f"prefs:{spec}"), Preferences)


def test_bad_specs_name_what_is_wrong(tmp_path: Path) -> None:
    with pytest.raises(TinyLMError, match="builtin:gsm8k' needs file=..."):
        get_task("builtin:gsm8k")
    with pytest.raises(TinyLMError, match="holdout='x'"):
        get_task(f"builtin:gsm8k?file={_gsm8k_file(tmp_path)}&holdout=x")
    with pytest.raises(TinyLMError, match="unknown parameter 'x=1' \\(known: none\\)"):
        get_task("builtin:code?x=1")
    with pytest.raises(TinyLMError, match="builtin:code, builtin:gsm8k\\?file=FILE, code, gsm8k:FILE"):
        get_task("builtin:nope")
    assert not is_task_spec("bpb") and not is_task_spec("squad:x") and is_task_spec("gsm8k:x")


def test_a_task_without_wrong_answers_says_so() -> None:
    class Echo(Task):
        name = "echo"

        def examples(self, split: str, n: int, seed: int = 0) -> list[Example]:
            return [conversation("hi", "Say hi.", "hi")][:n]

        def verify(self, response: str, example: Example) -> bool:
            return response == example.answer

    with pytest.raises(TinyLMError, match="task 'echo' makes no wrong answers, so it has no preference pairs"):
        task_pairs(Echo(), Echo().examples("train", 1), seed=0)


def test_every_registered_task_is_documented() -> None:
    page = (ROOT / "docs/posttrain/tasks.md").read_text(encoding="utf-8")
    assert not [name for name in TASKS if f"## builtin:{name}" not in page]
