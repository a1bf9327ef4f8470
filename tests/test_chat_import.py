"""Export then import keeps a chat model a chat model: the template and role tokens come back with it.

Without them, `tinylm chat` on the imported run said "a base model: it continues the text".
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chat_stop_support import chat_checkpoint
from tinylm.checkpoint import read_checkpoint_config
from tinylm.cli.main import main
from tinylm.inference.loading import chat_format_of, load_for_generation
from tinylm.tokenizer.chat_format import ChatFormat

pytest.importorskip("transformers")
CONVERSATION = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi <|end|> there"},
                {"role": "assistant", "content": "hello"}, {"role": "user", "content": "and you?"}]


def export_and_import(root: Path) -> tuple[Path, Path]:
    run_dir, _ = chat_checkpoint(root)
    assert main(["export", "--checkpoint", str(run_dir), "--out", str(root / "hf")]) == 0
    assert main(["import", str(root / "hf"), "--out", str(root / "back")]) == 0
    return run_dir, root / "back"


def test_an_imported_chat_export_is_a_chat_model_with_the_same_format(tmp_path: Path) -> None:
    original, imported = export_and_import(tmp_path)
    _, tokenizer, meta = load_for_generation(str(imported), device="cpu")
    chat = chat_format_of(tokenizer, meta)
    assert chat is not None  # what `tinylm chat` and `generate --chat` decide "base model" by
    _, ours, ours_meta = load_for_generation(str(original), device="cpu")
    assert meta["chat_template"] == ours_meta["chat_template"]
    reference = ChatFormat.from_tokenizer(ours)
    assert chat.render(CONVERSATION).ids == reference.render(CONVERSATION).ids
    assert chat.prompt_ids(CONVERSATION) == reference.prompt_ids(CONVERSATION)
    assert chat.stop_ids == reference.stop_ids


def test_a_template_of_another_format_leaves_a_base_model(tmp_path: Path) -> None:
    """tinylm renders only its own format: a foreign template is not taken for it (the model loads as base)."""
    run_dir, _ = chat_checkpoint(tmp_path)
    assert main(["export", "--checkpoint", str(run_dir), "--out", str(tmp_path / "hf")]) == 0
    file = tmp_path / "hf" / "tokenizer_config.json"
    config = json.loads(file.read_text())
    file.write_text(json.dumps({**config, "chat_template": "{% for m in messages %}{{ m['content'] }}{% endfor %}"}))
    assert main(["import", str(tmp_path / "hf"), "--out", str(tmp_path / "back")]) == 0
    info = read_checkpoint_config(tmp_path / "back" / "checkpoints" / "step_00000000")
    assert "chat_template" not in info
    _, tokenizer, meta = load_for_generation(str(tmp_path / "back"), device="cpu")
    assert chat_format_of(tokenizer, meta) is None
