"""Tools, tool calls and reasoning in the chat format: the mask, the checks, and transformers rendering our ids."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tinylm.errors import TinyLMError
from tinylm.interop.hf_tokenizer import write_hf_tokenizer
from tinylm.tokenizer import train_bpe
from tinylm.tokenizer.chat_format import ChatFormat
from tinylm.tokenizer.chat_tokens import (
    CALL,
    CHAT_TOKENS,
    END_CALL,
    END_OF_TURN,
    END_THINK,
    ROLE_TOKENS,
    THINK,
    TOOL_ROLE,
)
from tinylm.tokenizer.tool_calls import call_parts, tools_text

EOT = "<|endoftext|>"
CORPUS = ["Hello there! What is 12 * 34? Let me use the calculator.\n" * 20,
          '{"expression": "12*34"} {"name": "calculator"}\n' * 20, "東京 Москва café 🙂 naïve " * 20]
SPECIALS = (EOT, *CHAT_TOKENS)
MARKERS = "\U000f0000\U000f0001"
NAMES = ["calculator", "python", "lookup_städte"]


@pytest.fixture(scope="module")
def fmt() -> ChatFormat:
    return ChatFormat.from_tokenizer(train_bpe(CORPUS, vocab_size=420))


PIECES = ["hello", " world", "🙂", "東京", "\n", "  ", "<|", "|>", "<|call", "/think|>", '{"a": 1}', ""]
plain = st.one_of(st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters=MARKERS),
                          max_size=24),
                  st.lists(st.sampled_from(PIECES), max_size=6).map("".join)).filter(
    lambda text: not any(token in text for token in SPECIALS))
tricky = st.lists(st.one_of(st.sampled_from(SPECIALS), plain), min_size=1, max_size=4).map("".join)
json_value = st.recursive(st.one_of(st.integers(-10**6, 10**6), plain, st.booleans(), st.none()),
                          lambda inner: st.lists(inner, max_size=3), max_leaves=4)


def _tool(name: str) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "description": f"the {name} tool",
                                             "parameters": {"type": "object", "properties": {"x": {"type": "string"}}}}}


@st.composite
def conversations(draw: st.DrawFn, text: st.SearchStrategy[str]) -> tuple[list[dict[str, Any]], list[dict]]:
    """Tools (maybe none), an optional system prompt, then exchanges: user, assistant (reasoning? calls?),
    a tool result per call, and the assistant's answer after them."""
    tools = [_tool(name) for name in draw(st.lists(st.sampled_from(NAMES), max_size=3, unique=True))]
    messages: list[dict[str, Any]] = [{"role": "system", "content": draw(text)}] if draw(st.booleans()) else []
    for _ in range(draw(st.integers(1, 3))):
        messages.append({"role": "user", "content": draw(text)})
        assistant: dict[str, Any] = {"role": "assistant", "content": draw(text)}
        if draw(st.booleans()):
            assistant["reasoning_content"] = draw(text)
        calls = []
        for _ in range(draw(st.integers(0, 2)) if tools else 0):
            name = draw(st.sampled_from(tools))["function"]["name"]
            arguments = draw(st.dictionaries(st.sampled_from(["x", "y", "ß"]), json_value, max_size=2))
            as_text = draw(st.booleans())  # OpenAI sends the JSON text, transformers users a dict
            function = {"name": name, "arguments": json.dumps(arguments) if as_text else arguments}
            calls.append({"type": "function", "function": function} if draw(st.booleans()) else function)
        if calls:
            assistant["tool_calls"] = calls
            if draw(st.booleans()):
                assistant["content"] = None  # as OpenAI sends it
        messages.append(assistant)
        if calls:
            messages += [{"role": "tool", "content": draw(text)} for _ in calls]
            messages.append({"role": "assistant", "content": draw(text)})
    return messages, tools


def reference_mask(ids: list[int], fmt: ChatFormat, learn_reasoning: bool) -> list[int]:
    """Read the mask off the ids: 1 from after <|assistant|> through its <|end|>, but 0 inside a <|think|>
    segment when reasoning is not learned; everything else (system, user, tool turns) 0."""
    agent = fmt.agent_ids
    assert agent is not None
    mask, inside, thinking = [], False, False
    for token in ids:
        if token == agent[THINK]:
            thinking = True
        mask.append(int(inside and (learn_reasoning or not thinking)))
        if token == agent[END_THINK]:
            thinking = False
        if token == fmt.role_ids["assistant"]:
            inside = True
        elif token == fmt.end_id:
            inside = False
    return mask


def as_text(messages: list[dict[str, Any]], tools: list[dict]) -> str:
    """The conversation written out by hand, as the format's docstring lays it out."""
    out = EOT
    if tools and messages[0]["role"] != "system":
        messages = [{"role": "system", "content": ""}, *messages]
    for m in messages:
        if m["role"] == "system":
            out += ROLE_TOKENS["system"] + tools_text(m["content"], tools) + END_OF_TURN
        elif m["role"] == "tool":
            out += TOOL_ROLE + m["content"] + END_OF_TURN
        elif m["role"] == "user":
            out += ROLE_TOKENS["user"] + m["content"] + END_OF_TURN
        else:
            think = f"{THINK}{m['reasoning_content']}{END_THINK}" if m.get("reasoning_content") else ""
            calls = "".join(f"{CALL}{call_parts(c)[0]}\n{call_parts(c)[1]}{END_CALL}" for c in m.get("tool_calls", []))
            out += ROLE_TOKENS["assistant"] + think + (m["content"] or "") + calls + END_OF_TURN
    return out


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(conversations(st.one_of(plain, tricky)), st.booleans())
def test_mask_covers_what_the_assistant_writes_and_never_a_tool_result(fmt: ChatFormat, drawn, learn: bool) -> None:
    messages, tools = drawn
    rendered = fmt.render(messages, tools, learn_reasoning=learn)
    ids, mask = rendered.ids, rendered.mask
    assert len(ids) == len(mask) and mask == reference_mask(ids, fmt, learn)
    assert fmt.tokenizer.decode(ids) == as_text(messages, tools)
    tool_turn = fmt.role_ids["tool"]
    for start in [i for i, t in enumerate(ids) if t == tool_turn]:  # a tool turn, to its <|end|>, is never learned
        end = ids.index(fmt.end_id, start)
        assert not any(mask[start:end + 1])
    n_assistant = sum(m["role"] == "assistant" for m in messages)
    assert rendered.n_learn == sum(mask) - n_assistant
    markers = [t for t in ids if t in fmt.tokenizer.special_tokens.values()]
    n_calls = sum(len(m.get("tool_calls", [])) for m in messages)
    n_think = sum(bool(m.get("reasoning_content")) for m in messages)
    has_system = bool(tools) or messages[0]["role"] == "system"
    assert len(markers) == 1 + 2 * (len(messages) + (bool(tools) and messages[0]["role"] != "system")) + \
        2 * n_calls + 2 * n_think  # contents never add a special token, whatever they say
    assert has_system == (ids[1] == fmt.role_ids["system"])
    if messages[-1]["role"] == "tool":
        assert fmt.prompt_ids(messages, tools) == [*ids, fmt.role_ids["assistant"]]


def test_a_message_without_reasoning_gets_no_empty_block(fmt: ChatFormat) -> None:
    """No <|think|><|/think|> is ever inserted: an empty or missing reasoning writes nothing (TRL #2919)."""
    for extra in ({}, {"reasoning_content": ""}, {"reasoning_content": None}):
        ids = fmt.render([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo", **extra}]).ids
        assert fmt.agent_ids is not None and fmt.agent_ids[THINK] not in ids
    # transformers' other names for the reasoning render it too
    for key in ("thinking", "reasoning"):
        rendered = fmt.render([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "4", key: "2+2"}])
        assert fmt.tokenizer.decode(rendered.ids).endswith(f"{THINK}2+2{END_THINK}4{END_OF_TURN}")


def test_tools_on_the_system_message_are_the_tools_argument(fmt: ChatFormat) -> None:
    """SFT data carries a conversation's tools on its system message; it renders as `tools=` does."""
    tools = [_tool("calculator")]
    chat = [{"role": "user", "content": "2*3?"}, {"role": "assistant", "content": "6"}]
    carried = [{"role": "system", "content": "", "tools": tools}, *chat]
    assert fmt.render(carried).ids == fmt.render(chat, tools).ids == fmt.render(carried[:1] + chat, tools).ids


TOOLS = [_tool("calculator")]
CALLED = {"role": "assistant", "content": None,
          "tool_calls": [{"type": "function", "function": {"name": "calculator", "arguments": '{"x": "2"}'}}]}


@pytest.mark.parametrize(("messages", "tools", "error"), [
    ([{"role": "user", "content": "a"}, CALLED], [_tool("python")], "a call to 'calculator', which is not a declared"),
    ([{"role": "user", "content": "a"}, CALLED], None, "not a declared tool (none are declared)"),
    ([{"role": "user", "content": "a"}, {**CALLED, "tool_calls": [{"name": "calculator", "arguments": "{x: 2}"}]}],
     TOOLS, "the arguments of the call to 'calculator' are not JSON"),
    ([{"role": "user", "content": "a"}, {**CALLED, "tool_calls": [{"name": "calculator", "arguments": "[2]"}]}],
     TOOLS, "must be a JSON object"),
    ([{"role": "user", "content": "a"}, {"role": "tool", "content": "6"}], TOOLS, "with no tool call before it"),
    ([{"role": "user", "content": "a"}, CALLED, {"role": "tool", "content": "6"}, {"role": "tool", "content": "7"}],
     TOOLS, "message 4 (tool): a tool result with no tool call before it"),
    ([{"role": "user", "content": "a", "tool_calls": CALLED["tool_calls"]}], TOOLS, "only an assistant message has"),
    ([{"role": "user", "content": "a", "reasoning_content": "hm"}], None, "only an assistant message has"),
    ([{"role": "user", "content": "a"}], [{"name": "calculator"}], "tool 1 is not a"),
    ([{"role": "user", "content": "a"}], [_tool("calculator"), _tool("calculator")], "'calculator' is declared twice"),
    ([{"role": "user", "content": "a"}, {"role": "assistant", "content": None}], None, "content must be a string"),
])
def test_bad_tool_use_is_one_line(fmt: ChatFormat, messages, tools, error: str) -> None:
    assert error in (fmt.problem(messages, tools) or "")
    with pytest.raises(TinyLMError, match="message|tool"):
        fmt.render(messages, tools)


def test_a_tokenizer_without_agent_tokens_chats_but_refuses_tools() -> None:
    """A tokenizer from before the agent tokens still renders plain chats; tools and reasoning name what to do."""
    from tinylm.tokenizer.hf_json import tokenizer_from_hf_json

    spec = json.loads(train_bpe(CORPUS, vocab_size=420).to_json())
    spec["added_tokens"] = [t for t in spec["added_tokens"] if t["content"] not in CHAT_TOKENS[4:]]
    old = ChatFormat.from_tokenizer(tokenizer_from_hf_json(json.dumps(spec)))
    assert not old.speaks_tools and old.roles == ("system", "user", "assistant")
    assert old.render([{"role": "user", "content": "hi"}]).ids
    for messages, tools in (([{"role": "user", "content": "a"}], TOOLS),
                            ([{"role": "tool", "content": "6"}], None),
                            ([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b",
                                                                  "reasoning_content": "c"}], None)):
        with pytest.raises(TinyLMError, match="needs the agent tokens .* fine-tune it with tinylm sft"):
            old.render(messages, tools)
    assert THINK not in old.jinja_template() and ROLE_TOKENS["user"] in old.jinja_template()


# ---- transformers renders the same ids and mask ----------------------------------------------------
transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def hf(fmt: ChatFormat, tmp_path_factory: pytest.TempPathFactory):
    folder = tmp_path_factory.mktemp("hf")
    source = fmt.tokenizer.save(tmp_path_factory.mktemp("ckpt"))
    write_hf_tokenizer(source, folder, context_length=512, chat_template=fmt.jinja_template())
    return transformers.AutoTokenizer.from_pretrained(str(folder))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(conversations(plain), st.booleans())
def test_apply_chat_template_with_tools_gives_our_ids_and_mask(fmt: ChatFormat, hf, drawn, learn: bool) -> None:
    messages, tools = drawn
    ours = fmt.render(messages, tools, learn_reasoning=learn)
    theirs = hf.apply_chat_template(messages, tools=tools or None, tokenize=True, return_dict=True,
                                    return_assistant_tokens_mask=True, learn_reasoning=learn)
    assert theirs["input_ids"] == ours.ids
    assert theirs["assistant_masks"] == ours.mask
    if messages[-1]["role"] != "assistant":
        prompt = hf.apply_chat_template(messages, tools=tools or None, tokenize=True, return_dict=False,
                                        add_generation_prompt=True)
        assert prompt == fmt.prompt_ids(messages, tools)


def test_template_learns_reasoning_by_default_and_refuses_unknown_roles(fmt: ChatFormat, hf) -> None:
    from jinja2 import TemplateError

    messages = [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4", "reasoning_content": "2+2"}]
    theirs = hf.apply_chat_template(messages, tokenize=True, return_dict=True, return_assistant_tokens_mask=True)
    assert theirs["assistant_masks"] == fmt.render(messages).mask
    with pytest.raises(TemplateError):
        hf.apply_chat_template([{"role": "robot", "content": "a"}], tokenize=False)


def test_exported_folder_carries_the_agent_tokens(tmp_path: Path, fmt: ChatFormat) -> None:
    source = fmt.tokenizer.save(tmp_path / "ckpt")
    (tmp_path / "hf").mkdir()
    write_hf_tokenizer(source, tmp_path / "hf", context_length=64, chat_template=fmt.jinja_template())
    config = json.loads((tmp_path / "hf" / "tokenizer_config.json").read_text())
    assert sorted(config["extra_special_tokens"]) == sorted(CHAT_TOKENS)
