"""The studio's Inside page: every `tinylm inspect` view of a run's checkpoint, for a prompt typed on the page.

    GET /api/inside/lens?name=RUN&prompt=T[&target=TOK&top=K&step=N]
    GET /api/inside/attention?name=RUN&prompt=T[&step=N]
    GET /api/inside/attribution?name=RUN&prompt=T[&target=TOK&versus=TOK&step=N]
    GET /api/inside/patch?name=RUN&clean=T&corrupt=T[&metric=M&answer=TOK&wrong=TOK&step=N]
    GET /api/inside/neurons?name=RUN&layer=L&neuron=I | &token=TOK [&step=N]
    GET /api/inside/induction?name=RUN
    GET /api/inside/steps?name=RUN          the steps its checkpoints and snapshots hold (step=N picks one)

Each answer is the JSON `tinylm inspect VIEW --json` prints, from the same functions (interpret/); `chat=true`
reads the prompts as a user message of a chat model, as `--chat` does. A loaded
model is kept while its checkpoint is unchanged, and one request inspects at a time: the hooks are
attached to that one model. A checkpoint that cannot be inspected (a reward model, damaged files, no
tokenizer) is a 4xx naming why.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Query

from tinylm.checkpoint.layout import SNAPSHOTS, WEIGHTS, list_checkpoints
from tinylm.errors import TinyLMError
from tinylm.interpret.attention import attention_view
from tinylm.interpret.attribution import logit_attribution
from tinylm.interpret.induction import induction_curve
from tinylm.interpret.lens import logit_lens
from tinylm.interpret.loading import load_for_inspection
from tinylm.interpret.neurons import embedding_neighbours, top_activations
from tinylm.interpret.patching import activation_patching
from tinylm.studio.runs import StudioError, resolve_run

PROMPT_LIMIT = 2_000  # characters


CANNOT_INSPECT = ("reward model", "corrupt checkpoint", "cannot load checkpoint", "no tokenizer")


def refusal(exc: TinyLMError) -> StudioError:
    """409 for a checkpoint that cannot be inspected at all, 400 for a question it cannot answer."""
    message = str(exc)
    return StudioError(message, 409 if any(words in message for words in CANNOT_INSPECT) else 400)


class InsideModels:
    """The last few checkpoints loaded for inspection, by path and modification time."""

    def __init__(self, keep: int = 2) -> None:
        self.keep, self.lock, self.loaded = keep, threading.Lock(), {}
        self.curves: dict[tuple[str, ...], dict[str, Any]] = {}

    def checkpoint(self, run: Path, step: int | None) -> Path:
        """The run's newest checkpoint, or its checkpoint or snapshot at `step`."""
        found = list_checkpoints(run)
        if step is not None:
            found = [p for p in [*list_checkpoints(run / SNAPSHOTS), *found] if p.name == f"step_{step:08d}"]
        if not found:
            raise StudioError(f"{run.name} has no checkpoint" + (f" at step {step}" if step is not None else ""), 404)
        return found[-1]

    def run(self, run: Path, step: int | None, view: Callable[[Any], dict[str, Any]]) -> dict[str, Any]:
        """`view(inspected)` on the run's checkpoint (newest, or at `step`), errors as a 4xx."""
        path = self.checkpoint(run, step)
        key = (str(path), (path / WEIGHTS).stat().st_mtime_ns)
        with self.lock:
            try:
                if key not in self.loaded:
                    while len(self.loaded) >= self.keep:
                        self.loaded.pop(next(iter(self.loaded)))
                    self.loaded[key] = load_for_inspection(path)
                return view(self.loaded[key])
            except TinyLMError as exc:
                raise refusal(exc) from None

    def induction(self, run: Path) -> dict[str, Any]:
        """The run's induction curve, kept until a checkpoint or snapshot is added."""
        key = tuple(str(p) for p in [*list_checkpoints(run / SNAPSHOTS), *list_checkpoints(run)])
        with self.lock:
            if key not in self.curves:
                try:
                    self.curves = {key: induction_curve(run)}
                except TinyLMError as exc:
                    raise refusal(exc) from None
            return self.curves[key]


def inside_routes(root: Path) -> APIRouter:
    routes = APIRouter()
    models = InsideModels()

    async def answer(name: str, step: int | None, view: Callable[[Any], dict[str, Any]]) -> dict[str, Any]:
        return await asyncio.to_thread(models.run, resolve_run(root, name), step, view)

    def text() -> Any:  # a fresh Query per parameter: FastAPI writes each parameter's name into its own
        return Query(..., min_length=1, max_length=PROMPT_LIMIT)

    @routes.get("/api/inside/lens")
    async def lens(name: str, prompt: str = text(), chat: bool = False, target: str | None = None,
                   top: int = Query(5, ge=1, le=50), step: int | None = None) -> dict[str, Any]:

        def view(i: Any) -> dict[str, Any]:
            return logit_lens(i, i.encode(prompt, chat=chat), top, i.token_id(target) if target else None)
        return await answer(name, step, view)

    @routes.get("/api/inside/attention")
    async def attention(name: str, prompt: str = text(), chat: bool = False, layer: int | None = None,
                        step: int | None = None) -> dict[str, Any]:

        return await answer(name, step, lambda i: attention_view(i, i.encode(prompt, chat=chat), layer))

    @routes.get("/api/inside/attribution")
    async def attribution(name: str, prompt: str = text(), chat: bool = False, target: str | None = None,
                          versus: str | None = None, step: int | None = None) -> dict[str, Any]:

        def view(i: Any) -> dict[str, Any]:
            return logit_attribution(i, i.encode(prompt, chat=chat), i.token_id(target) if target else None,
                                     i.token_id(versus, "versus token") if versus else None)
        return await answer(name, step, view)

    @routes.get("/api/inside/patch")
    async def patch(name: str, clean: str = text(), corrupt: str = text(), chat: bool = False,
                    metric: str = "logit_diff",
                    answer_token: str | None = Query(None, alias="answer"), wrong: str | None = None,
                    step: int | None = None) -> dict[str, Any]:

        def view(i: Any) -> dict[str, Any]:
            return activation_patching(i, i.encode(clean, "clean prompt", chat),
                                       i.encode(corrupt, "corrupted prompt", chat), metric,
                                       i.token_id(answer_token, "answer") if answer_token else None,
                                       i.token_id(wrong, "wrong answer") if wrong else None)
        return await answer(name, step, view)

    @routes.get("/api/inside/neurons")
    async def neurons(name: str, layer: int = 0, neuron: int | None = None, token: str | None = None,
                      top: int = Query(10, ge=1, le=50), step: int | None = None) -> dict[str, Any]:

        def view(i: Any) -> dict[str, Any]:
            if token:
                return embedding_neighbours(i, i.token_id(token, "token"), top)
            if neuron is None:
                raise TinyLMError("give a neuron (with its layer) or a token")
            return top_activations(i, layer, neuron, top=top)
        return await answer(name, step, view)

    @routes.get("/api/inside/steps")
    async def steps(name: str) -> dict[str, Any]:
        """Every step a checkpoint or a snapshot of the run holds, oldest first."""
        run = resolve_run(root, name)
        paths = [*list_checkpoints(run / SNAPSHOTS), *list_checkpoints(run)]
        return {"steps": sorted({int(p.name.removeprefix("step_")) for p in paths})}

    @routes.get("/api/inside/induction")
    async def induction(name: str) -> dict[str, Any]:
        return await asyncio.to_thread(models.induction, resolve_run(root, name))

    return routes
