"""SFT conversations with tools: OpenAI/TRL rows and LLaMA-Factory's ShareGPT, rendered; bad tool use is file:line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from test_sft_data import write_jsonl
from tinylm.errors import TinyLMError
from tinylm.stages.sft.data import load_conversations
from tinylm.tokenizer import train_bpe
from tinylm.tokenizer.chat_format import ChatFormat

CALC = {"type": "function", "function": {"name": "calculator", "description": "exact arithmetic",
                                         "parameters": {"type": "object",
                                                        "properties": {"expression": {"type": "string"}}}}}
CALL = {"id": "call_0", "type": "function", "function": {"name": "calculator", "arguments": '{"expression": "12*34"}'}}
TRL = {"messages": [{"role": "user", "content": "What is 12 * 34?"},
                    {"role": "assistant", "content": None, "tool_calls": [CALL]},
                    {"role": "tool", "tool_call_id": "call_0", "content": "408"},
                    {"role": "assistant", "content": "408", "reasoning_content": "the tool said 408"}],
       "tools": [CALC]}


def test_trl_rows_keep_calls_results_reasoning_and_tools(tmp_path: Path) -> None:
    as_text = {**TRL, "tools": json.dumps([CALC])}  # how a `datasets` column holds the tools
    loaded = load_conversations(str(write_jsonl(tmp_path / "t.jsonl", [TRL, as_text]))).conversations
    assert loaded[0] == loaded[1]
    system, user, called, result, answer = loaded[0]
    assert system == {"role": "system", "content": "", "tools": [CALC]}
    assert called == {"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": "calculator", "arguments": '{"expression": "12*34"}'}}]}
    assert result == {"role": "tool", "content": "408"}
    assert answer["reasoning_content"] == "the tool said 408"

    fmt = ChatFormat.from_tokenizer(train_bpe(["What is 12 * 34? calculator expression"] * 5, vocab_size=300))
    rendered = fmt.render(loaded[0])
    text = fmt.tokenizer.decode(rendered.ids)
    assert '<|call|>calculator\n{"expression": "12*34"}<|/call|><|end|><|tool|>408<|end|>' in text
    assert '"name": "calculator"' in text.split("<|end|>")[0]  # the declaration is in the system turn
    learned = fmt.tokenizer.decode([t for t, m in zip(rendered.ids, rendered.mask) if m])
    assert learned == ('<|call|>calculator\n{"expression": "12*34"}<|/call|><|end|>'
                       "<|think|>the tool said 408<|/think|>408<|end|>")


def test_llama_factory_sharegpt_with_function_call_and_observation(tmp_path: Path) -> None:
    row = {"conversations": [{"from": "human", "value": "12*34?"},
                             {"from": "function_call", "value": json.dumps({"name": "calculator",
                                                                            "arguments": {"expression": "12*34"}})},
                             {"from": "observation", "value": "408"}, {"from": "gpt", "value": "408"}],
           "tools": json.dumps([CALC["function"]])}  # LLaMA-Factory lists bare function schemas
    (conversation,) = load_conversations(str(write_jsonl(tmp_path / "lf.jsonl", [row]))).conversations
    assert conversation[0]["tools"] == [CALC]
    assert conversation[2]["tool_calls"][0]["function"] == {"name": "calculator",
                                                            "arguments": '{"expression": "12*34"}'}
    assert [m["role"] for m in conversation] == ["system", "user", "assistant", "tool", "assistant"]


def _with(**changes) -> dict:
    row = json.loads(json.dumps(TRL))
    for index, message in changes.pop("messages", {}).items():
        row["messages"][index] = message
    row.update(changes)
    return row


@pytest.mark.parametrize("row, reason", [
    (_with(tools=[{**CALC, "function": {**CALC["function"], "name": "python"}}]),
     "a call to 'calculator', which is not a declared tool (python)"),
    ({k: v for k, v in TRL.items() if k != "tools"}, "not a declared tool (none are declared)"),
    (_with(messages={1: {"role": "assistant", "content": None, "tool_calls": [
        {"type": "function", "function": {"name": "calculator", "arguments": "{expression: 12*34}"}}]}}),
     "the arguments of the call to 'calculator' are not JSON"),
    (_with(messages={1: {"role": "user", "content": "hm"}}), "a tool result with no tool call before it"),
    (_with(tools="[{"), "'tools' is text but not JSON"),
    (_with(tools=[{"type": "function"}]), "tool 1 is not a"),
    (_with(messages={0: {"role": "user", "content": "q", "tool_calls": [CALL]}}), "only an assistant message does"),
])
def test_bad_tool_rows_stop_with_file_and_line(tmp_path: Path, row: dict, reason: str) -> None:
    path = write_jsonl(tmp_path / "bad.jsonl", [TRL, row])
    with pytest.raises(TinyLMError) as caught:
        load_conversations(str(path))
    message = str(caught.value)
    assert message.startswith(f"{path}:2: ") and reason in message and "\n" not in message
    assert len(load_conversations(str(path), on_error="skip")) == 1


def test_no_learn_reasoning_keeps_reasoning_as_context_outside_the_loss(tmp_path: Path) -> None:
    """builtin:addition's column working is a reasoning segment: with learn_reasoning=False the rows still hold
    it (same ids) but the loss counts only the answer and the end token."""
    import torch

    from test_sft import sft_config
    from tinylm.stages.sft.stage import SFTStage
    from tinylm.train.loop import run_training

    stages = {}
    for learn in (True, False):
        stage = stages[learn] = SFTStage()
        run_training(sft_config(tmp_path / f"learn-{learn}", data="builtin:addition?digits=1",
                                train_examples=16, max_steps=1, learn_reasoning=learn), stage=stage)
    conversations = [list(map(dict, e.messages)) for e in stages[True].task.examples("train", 16, 3)]
    chat = stages[True].chat
    for learn, stage in stages.items():
        learned = int((stage.train_rows["targets"] != -100).sum())
        assert learned == sum(sum(chat.render(c, learn_reasoning=learn).mask) for c in conversations)
    assert torch.equal(stages[True].train_rows["idx"], stages[False].train_rows["idx"])
    answers = sum(len(chat.content_ids(c[-1]["content"])) + 1 for c in conversations)  # answer + end token
    assert int((stages[False].train_rows["targets"] != -100).sum()) == answers

