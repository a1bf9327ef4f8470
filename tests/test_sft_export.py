"""A fine-tuned run exported for the field's tools: transformers renders our chat template to our ids and
mask, and a LoRA run becomes its base plus a PEFT adapter that reproduces our logits (merged: the same)."""

from __future__ import annotations

import functools
import tempfile
from pathlib import Path

import pytest
import torch

from test_sft import SFTStage, sft_config
from tinylm.checkpoint import load_model
from tinylm.cli.main import main
from tinylm.tokenizer.chat_format import ChatFormat
from tinylm.train.loop import run_training

pytestmark = pytest.mark.usefixtures("one_thread")

CONVERSATIONS = [
    [{"role": "user", "content": "What is 2 + 3?"}, {"role": "assistant", "content": "5"}],
    [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"},
     {"role": "assistant", "content": "hello"}, {"role": "user", "content": "7 - 4?"},
     {"role": "assistant", "content": "3"}],
]


@functools.lru_cache(maxsize=2)
def sft_run(lora_rank: int) -> Path:
    root = Path(tempfile.mkdtemp(prefix="tinylm-sft-export-"))
    run_training(sft_config(root / "run", lora_rank=lora_rank, lr=1e-2, max_steps=3), stage=SFTStage())
    return root / "run"


def export(run: Path, out: Path, *extra: str) -> Path:
    assert main(["export", "--checkpoint", str(run), "--out", str(out), *extra]) == 0
    return out


def test_exported_chat_template_renders_our_ids_and_mask(tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    folder = export(sft_run(0), tmp_path / "hf")
    hf = AutoTokenizer.from_pretrained(folder)
    _, tokenizer, _ = load_model(sft_run(0))
    chat = ChatFormat.from_tokenizer(tokenizer)
    for messages in CONVERSATIONS:
        ours = chat.render(messages)
        theirs = hf.apply_chat_template(messages, tokenize=True, return_dict=True, return_assistant_tokens_mask=True)
        assert list(theirs["input_ids"]) == ours.ids
        assert list(theirs["assistant_masks"]) == ours.mask
        prompt = hf.apply_chat_template(messages[:-1], tokenize=True, add_generation_prompt=True, return_dict=True)
        assert list(prompt["input_ids"]) == chat.prompt_ids(messages[:-1])


def test_a_lora_run_exports_as_base_plus_peft_adapter_with_our_logits(tmp_path: Path) -> None:
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    folder = export(sft_run(4), tmp_path / "hf")
    assert (folder / "adapter" / "adapter_config.json").is_file()
    peft_model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(folder), folder / "adapter").eval()
    ours = load_model(sft_run(4))[0]
    x = torch.randint(0, ours.config.vocab_size, (2, 20), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        theirs = peft_model(x).logits
        assert torch.allclose(theirs, ours(x)[0], atol=1e-5)
        merged = AutoModelForCausalLM.from_pretrained(export(sft_run(4), tmp_path / "merged", "--merge")).eval()
        assert not (tmp_path / "merged" / "adapter").exists()
        assert torch.allclose(merged(x).logits, theirs, atol=1e-6)
