"""A chat model's export stops where its turn ends: <|end|> is an end token for transformers (and vLLM, SGLang).

Without it, `generate` on the export runs past the end of the reply to the length limit, writing the
next turns itself.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from chat_stop_support import chat_checkpoint, reply_ids
from tinylm.cli.main import main

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, object]:
    root = tmp_path_factory.mktemp("chat-export")
    run_dir, tokenizer = chat_checkpoint(root)
    assert main(["export", "--checkpoint", str(run_dir), "--out", str(root / "hf")]) == 0
    return root / "hf", tokenizer


def test_every_end_token_of_a_chat_export_includes_end_of_turn(exported) -> None:
    folder, tokenizer = exported
    eot, end = tokenizer.eot_id, tokenizer.special_tokens["<|end|>"]
    generation = json.loads((folder / "generation_config.json").read_text())
    config = json.loads((folder / "config.json").read_text())
    assert generation["eos_token_id"] == config["eos_token_id"] == [eot, end]  # end-of-text first: what import reads
    assert generation["pad_token_id"] == generation["bos_token_id"] == eot
    tokenizer_config = json.loads((folder / "tokenizer_config.json").read_text())
    assert tokenizer_config["eos_token"] == "<|end|>"  # what ends a reply; padding stays end-of-text
    assert tokenizer_config["pad_token"] == tokenizer_config["bos_token"] == "<|endoftext|>"


def test_transformers_generate_stops_at_end_of_turn(exported) -> None:
    folder, tokenizer = exported
    model = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    prompt = hf_tokenizer.apply_chat_template([{"role": "user", "content": "hi there"}], add_generation_prompt=True,
                                              return_dict=True, return_tensors="pt")
    with torch.no_grad():
        out = model.generate(**prompt, max_new_tokens=20, do_sample=False)
    new = out[0, prompt["input_ids"].shape[1]:].tolist()
    assert new == reply_ids(tokenizer)  # stopped at <|end|>, 16 tokens short of the limit
    assert hf_tokenizer.decode(new, skip_special_tokens=True) == "return"
