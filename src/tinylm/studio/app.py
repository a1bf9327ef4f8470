"""The studio's HTTP routes: JSON views of the run folders, a live stream of a run's rows, and three pages.

    GET /api/runs                          every run under the root (runs.py)
    GET /api/run?name=N                    one run: its record, status.json and its newest checkpoint's config
    GET /api/metrics?name=N&offset=B       the rows after byte B of its metrics.jsonl, and the next offset
    GET /api/events?name=N&offset=B        the same, pushed as Server-Sent Events while the run writes them
    GET /api/compare?name=A&name=B...      each run's rows, and only the config fields that differ
    GET /api/tokenize?name=N&text=T        a run's tokenizer on T: ids, each token's text, special or not
    GET /api/stages                        every stage's form, from the stage table and option fields
    POST /api/preview, /api/launch         a form's command line; start it as a new run (launch.py)
    POST /api/stop, /api/resume            SIGTERM to a run's process group; continue it (--resume latest)
    GET /  /run  /compare  /launch  /tokens   the pages (static files; the charts are the vendored uPlot)

Every answer is read from disk when it is asked for. A refused request is a 4xx JSON error naming
what was wrong, and the studio keeps serving. With a token (required off loopback), every request
carries it: `Authorization: Bearer T`, or `?token=T` for the pages and the event stream, which a
browser opens without headers.
"""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Annotated, Any

from fastapi import FastAPI, Query, Request
from fastapi.responses import FileResponse, JSONResponse, StreamingResponse
from fastapi.staticfiles import StaticFiles

from tinylm.checkpoint.layout import TOKENIZER, list_checkpoints
from tinylm.errors import TinyLMError
from tinylm.studio import launch as launcher
from tinylm.studio.follow import read_after
from tinylm.studio.runs import (
    StudioError,
    list_runs,
    newest_checkpoint_config,
    resolve_run,
    run_record,
    without_template,
)
from tinylm.tokenizer.load import load_tokenizer
from tinylm.train.run_status import read_status, run_state

STATIC = Path(__file__).with_name("static")
POLL_S = 0.5  # how often a live stream looks at the file's size
CONSOLE_TAIL = 8192  # bytes of a run's console shown
TOKENIZE_LIMIT = 20_000  # characters the tokenizer playground takes
SHUTDOWN_GRACE_S = 1.0  # an open page's event stream never ends by itself: stopping waits this long for it
PAGES = {"/": "index.html", "/run": "run.html", "/compare": "compare.html", "/launch": "launch.html",
         "/tokens": "tokens.html"}


def newest_config(run_dir: Path) -> dict[str, Any]:
    """The newest checkpoint's config.json, without the chat template."""
    return without_template(newest_checkpoint_config(list_checkpoints(run_dir)))


def flatten(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"model.n_embed": 128, ...}: nested sections as dotted names, so two configs compare field by field."""
    flat: dict[str, Any] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            flat.update(flatten(value, name + "."))
        else:
            flat[name] = value
    return flat


RESULTS = ("format", "version", "step", "tokens", "params", "metrics", "lineage", "chat_template")  # not settings
PER_RUN = ("train.out", "train.resume")  # differ between any two runs: not a difference in how they train


def settings(config: dict[str, Any]) -> dict[str, Any]:
    """The fields of a checkpoint's config.json that say how the run trains (model, options, choices, data, base)."""
    flat = flatten({k: v for k, v in config.items() if k not in RESULTS})
    return {k: v for k, v in flat.items() if k not in PER_RUN}


def config_differences(configs: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """{field: {run: value}} for the settings whose values are not the same in every run (missing counts)."""
    flat = {name: settings(config) for name, config in configs.items()}
    fields = sorted(set().union(*(f.keys() for f in flat.values()))) if flat else []
    missing = object()
    out = {}
    for field in fields:
        values = {name: f.get(field, missing) for name, f in flat.items()}
        if len({json.dumps(v, sort_keys=True, default=str) if v is not missing else "\0" for v in values.values()}) > 1:
            out[field] = {name: (None if v is missing else v) for name, v in values.items()}
    return out


def create_app(root: Path, token: str | None = None) -> FastAPI:
    root = root.resolve()
    app = FastAPI(title="tinylm studio", docs_url=None, redoc_url=None, openapi_url=None)

    @app.middleware("http")
    async def guard(request: Request, call_next: Any) -> Any:
        if token is not None:
            given = request.headers.get("authorization", "").removeprefix("Bearer ").strip()
            given = given or request.query_params.get("token", "")
            if not secrets.compare_digest(given.encode(), token.encode()):
                return JSONResponse({"error": {"message": "a valid studio token is required: 'Authorization: "
                                                          "Bearer <token>' or ?token=<token>"}}, status_code=401)
        return await call_next(request)

    @app.exception_handler(StudioError)
    async def refused(_: Request, exc: StudioError) -> JSONResponse:
        return JSONResponse({"error": {"message": str(exc)}}, status_code=exc.status)

    @app.get("/api/runs")
    async def runs() -> dict[str, Any]:
        return {"root": str(root), "runs": await asyncio.to_thread(list_runs, root)}

    @app.get("/api/run")
    async def run(name: str) -> dict[str, Any]:
        folder = resolve_run(root, name)
        return await asyncio.to_thread(run_record, root, folder, True)

    @app.get("/api/metrics")
    async def metrics(name: str, offset: int = Query(0, ge=0), line: int = Query(1, ge=1)) -> dict[str, Any]:
        update = await asyncio.to_thread(read_after, resolve_run(root, name), offset, line)
        return update.__dict__

    @app.get("/api/events")
    async def events(request: Request, name: str, offset: int = Query(0, ge=0),
                     line: int = Query(1, ge=1)) -> StreamingResponse:
        folder = resolve_run(root, name)

        async def stream() -> AsyncIterator[str]:
            position, number, status = offset, line, None
            yield ": connected\n\n"
            while not await request.is_disconnected():
                update = await asyncio.to_thread(read_after, folder, position, number)
                found = read_status(folder)
                now = (found, run_state(folder, found))
                if update.rows or update.reset or now != status:
                    status = now
                    yield f"data: {json.dumps({**update.__dict__, 'status': now[0], 'state': now[1]})}\n\n"
                position, number = update.offset, update.first_line
                await asyncio.sleep(POLL_S)

        return StreamingResponse(stream(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    @app.get("/api/compare")
    async def compare(name: Annotated[list[str], Query()]) -> dict[str, Any]:
        if len(set(name)) < 2:
            raise StudioError("compare needs two or more different runs (?name=A&name=B)")
        folders = {n: resolve_run(root, n) for n in dict.fromkeys(name)}
        rows = {n: (await asyncio.to_thread(read_after, f, 0)).rows for n, f in folders.items()}
        configs = {n: newest_config(f) for n, f in folders.items()}
        return {"runs": list(folders), "rows": rows, "differences": config_differences(configs)}

    async def json_body(request: Request) -> dict[str, Any]:
        """The JSON object of a POST. Only `application/json` from this origin: a page elsewhere cannot send it
        without the browser asking first, which the studio never allows, so no other site can start a run."""
        if not request.headers.get("content-type", "").startswith("application/json"):
            raise StudioError("send the request as application/json", 415)
        origin = request.headers.get("origin")
        if origin is not None and origin.split("://", 1)[-1] != request.headers.get("host"):
            raise StudioError(f"requests from {origin} are not accepted", 403)
        try:
            body = await request.json()
        except ValueError:
            raise StudioError("the request body is not JSON") from None
        if not isinstance(body, dict):
            raise StudioError("the request body must be a JSON object")
        return body

    @app.get("/api/console")
    async def console(name: str) -> dict[str, Any]:
        """The last lines of RUN/console.log, the output of a run the studio launched."""
        file = resolve_run(root, name) / launcher.CONSOLE
        if not file.is_file():
            raise StudioError(f"{name} has no {launcher.CONSOLE} (only runs launched from the studio have one)", 404)
        with file.open("rb") as f:
            f.seek(max(0, file.stat().st_size - CONSOLE_TAIL))
            return {"text": f.read().decode("utf-8", errors="replace")}

    @app.get("/api/tokenize")
    async def tokenize(name: str, text: str = Query(..., max_length=TOKENIZE_LIMIT)) -> dict[str, Any]:
        """`text` in a run's tokenizer: each token's id, its bytes as text, and whether it is special."""
        return await asyncio.to_thread(tokenize_with_run, resolve_run(root, name), text)

    @app.get("/api/stages")
    async def stages() -> dict[str, Any]:
        return {"stages": launcher.stage_forms()}

    @app.post("/api/launch")
    async def launch(request: Request) -> dict[str, Any]:
        body = await json_body(request)
        return launcher.launch(root, str(body.get("stage", "")), str(body.get("name", "")),
                               _options(body.get("options", {})))

    @app.post("/api/preview")
    async def preview(request: Request) -> dict[str, Any]:
        body = await json_body(request)
        argv = launcher.command_line(str(body.get("stage", "")), _options(body.get("options", {})),
                                     root / str(body.get("name", "NAME")))
        return {"argv": ["tinylm", *argv]}

    @app.post("/api/stop")
    async def stop(request: Request) -> dict[str, Any]:
        return launcher.stop(root, str((await json_body(request)).get("name", "")))

    @app.post("/api/resume")
    async def resume(request: Request) -> dict[str, Any]:
        body = await json_body(request)
        return launcher.resume(root, str(body.get("name", "")), _options(body.get("options", {})))

    for path, file in PAGES.items():
        app.add_api_route(path, _page(file), methods=["GET"], include_in_schema=False)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    return app


def tokenize_with_run(run_dir: Path, text: str) -> dict[str, Any]:
    """The run's newest checkpoint's tokenizer on `text` (special tokens in the text count as special)."""
    found = [c / TOKENIZER for c in reversed(list_checkpoints(run_dir)) if (c / TOKENIZER).is_file()]
    if not found:
        raise StudioError(f"{run_dir.name} has no checkpoint with a tokenizer yet", 404)
    try:
        tokenizer = load_tokenizer(found[0])
    except TinyLMError as exc:
        raise StudioError(str(exc), 409) from None
    names = {j: t for t, j in tokenizer.special_tokens.items()}
    ids = tokenizer.encode(text)
    # a character split over byte tokens shows as U+FFFD in each piece; "bytes" (hex) says exactly what each holds
    pieces = [names[i].encode() if i in names else tokenizer.token_bytes(i) for i in ids]
    return {"tokenizer": tokenizer.name, "ids": ids, "tokens": [
        {"id": i, "text": piece.decode("utf-8", errors="replace"), "bytes": piece.hex(), "special": i in names}
        for i, piece in zip(ids, pieces, strict=True)]}


def _options(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise StudioError("options must be a JSON object of option names and values")
    return value


def _page(file: str) -> Any:
    async def page() -> FileResponse:
        return FileResponse(STATIC / file, headers={"Cache-Control": "no-cache"})
    return page
