"""The Ollama Modelfile beside a GGUF export: its TEMPLATE, run by Go's text/template (Ollama's engine), writes
exactly tinylm's chat format, tools, calls and tool results included, and it stops at every end token.

Go comes from Debian's golang-go (CI installs it); without it the rendering tests skip and say why.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from gguf_support import REPO
from test_sft_export import sft_run
from tinylm.checkpoint.load import load_model
from tinylm.interop.gguf_export import GGUF_NAME, export_gguf
from tinylm.tokenizer.chat_format import ChatFormat
from tinylm.tools import get_tools, tool_declarations

RENDER = REPO / "tests" / "ollama_template" / "render.go"
needs_go = pytest.mark.skipif(shutil.which("go") is None, reason="go is not installed (Debian: apt-get install "
                                                                  "golang-go), so Ollama's template engine cannot run")

CONVERSATIONS = [
    [{"role": "user", "content": "What is 2 + 3?"}],
    [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"},
     {"role": "assistant", "content": "hello"}, {"role": "user", "content": "7 - 4?"}],
    [{"role": "user", "content": "quotes \" and {{ braces }} and <tags> stay text"}],
]


# OpenAI's shape, as tinylm renders it; Ollama gets the same conversation in its own (`ollama_message`)
WEATHER = {"type": "function", "function": {
    "name": "weather", "description": "Today's weather at <place> & \"when\" (° or K)",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "a city"}, "days": {"type": "integer"},
        "unit": {"type": ["string", "null"], "enum": ["C", "F"]}}, "required": ["city", "days"]}}}
TOOLS = [*tool_declarations(get_tools("calculator,python")), WEATHER]


def call(name: str, arguments: dict[str, Any] | str) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "arguments": arguments}}


TOOL_CONVERSATIONS = [
    [{"role": "user", "content": "What is 347 * 582?"},
     {"role": "assistant", "content": "", "tool_calls": [call("calculator", {"expression": "347*582"})]},
     {"role": "tool", "content": "201954"}],
    [{"role": "system", "content": "be brief"}, {"role": "user", "content": "Paris, and 2**10?"},
     {"role": "assistant", "content": "Two calls.", "reasoning_content": "weather, then math",
      "tool_calls": [call("weather", '{"city": "Paris", "days": 3, "unit": "C"}'),
                     call("python", {"code": "print(2**10 < 1e4 and 'a\tb')\n"})]},
     {"role": "tool", "content": "sunny"}, {"role": "tool", "content": "a\tb"},
     {"role": "assistant", "content": "Sunny; 1024."}, {"role": "user", "content": "thanks"}],
]


def ollama_message(message: dict[str, Any]) -> dict[str, Any]:
    """A tinylm (OpenAI-style) message as a client sends it to Ollama's /api/chat: arguments as an object."""
    out = {"role": message["role"], "content": message.get("content") or ""}
    if message.get("reasoning_content"):
        out["thinking"] = message["reasoning_content"]
    calls = [c["function"] for c in message.get("tool_calls", [])]
    if calls:
        out["tool_calls"] = [{"function": {"name": c["name"], "arguments": json.loads(c["arguments"]) if isinstance(
            c["arguments"], str) else c["arguments"]}} for c in calls]
    return out


@pytest.fixture(scope="module")
def chat_export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return export_gguf(sft_run(0), tmp_path_factory.mktemp("ollama") / "gguf").folder


def modelfile_parts(folder: Path) -> tuple[str, str, list[str], dict[str, str]]:
    """(FROM, TEMPLATE, stop tokens, other parameters) as Ollama's Modelfile parser reads them."""
    text = (folder / "Modelfile").read_text()
    assert not re.search(r"^# ", text, re.M)  # a llama model: no caveat
    source = re.search(r"^FROM (.+)$", text, re.M).group(1)
    template = re.search(r'^TEMPLATE """(.*?)"""$', text, re.M | re.S).group(1)
    stops = [json.loads(v) for v in re.findall(r"^PARAMETER stop (.+)$", text, re.M)]
    params = dict(re.findall(r"^PARAMETER (?!stop)(\S+) (.+)$", text, re.M))
    return source, template, stops, params


def go_render(template: str, messages: list[dict[str, Any]], prompt: str = "", tmp: Path | None = None,
              tools: list[dict[str, Any]] | None = None) -> str:
    """`template` run by Go's text/template on an Ollama /api/chat request's messages and tools."""
    env = {**os.environ, "GOCACHE": str(tmp or Path("/tmp")), "GOFLAGS": "-mod=mod", "GO111MODULE": "off"}
    request = {"template": template, "messages": [ollama_message(m) for m in messages], "prompt": prompt,
               "tools": tools}
    done = subprocess.run(["go", "run", str(RENDER)], input=json.dumps(request),
                          capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_modelfile_names_the_file_its_stops_and_context(chat_export: Path) -> None:
    source, _, stops, params = modelfile_parts(chat_export)
    assert source == f"./{GGUF_NAME}" and (chat_export / GGUF_NAME).is_file()
    assert stops == ["<|endoftext|>", "<|end|>"]  # every token that ends a generation
    assert params == {"num_ctx": str(load_model(sft_run(0))[0].config.context_length)}


@needs_go
def test_ollama_renders_tinylm_chat_format(chat_export: Path, tmp_path: Path) -> None:
    tokenizer = load_model(sft_run(0))[1]
    chat = ChatFormat.from_tokenizer(tokenizer)
    _, template, _, _ = modelfile_parts(chat_export)
    for messages in CONVERSATIONS:
        rendered = go_render(template, messages, tmp=tmp_path)
        assert tokenizer.encode(rendered) == chat.prompt_ids(messages), rendered


@needs_go
def test_a_final_assistant_message_is_left_open_as_ollama_continues_it(chat_export: Path, tmp_path: Path) -> None:
    tokenizer = load_model(sft_run(0))[1]
    chat = ChatFormat.from_tokenizer(tokenizer)
    _, template, _, _ = modelfile_parts(chat_export)
    messages = [{"role": "user", "content": "2 + 2?"}, {"role": "assistant", "content": "The answer is"}]
    rendered = go_render(template, messages, tmp=tmp_path)
    closed = chat.render(messages).ids
    assert tokenizer.encode(rendered) == closed[:-1]  # all but the final <|end|>: the reply goes on from there
    assert closed[-1] == tokenizer.special_tokens["<|end|>"]


@needs_go
def test_a_base_model_template_is_the_prompt_and_stops_at_end_of_text(tmp_path: Path) -> None:
    from gguf_support import bpe_tokenizer, random_checkpoint
    from model_variants import modern_config

    checkpoint = random_checkpoint(tmp_path, "base", modern_config("gqa", vocab_size=320), bpe_tokenizer(tmp_path))
    folder = export_gguf(checkpoint, tmp_path / "gguf").folder
    _, template, stops, _ = modelfile_parts(folder)
    assert stops == ["<|endoftext|>"]
    assert go_render(template, [], prompt="def add(a, b):", tmp=tmp_path) == "def add(a, b):"


@needs_go
def test_ollama_renders_tools_calls_and_results_as_tinylm_does(chat_export: Path, tmp_path: Path) -> None:
    """Tools declared in the system turn, reasoning, calls and tool turns: tinylm's ids, so Ollama offers tools."""
    tokenizer = load_model(sft_run(0))[1]
    chat = ChatFormat.from_tokenizer(tokenizer)
    _, template, _, _ = modelfile_parts(chat_export)
    assert chat.speaks_tools and "{{- if .Tools }}" in template and 'eq .Role "tool"' in template
    for messages in TOOL_CONVERSATIONS:
        rendered = go_render(template, messages, tools=TOOLS, tmp=tmp_path)
        assert tokenizer.encode(rendered) == chat.prompt_ids(messages, TOOLS), rendered
    for messages in CONVERSATIONS:  # without tools the template writes what it wrote before
        assert tokenizer.encode(go_render(template, messages, tmp=tmp_path)) == chat.prompt_ids(messages)


def test_a_chat_format_without_tool_calls_gets_no_tool_parts() -> None:
    from tinylm.interop.ollama_modelfile import modelfile

    text = modelfile("model.gguf", 64, ["<|endoftext|>", "<|end|>"], "<|endoftext|>", chat=True)
    assert ".Tools" not in text and ".ToolCalls" not in text
