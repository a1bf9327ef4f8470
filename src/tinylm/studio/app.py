"""The studio's HTTP routes: JSON views of the run folders, a live stream of a run's rows, and three pages.

    GET /api/runs                          every run under the root (runs.py)
    GET /api/run?name=N                    one run: its record, status.json and its newest checkpoint's config
    GET /api/metrics?name=N&offset=B       the rows after byte B of its metrics.jsonl, and the next offset
    GET /api/events?name=N&offset=B        the same, pushed as Server-Sent Events while the run writes them
    GET /api/compare?name=A&name=B...      each run's rows, and only the config fields that differ
    GET /  /run  /compare                  the pages (static files; the charts are the vendored uPlot)

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

from tinylm.studio.follow import read_after
from tinylm.studio.runs import StudioError, list_runs, newest_checkpoint_config, resolve_run, run_record
from tinylm.train.run_status import read_status

STATIC = Path(__file__).with_name("static")
POLL_S = 0.5  # how often a live stream looks at the file's size
SHUTDOWN_GRACE_S = 1.0  # an open page's event stream never ends by itself: stopping waits this long for it
PAGES = {"/": "index.html", "/run": "run.html", "/compare": "compare.html"}


def newest_config(run_dir: Path) -> dict[str, Any]:
    """The newest checkpoint's config.json, without the chat template (long, and not a setting)."""
    return {k: v for k, v in newest_checkpoint_config(run_dir).items() if k != "chat_template"}


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
        record = await asyncio.to_thread(run_record, root, folder)
        return {**record, "status_file": read_status(folder), "config": newest_config(folder)}

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
                now = read_status(folder)
                if update.rows or update.reset or now != status:
                    status = now
                    yield f"data: {json.dumps({**update.__dict__, 'status': now})}\n\n"
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

    for path, file in PAGES.items():
        app.add_api_route(path, _page(file), methods=["GET"], include_in_schema=False)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    return app


def _page(file: str) -> Any:
    async def page() -> FileResponse:
        return FileResponse(STATIC / file, headers={"Cache-Control": "no-cache"})
    return page
