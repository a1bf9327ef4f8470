"""A conversation with a chat model: turns rendered by the chat format, kept within the model's window.

Each user line becomes a turn; the prompt is the whole conversation in the chat format, ending with
the assistant header, and the reply ends at the end-of-turn token. When the conversation no longer
fits the window with room for a reply, the oldest turns are dropped first (a user turn together with
the reply to it), never the system prompt, and the caller is told how many went, so a long chat
degrades by forgetting its beginning instead of failing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tinylm.errors import TinyLMError
from tinylm.tokenizer.chat_format import ChatFormat


@dataclass
class ChatSession:
    chat: ChatFormat
    window: int  # the model's context length
    reply_room: int  # tokens kept free for the reply
    system: str | None = None
    turns: list[dict[str, str]] = field(default_factory=list)

    def _messages(self, turns: list[dict[str, str]]) -> list[dict[str, str]]:
        head = [{"role": "system", "content": self.system}] if self.system else []
        return head + turns

    def prompt(self, user_text: str) -> tuple[list[int], int]:
        """(prompt ids for the reply to `user_text`, how many old exchanges were dropped to make it fit)."""
        self.turns.append({"role": "user", "content": user_text})
        budget = self.window - self.reply_room
        dropped = 0
        while True:
            ids = self.chat.prompt_ids(self._messages(self.turns))
            if len(ids) <= budget or len(self.turns) == 1:
                break
            del self.turns[:2]  # the oldest user turn and the reply to it
            dropped += 1
        if len(ids) > budget:
            self.turns.pop()
            raise TinyLMError(f"this message ({len(ids)} tokens with the system prompt) leaves no room for a reply "
                              f"in the model's {self.window}-token window; write a shorter one")
        return ids, dropped

    def add_reply(self, text: str) -> None:
        self.turns.append({"role": "assistant", "content": text})

    def reset(self) -> None:
        self.turns.clear()
