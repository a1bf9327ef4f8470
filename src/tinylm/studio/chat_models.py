"""Talking to a run's checkpoint from the studio, through the serving engine `tinylm serve` uses.

A chat request names a run (and optionally one of its checkpoints) and carries the whole conversation
in OpenAI's shape, so every turn is sent every time, never only the last one. The checkpoint is loaded
on first use into a `ServedModel` with its own scheduler thread, exactly as `tinylm serve` builds it,
and the reply comes from the server's own chat route (`serve.app.chat_reply`): the same chat format,
sampling, stop handling, window checks and errors. A few models stay loaded (side by side needs
two); the least recently used one is stopped when another is asked for.

A checkpoint can chat when its config.json carries a chat template (SFT, DPO and RL runs); a base
model's is refused with the reason. A request may ask for the built-in tools (`builtin_tools`: the
calculator, Python in the sandbox), which then run as `tinylm serve --tools` runs them; a model
whose tokenizer has no tool tokens is told so in one line.
"""

from __future__ import annotations

import asyncio
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request
from pydantic import ValidationError

from tinylm.checkpoint.layout import list_checkpoints
from tinylm.errors import TinyLMError
from tinylm.inference.loading import load_for_generation
from tinylm.serve.app import chat_reply
from tinylm.serve.protocol import ChatCompletionRequest
from tinylm.serve.served_model import ServedModel
from tinylm.studio.post_body import json_body
from tinylm.studio.runs import StudioError, find_runs, newest_checkpoint_config, resolve_run, run_name
from tinylm.tools.registry import BUILTIN_TOOLS, get_tools

LOADED = 2  # models kept in memory: two panes side by side


def chat_checkpoints(root: Path) -> list[dict[str, Any]]:
    """Every run under the root whose newest checkpoint can chat (it carries a chat template and is a language
    model: a reward model has the template of the SFT run it grew from, and would only be refused), newest first
    within a run: {"run", "stage", "checkpoints": [names]}."""
    found = []
    for run_dir in find_runs(root):
        checkpoints = list_checkpoints(run_dir)
        config = newest_checkpoint_config(checkpoints)
        if config.get("chat_template") and config.get("reward_head") is None:
            found.append({"run": run_name(root, run_dir), "stage": config.get("stage"),
                          "checkpoints": [c.name for c in reversed(checkpoints)]})
    return found


class ChatModels:
    """The loaded checkpoints, least recently used first; loading and stopping happen off the event loop."""

    def __init__(self, root: Path, capacity: int = LOADED) -> None:
        self.root = root
        self.capacity = capacity
        self.loaded: OrderedDict[Path, ServedModel] = OrderedDict()
        self.lock = threading.Lock()

    def checkpoint(self, run: str, checkpoint: str | None) -> tuple[Path, str]:
        """(checkpoint folder, served name) of a run's named checkpoint, or its newest."""
        run_dir = resolve_run(self.root, run)
        checkpoints = {c.name: c for c in list_checkpoints(run_dir)}
        if not checkpoints:
            raise StudioError(f"{run} has no checkpoint yet", 404)
        name = list(checkpoints)[-1] if checkpoint is None else checkpoint  # oldest first: the last is the newest
        if name not in checkpoints:
            raise StudioError(f"{run} has no checkpoint {checkpoint!r} (it has {', '.join(checkpoints)})", 404)
        return checkpoints[name], f"{run}@{name}"

    def get(self, path: Path, name: str) -> ServedModel:
        """The served model of a checkpoint, loaded (and its scheduler started) on first use."""
        with self.lock:
            if path in self.loaded:
                self.loaded.move_to_end(path)
                return self.loaded[path]
            try:
                model, tokenizer, meta = load_for_generation(str(path))
            except TinyLMError as exc:
                raise StudioError(str(exc), 409) from None
            except (OSError, RuntimeError, ValueError) as exc:  # a damaged checkpoint: one line, not a 500
                raise StudioError(f"cannot load {name}: {str(exc).splitlines()[0]}", 409) from None
            if not meta.get("chat_template"):
                raise StudioError(f"{name} is not a chat model (no chat template: a base model continues text; "
                                  "fine-tune it with tinylm sft)", 409)
            # the built-in tools run only for a request that asks (the page's tool boxes): python in the sandbox
            served = ServedModel.build(name, model, tokenizer, meta=meta, tools=get_tools(list(BUILTIN_TOOLS)))
            served.scheduler.start()
            self.loaded[path] = served
            evicted = [self.loaded.popitem(last=False)[1] for _ in range(len(self.loaded) - self.capacity)]
        for old in evicted:  # outside the lock: requests it is answering finish first, other chats go on
            old.scheduler.stop()
        return served

    def close(self) -> None:
        with self.lock:
            for served in self.loaded.values():
                served.scheduler.stop()
            self.loaded.clear()


def chat_routes(models: ChatModels) -> APIRouter:
    """GET /api/chat/models: what can chat; POST /api/chat: one reply (or a stream) from one checkpoint."""
    routes = APIRouter()

    @routes.get("/api/chat/models")
    async def chat_models() -> dict[str, Any]:
        return {"models": await asyncio.to_thread(chat_checkpoints, models.root)}

    @routes.post("/api/chat")
    async def chat(request: Request) -> Any:
        body = await json_body(request)
        run, checkpoint = body.pop("run", None), body.pop("checkpoint", None)
        if not isinstance(run, str) or not run:
            raise StudioError("name the run to chat with: {\"run\": NAME, \"messages\": [...]}")
        path, name = models.checkpoint(run, checkpoint if isinstance(checkpoint, str) and checkpoint else None)
        try:
            asked = ChatCompletionRequest.model_validate({**body, "model": name})
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(part) for part in first.get("loc", ()))
            raise StudioError(f"{where or 'body'}: {first.get('msg', 'invalid request')}", 422) from None
        served = await asyncio.to_thread(models.get, path, name)
        return await chat_reply(served, asked, request)

    return routes
