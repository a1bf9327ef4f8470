"""The HTTP routes: OpenAI's /v1 API, health and metrics, and the web chat page at /.

Each generation route turns its request into scheduler jobs (jobs.py), then either collects their
text into one JSON reply or streams it as Server-Sent Events, `data: {chunk}` lines ending with
`data: [DONE]`. A client that goes away cancels its jobs: a stream notices when Starlette cancels
it, a plain request by polling the connection while it waits. The scheduler thread starts with the
app and, at shutdown, ends only after the requests still running have finished.

POST /admin/reload {"checkpoint": DIR} swaps in new weights of the same model (an RL trainer syncing
the server it samples from). Only a caller on this machine, or one with the admin token, may.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.responses import FileResponse, JSONResponse, PlainTextResponse, StreamingResponse
from fastapi.staticfiles import StaticFiles

from tinylm.serve.builtin_tools import BuiltinToolReply, builtin_tools_of
from tinylm.serve.error_handlers import install_error_handlers
from tinylm.serve.generation import Generation
from tinylm.serve.jobs import chat_jobs, completion_jobs, start_chat
from tinylm.serve.protocol import APIError, ChatCompletionRequest, CompletionRequest, ReloadRequest
from tinylm.serve.replies import ChatReply, CompletionReply
from tinylm.serve.served_model import ServedModel

STATIC = Path(__file__).with_name("static")
DISCONNECT_POLL_S = 0.25


LOOPBACK = ("127.0.0.1", "::1", "::ffff:127.0.0.1", "localhost")


def create_app(served: ServedModel, api_key: str | None = None, admin_token: str | None = None) -> FastAPI:
    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        if served.scheduler.dead is None and not served.scheduler.thread.is_alive():
            served.scheduler.start()  # (an engine process is started, and its reader with it, before binding)
        yield
        await asyncio.to_thread(served.scheduler.stop)  # drains: running requests finish first

    app = FastAPI(title="tinylm", lifespan=lifespan, docs_url=None, redoc_url=None)
    started = int(time.time())
    install_error_handlers(app)
    guard = [Depends(_bearer_check(api_key))]
    posted = [*guard, Depends(_json_only)]

    @app.get("/health")
    async def health() -> Any:
        if served.scheduler.dead is not None:  # the engine process exited: nothing can be generated any more
            return JSONResponse({"status": "error", "reason": served.scheduler.dead}, status_code=503)
        return {"status": "ok"}

    @app.get("/metrics")
    async def metrics() -> PlainTextResponse:
        try:  # the engine process renders its own (a round trip on the pipe)
            text = await asyncio.to_thread(served.scheduler.metrics.render)
        except RuntimeError as exc:
            raise APIError(503, str(exc), code="engine_exited", type="server_error") from None
        return PlainTextResponse(text, media_type="text/plain; version=0.0.4")

    @app.get("/v1/models", dependencies=guard)
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": served.name, "object": "model", "created": started,
                                            "owned_by": "tinylm", "max_model_len": served.window,
                                            "logprobs_mode": served.scheduler.logprobs_mode,
                                            "builtin_tools": [tool.name for tool in served.tools]}]}

    @app.post("/v1/completions", dependencies=posted)
    async def completions(body: CompletionRequest, request: Request) -> Any:
        jobs, prompts = completion_jobs(served, body)
        generation = Generation(served.scheduler, served.tokenizer, jobs, body.stop_strings()).start()
        reply = CompletionReply(served, body, generation, prompts)
        return _sse(reply.chunks()) if body.stream else await _unless_gone(reply.whole(), generation, request)

    @app.post("/v1/chat/completions", dependencies=posted)
    async def chat_completions(body: ChatCompletionRequest, request: Request) -> Any:
        return await chat_reply(served, body, request)

    @app.post("/admin/reload", dependencies=[Depends(_json_only)])
    async def reload(body: ReloadRequest, request: Request) -> dict[str, Any]:
        _admin_check(request, admin_token)
        return await asyncio.to_thread(served.reload, body.checkpoint)

    @app.get("/")
    async def page() -> FileResponse:
        return FileResponse(STATIC / "index.html")

    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    return app


async def chat_reply(served: ServedModel, body: ChatCompletionRequest, request: Request) -> Any:
    """A chat completion from `served`: one JSON reply, or Server-Sent Events when `body.stream` (the studio's
    chat answers through this too)."""
    if body.builtin_tools:
        tool_reply = BuiltinToolReply(served, body, builtin_tools_of(served, body))
        return _sse(tool_reply.chunks()) if body.stream else await _unless_gone(tool_reply.whole(), tool_reply,
                                                                                  request)
    jobs, prompt = chat_jobs(served, body)
    generation = start_chat(served, body, jobs, prompt)
    reply = ChatReply(served, body, generation, len(prompt.ids), prompt.names, prompt.forced)
    return _sse(reply.chunks()) if body.stream else await _unless_gone(reply.whole(), generation, request)


def _bearer_check(api_key: str | None):
    async def check(request: Request) -> None:
        if api_key is None:
            return
        if not _sends_bearer(request, api_key):
            raise APIError(401, "a valid API key is required: send 'Authorization: Bearer <key>'",
                           code="invalid_api_key", type="authentication_error")

    return check


async def _json_only(request: Request) -> None:
    """415 for a body not sent as JSON, naming its Content-Type. FastAPI reads only an application/json body
    as JSON (none at all neither: a page elsewhere could send that without asking), and would answer
    "Input should be a valid dictionary" for the others."""
    given = request.headers.get("content-type", "")
    kind = given.split(";", 1)[0].strip().lower()
    if kind != "application/json" and not (kind.startswith("application/") and kind.endswith("+json")):
        sent = f"as Content-Type {given!r}" if given else "with no Content-Type"
        raise APIError(415, f"the body was sent {sent}: send it as application/json", code="unsupported_media_type")


def _sends_bearer(request: Request, secret: str) -> bool:
    """Whether the request carries 'Authorization: Bearer <secret>' (compared in constant time)."""
    given = request.headers.get("authorization", "")
    return secrets.compare_digest(given.encode(), f"Bearer {secret}".encode())


def _admin_check(request: Request, admin_token: str | None) -> None:
    """Loopback callers, or callers with 'Authorization: Bearer <admin token>'; 403 for anyone else."""
    if admin_token is not None and _sends_bearer(request, admin_token):
        return
    if request.client is None or request.client.host not in LOOPBACK:
        raise APIError(403, "the admin endpoints answer callers on the server's machine, or ones that send "
                       "'Authorization: Bearer <admin token>' (tinylm serve --admin-token)",
                       code="forbidden", type="permission_error")


def _sse(chunks: AsyncIterator[dict[str, Any]]) -> StreamingResponse:
    async def events() -> AsyncIterator[str]:
        try:
            async for chunk in chunks:
                yield f"data: {json.dumps(chunk, ensure_ascii=False)}\n\n"
        except APIError as exc:  # the status line is long gone: the error travels as an event
            yield f"data: {json.dumps(exc.body())}\n\n"
        yield "data: [DONE]\n\n"

    return StreamingResponse(events(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})


async def _unless_gone(reply: Coroutine[Any, Any, dict], generation: Generation | BuiltinToolReply,
                       request: Request) -> dict:
    """Await a whole reply, cancelling its jobs if the client disconnects while it waits."""
    task = asyncio.ensure_future(reply)
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=DISCONNECT_POLL_S)
            if done:
                return task.result()
            if await request.is_disconnected():
                generation.cancel()
                raise APIError(499, "the client went away")
    finally:
        if not task.done():
            task.cancel()
