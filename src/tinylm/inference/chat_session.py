"""A conversation with a chat model: turns rendered by the chat format, kept within the model's window.

Each user line becomes a turn; the prompt is the whole conversation in the chat format, ending with
the assistant header, and the reply ends at the end-of-turn token. With tools, the system turn
declares them, a reply may be a set of calls, their results come back as tool turns, and the model
is prompted again (`follow_up`) until it answers. When the conversation no longer fits the window
with room for a reply, the oldest exchanges are dropped first (a user turn with everything that
answered it, tool turns included), never the system prompt, and the caller is told how many went,
so a long chat degrades by forgetting its beginning instead of failing. When only the current
exchange is left (a long message, or a tool declaration, call and result in a small window), the
reply gets the room that is left (`room`) rather than none: a 256-token model can still answer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tinylm.errors import TinyLMError
from tinylm.tokenizer.chat_format import ChatFormat


@dataclass
class ChatSession:
    chat: ChatFormat
    window: int  # the model's context length
    reply_room: int  # tokens kept free for the reply
    system: str | None = None
    tools: list[dict[str, Any]] = field(default_factory=list)  # OpenAI declarations of the tools on offer
    turns: list[dict[str, Any]] = field(default_factory=list)

    def _messages(self, turns: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if not self.system and not self.tools:
            return list(turns)
        head: dict[str, Any] = {"role": "system", "content": self.system or ""}
        if self.tools:
            head["tools"] = self.tools
        return [head, *turns]

    def room(self, ids: list[int]) -> int:
        """Tokens the reply to `ids` may take: `reply_room`, or less when only the window's end is left."""
        return max(0, min(self.reply_room, self.window - len(ids)))

    def _fit(self) -> tuple[list[int], int]:
        """Prompt ids for the next reply, dropping the oldest exchanges until they leave room for it."""
        budget = self.window - self.reply_room
        dropped = 0
        while True:
            ids = self.chat.prompt_ids(self._messages(self.turns))
            later_user = next((i for i, t in enumerate(self.turns) if i > 0 and t["role"] == "user"), None)
            if len(ids) <= budget or later_user is None:
                break
            del self.turns[:later_user]  # the oldest user turn and everything that answered it
            dropped += 1
        if self.room(ids) < 1:
            raise TinyLMError(f"this conversation ({len(ids)} tokens with the system prompt) leaves no room for a "
                              f"reply in the model's {self.window}-token window; write a shorter message")
        return ids, dropped

    def prompt(self, user_text: str) -> tuple[list[int], int]:
        """(prompt ids for the reply to `user_text`, how many old exchanges were dropped to make it fit)."""
        self.turns.append({"role": "user", "content": user_text})
        try:
            return self._fit()
        except TinyLMError:
            self.turns.pop()
            raise

    def follow_up(self) -> tuple[list[int], int]:
        """Prompt ids for the reply after the tool results just added."""
        try:
            return self._fit()
        except TinyLMError:
            raise TinyLMError(f"the tool results filled the model's {self.window}-token window: no room for "
                              "an answer; /reset to start over") from None

    def add_reply(self, reply: str | dict[str, Any]) -> None:
        """The model's reply: its text, or the assistant message it parsed into (with calls, reasoning)."""
        self.turns.append({"role": "assistant", "content": reply} if isinstance(reply, str) else reply)

    def add_tool_result(self, content: str) -> None:
        self.turns.append({"role": "tool", "content": content})

    def reset(self) -> None:
        self.turns.clear()
