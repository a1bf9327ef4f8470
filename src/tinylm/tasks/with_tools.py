"""A task whose prompts declare tools it does not offer itself: `tinylm rl --task builtin:arith --tools calculator`.

The prompts gain the declarations on their system turn (one is made when there is none), so the
rollouts and the held-out evaluation offer the same tools; the problems, the split and the verifier
are the task's own.
"""

from __future__ import annotations

from typing import Any

from tinylm.tasks.task import Example, Task
from tinylm.tools.registry import Tool, tool_declarations


class WithTools(Task):
    def __init__(self, task: Task, tools: list[Tool]) -> None:
        self.task, self.name = task, task.name
        self.tools = tuple(tool.name for tool in tools)
        self.reply_tokens = task.reply_tokens
        self.declared = tool_declarations(tools)

    def examples(self, split: str, n: int, seed: int = 0) -> list[Example]:
        return [self._declaring(example) for example in self.task.examples(split, n, seed)]

    def verify(self, response: str, example: Example) -> bool:
        return self.task.verify(response, example)

    def wrong_answers(self, example: Example) -> dict[str, str]:
        return self.task.wrong_answers(example)

    def preferred_answer(self, example: Example) -> str:
        return self.task.preferred_answer(example)

    def _declaring(self, example: Example) -> Example:
        messages: list[dict[str, Any]] = [dict(m) for m in example.messages]
        prompt_turns = example.prompt_turns
        if messages and messages[0]["role"] == "system":
            messages[0]["tools"] = self.declared
        else:
            messages.insert(0, {"role": "system", "content": "", "tools": self.declared})
            prompt_turns = None if prompt_turns is None else prompt_turns + 1
        return Example(example.key, tuple(messages), example.answer, prompt_turns)
