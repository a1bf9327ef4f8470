"""The built-in tools by name, each with the OpenAI declaration a conversation carries and the function it runs.

    tinylm chat --tools calculator,python        get_tools("calculator,python")

A tool's function takes the call's arguments (a dict) and returns the result text, or raises: the
error's message then becomes the result, so a model that calls badly reads why (`run_call.py`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tinylm.errors import TinyLMError
from tinylm.tools.calculator import calculate
from tinylm.tools.python_tool import run_program

if TYPE_CHECKING:
    from tinylm.tokenizer.chat_format import ChatFormat


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    argument: str  # the one string parameter the tool reads
    function: Callable[[str], str]

    def declaration(self) -> dict[str, Any]:
        """The tool as OpenAI declares it: {"type": "function", "function": {name, description, parameters}}.

        Short on purpose: it is context in every conversation that offers the tool, and a small model's
        window is small."""
        parameters = {"type": "object", "properties": {self.argument: {"type": "string"}}, "required": [self.argument]}
        return {"type": "function", "function": {"name": self.name, "description": self.description,
                                                 "parameters": parameters}}

    def run(self, arguments: dict[str, Any]) -> str:
        value = arguments.get(self.argument)
        if not isinstance(value, str):
            raise ValueError(f"{self.name} needs a string argument {self.argument!r}")
        unknown = sorted(set(arguments) - {self.argument})
        if unknown:
            raise ValueError(f"{self.name} takes only {self.argument!r}, not {', '.join(map(repr, unknown))}")
        return self.function(value)


BUILTIN_TOOLS: dict[str, Tool] = {
    "calculator": Tool("calculator", "Exact arithmetic, e.g. 347*582.", "expression", calculate),
    "python": Tool("python", "Runs a Python program and returns what it prints.", "code", run_program),
}


def get_tools(names: str | list[str] | None) -> list[Tool]:
    """The built-in tools named (a comma-separated string or a list); none for None or ""."""
    if not names:
        return []
    wanted = [name.strip() for name in (names.split(",") if isinstance(names, str) else names) if name.strip()]
    unknown = [name for name in wanted if name not in BUILTIN_TOOLS]
    if unknown:
        raise TinyLMError(f"unknown tool {unknown[0]!r}: the built-in tools are {', '.join(BUILTIN_TOOLS)}")
    return [BUILTIN_TOOLS[name] for name in dict.fromkeys(wanted)]


def tool_declarations(tools: list[Tool]) -> list[dict[str, Any]]:
    return [tool.declaration() for tool in tools]


def check_can_call(tools: list[Tool], chat: ChatFormat | None, path: object) -> None:
    """`--tools` on a model that cannot call them (a base model, or one fine-tuned before the tool tokens)
    is one line saying why, in every command that takes it."""
    if not tools:
        return
    if chat is None:
        raise TinyLMError(f"--tools needs a chat model; {path} is a base model: fine-tune it with tinylm sft")
    if not chat.speaks_tools:
        raise TinyLMError(f"--tools needs the tool tokens, which {path} was fine-tuned before: fine-tune it "
                          "again with this version of tinylm sft")
