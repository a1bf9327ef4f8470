"""One reader for user rows (`tinylm.data.rows`): SFT data, preference pairs, RL prompt files, task and evaluation
files and the studio's preview all read through it, so the same bad row reads the same in every command, and
`hf:` has one grammar, parsed in one place."""

from __future__ import annotations

import ast
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tinylm.data.rows.read import SKIP_HINT, read_rows
from tinylm.data.sources import open_corpus
from tinylm.errors import TinyLMError
from tinylm.evaluate.multiple_choice import load_questions
from tinylm.stages.preference.data import load_preferences
from tinylm.stages.sft.data import load_conversations
from tinylm.studio import data_preview
from tinylm.studio.runs import StudioError
from tinylm.tasks.registry import get_task
from tinylm.tokenizer.train import train_bpe

SRC = Path(__file__).resolve().parents[1] / "src" / "tinylm"
GRAMMAR = SRC / "data" / "rows" / "hf_spec.py"  # the only module that may spell the prefix
OPENER = SRC / "data" / "rows" / "hf_dataset.py"  # the only module that may call datasets' loaders
# one row every reader accepts: a prompt/response conversation, a preference pair, a prompt with its answer
ROW = {"prompt": "What is 1 + 1?", "response": "2", "answer": "2", "chosen": "2", "rejected": "3"}


@pytest.fixture
def studio_tokenizer(monkeypatch: pytest.MonkeyPatch) -> None:
    """The preview renders rows with a run's tokenizer: any small one will do, the rows fail before rendering."""
    tokenizer = train_bpe(["What is 1 + 1? 2 3 " * 20], vocab_size=300)
    monkeypatch.setattr(data_preview, "resolve_run", lambda root, name: root)
    monkeypatch.setattr(data_preview, "run_tokenizer", lambda run_dir: tokenizer)


def _error(read: Callable[[], Any]) -> str:
    with pytest.raises((TinyLMError, StudioError)) as caught:
        read()
    return str(caught.value)


def readers(file: Path) -> dict[str, Callable[[], Any]]:
    """Every command's way into a data file."""
    root, name = file.parent, file.name
    return {
        "sft": lambda: load_conversations(str(file)),
        "dpo": lambda: load_preferences(str(file)),
        "rl prompts": lambda: get_task(f"prompts:{file}"),
        "eval gsm8k": lambda: get_task(f"gsm8k:{file}"),
        "eval mmlu": lambda: load_questions("mmlu", str(file)),
        "studio sft": lambda: data_preview.preview(root, "sft", name, "run"),
        "studio dpo": lambda: data_preview.preview(root, "dpo", name, "run"),
        "studio rl": lambda: data_preview.preview(root, "rl", name, "run"),
    }


@pytest.mark.usefixtures("studio_tokenizer")
def test_one_malformed_file_is_the_same_file_line_message_in_every_command(tmp_path: Path) -> None:
    file = tmp_path / "rows.jsonl"
    file.write_text('\n{"prompt": "What is 2 + 2?", \n' + json.dumps(ROW) + "\n", encoding="utf-8")  # line 1 blank
    reference = _error(lambda: read_rows(str(file), lambda row: row))
    assert reference.startswith(f"{file}:2: malformed JSON (")
    messages = {command: _error(read) for command, read in readers(file).items()}
    for command, message in messages.items():  # the commands that offer --on-error say so
        hint = SKIP_HINT if command in ("sft", "dpo", "studio sft", "studio dpo") else ""
        assert message == reference + hint, command


@pytest.mark.usefixtures("studio_tokenizer")
def test_undecodable_bytes_are_the_same_note_in_every_command(tmp_path: Path) -> None:
    file = tmp_path / "latin1.jsonl"
    latin1 = json.dumps({**ROW, "prompt": "Combien font 1 + 1, s'il vous plaît ?"}, ensure_ascii=False)
    file.write_bytes(json.dumps(ROW).encode() + b"\n" + latin1.encode("latin-1") + b"\n")
    note = f"{file}:2: 1 character on 1 line is not UTF-8 and became U+FFFD"
    assert [n[:len(note)] for n in read_rows(str(file), lambda row: row).notes] == [note]
    assert [n[:len(note)] for n in load_conversations(str(file)).notes] == [note]
    assert [n[:len(note)] for n in load_preferences(str(file)).notes] == [note]
    assert [n[:len(note)] for n in get_task(f"prompts:{file}").notes] == [note]
    for stage in ("sft", "dpo", "rl"):
        notes = data_preview.preview(file.parent, stage, file.name, "run")["notes"]
        assert [n[:len(note)] for n in notes if n.startswith(str(file))] == [note], stage


def test_every_reader_reads_hf_specs_with_one_grammar(monkeypatch: pytest.MonkeyPatch) -> None:
    datasets = pytest.importorskip("datasets")
    asked: list[tuple[Any, ...]] = []

    def load_dataset(path: str, config: str | None = None, *, split: str, streaming: bool = False) -> list[Any]:
        asked.append((path, config, split))
        return []

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    spec = "hf:someone/rows:main:dev"
    for read in (lambda: load_conversations(spec), lambda: load_preferences(spec), lambda: get_task(f"prompts:{spec}"),
                 lambda: get_task(f"gsm8k:{spec}"), lambda: load_questions("arc", spec),
                 lambda: list(open_corpus(spec).documents())):
        try:
            read()
        except TinyLMError as error:
            assert "no " in str(error)  # an empty split: nothing to read, whoever reads it
    assert asked == [("someone/rows", "main", "dev")] * 6
    for bad in ("hf:", "hf:a:b:c:d", "hf:x?config=main&split=test"):
        for read in (load_conversations, lambda s: get_task(f"gsm8k:{s}"), open_corpus):
            with pytest.raises(TinyLMError, match=r"expected hf:NAME\[:CONFIG\]\[:SPLIT\]"):
                read(bad)


def hf_prefix_parsing(source: str) -> list[int]:
    """Lines of `source` that spell the `hf:` prefix themselves: the literal "hf:" (an f-string's piece
    included), or a string starting with it handed to startswith/removeprefix/partition/split/find."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and node.value == "hf:":
            found.append(node.lineno)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in (
                "startswith", "removeprefix", "partition", "split", "find", "index"):
            found += [arg.lineno for arg in ast.walk(node) if isinstance(arg, ast.Constant)
                      and isinstance(arg.value, str) and arg.value.startswith("hf:")]
    return found


def dataset_loads(source: str) -> list[int]:
    """Lines of `source` that call datasets' loaders."""
    return [node.lineno for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute) and node.func.attr in ("load_dataset", "load_from_disk")]


def test_the_scans_find_what_they_look_for() -> None:
    """A guard: the tests below would pass vacuously if the scans found nothing."""
    source = ('a = spec.startswith("hf:")\nb = spec.removeprefix("hf:").split(":")\nc = f"hf:{name}"\n'
              'd = spec.startswith(("builtin:", "hf:x"))\ne = "hf: a transformers folder"\n'
              'f = datasets.load_dataset(name)\n')
    assert sorted(set(hf_prefix_parsing(source))) == [1, 2, 3, 4]
    assert dataset_loads(source) == [6]
    assert hf_prefix_parsing(GRAMMAR.read_text(encoding="utf-8")) and dataset_loads(OPENER.read_text(encoding="utf-8"))


def test_hf_specs_are_parsed_and_opened_in_one_module_each() -> None:
    spelled, opened = [], []
    for path in sorted(SRC.rglob("*.py")):
        source, name = path.read_text(encoding="utf-8"), path.relative_to(SRC.parent)
        if path != GRAMMAR:
            spelled += [f"{name}:{line}" for line in hf_prefix_parsing(source)]
        if path != OPENER:
            opened += [f"{name}:{line}" for line in dataset_loads(source)]
    assert not spelled, f"the hf: prefix is parsed outside {GRAMMAR.name}: {spelled}"
    assert not opened, f"datasets is loaded outside {OPENER.name}: {opened}"
