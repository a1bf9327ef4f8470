"""The studio's HTTP routes: JSON views of the run folders, a live stream of a run's rows, chat, and the pages.

    GET /api/runs                          every run under the root (runs.py)
    GET /api/run?name=N                    one run: its record, status.json and its newest checkpoint's config
    GET /api/metrics?name=N&offset=B       the rows after byte B of its metrics.jsonl, and the next offset
    GET /api/events?name=N&offset=B        the same, pushed as Server-Sent Events while the run writes them
    GET /api/compare?name=A&name=B...      each run's rows, and only the config fields that differ
    GET /api/tokenize?name=N&text=T        a run's tokenizer on T: ids, each token's text, special or not
    GET /api/data?stage=S&data=D&run=N     the rows stage S would train on from D, with the loss mask (data_preview.py)
    GET /api/samples, /api/evaluations     a run's replies by step, its `tinylm eval` scores (run_files.py)
    GET, POST /api/report?name=N           its report card; (re)build it
    GET /api/chat/models, POST /api/chat   the chat checkpoints; a reply through the serving engine (chat_models.py)
    GET /api/stages                        every stage's form, from the stage table and option fields
    GET /api/metric-notes                  each metric's unit and one-line meaning (metric_notes.py)
    POST /api/preview, /api/launch         a form's command line; start it as a new run, torchrun too (launch.py)
    POST /api/stop, /api/resume            SIGTERM to a run (torchrun: to its workers); continue it (--resume latest)
    GET /api/inside/VIEW?name=N&...       a checkpoint seen from inside: lens, attention, attribution, patch,
                                           neurons, induction (inside.py; what `tinylm inspect` prints)
    GET /api/scaling[/sweep?name=S | /plot?name=S&file=F]   scaling sweeps: points, fits, PNGs (scaling.py)
    GET /  /run  /compare  /launch  /tokens  /data  /chat  /inside  /scaling
                                           the pages (static; the charts are the vendored uPlot)

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
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, Any

from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, StreamingResponse
from fastapi.staticfiles import StaticFiles

from tinylm.checkpoint.layout import list_checkpoints
from tinylm.serve.protocol import APIError
from tinylm.studio import launch as launcher
from tinylm.studio.chat_models import ChatModels, chat_routes
from tinylm.studio.data_preview import MAX_ROWS
from tinylm.studio.data_preview import preview as preview_data
from tinylm.studio.follow import RunWatch, read_after, stopped_within
from tinylm.studio.inside import inside_routes
from tinylm.studio.metric_notes import notes_json
from tinylm.studio.post_body import json_body
from tinylm.studio.run_files import run_files_routes
from tinylm.studio.runs import (
    StudioError,
    list_runs,
    newest_checkpoint_config,
    resolve_run,
    run_record,
    without_template,
)
from tinylm.studio.scaling import scaling_routes
from tinylm.studio.tokens_view import tokenize_with_run

STATIC = Path(__file__).with_name("static")
POLL_S = 1.0  # how often a live stream looks at the file (each wake-up takes a core from training)
CONSOLE_TAIL = 8192  # bytes of a run's console shown
TOKENIZE_LIMIT = 20_000  # characters the tokenizer playground takes
SHUTDOWN_GRACE_S = 1.0  # what stopping waits for a response still open (the event streams end at once: follow.py)
PAGES = {"/": "index.html", "/run": "run.html", "/compare": "compare.html", "/launch": "launch.html",
         "/tokens": "tokens.html", "/data": "data.html", "/chat": "chat.html", "/inside": "inside.html",
         "/scaling": "scaling.html"}


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
    """{field: {run: value}} for the settings whose values are not the same in every run. A run that has no such
    field (another stage's option, say) is left out of the field's mapping, so the page can show it as absent ("—")
    rather than as a null value; a field no run sets (absent, or null) is no difference."""
    flat = {name: settings(config) for name, config in configs.items()}
    fields = sorted(set().union(*(f.keys() for f in flat.values()))) if flat else []
    out = {}
    for field in fields:
        values = {name: f[field] for name, f in flat.items() if field in f}
        if all(value is None for value in values.values()):
            continue
        if len(values) < len(flat) or len({json.dumps(v, sort_keys=True, default=str) for v in values.values()}) > 1:
            out[field] = values
    return out


def create_app(root: Path, token: str | None = None) -> FastAPI:
    root = root.resolve()
    chat_models = ChatModels(root)
    stopping = asyncio.Event()  # set by StudioServer when it stops: every live stream ends at once (follow.py)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        await asyncio.to_thread(chat_models.close)

    app = FastAPI(title="tinylm studio", docs_url=None, redoc_url=None, openapi_url=None, lifespan=lifespan)
    app.state.stopping = stopping

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

    @app.exception_handler(RequestValidationError)
    async def malformed(_: Request, exc: RequestValidationError) -> JSONResponse:  # in the studio's shape, one line
        return JSONResponse({"error": {"message": validation_message(exc)}}, status_code=422)

    @app.exception_handler(APIError)
    async def refused_by_the_server(_: Request, exc: APIError) -> JSONResponse:  # a chat request the engine refuses
        return JSONResponse(exc.body(), status_code=exc.status)

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
            position, number, watch = offset, line, RunWatch(folder)
            yield ": connected\n\n"
            while not await request.is_disconnected():
                update, changed = await asyncio.to_thread(watch.poll, position, number)  # one hop per poll
                if update.rows or update.reset or changed:
                    yield f"data: {json.dumps({**update.__dict__, 'status': watch.status, 'state': watch.state})}\n\n"
                position, number = update.offset, update.first_line
                if await stopped_within(stopping, POLL_S):
                    return

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

    @app.get("/api/console")
    async def console(name: str) -> dict[str, Any]:
        """The last lines of RUN/console.log, the output of a run the studio launched."""
        file = resolve_run(root, name) / launcher.CONSOLE
        if not file.is_file():  # a run started from the command line: nothing to show, not an error to poll for
            return {"text": "", "note": f"only runs launched from the studio have a {launcher.CONSOLE}"}
        with file.open("rb") as f:
            f.seek(max(0, file.stat().st_size - CONSOLE_TAIL))
            return {"text": f.read().decode("utf-8", errors="replace")}

    @app.get("/api/tokenize")
    async def tokenize(name: str, text: str = Query(..., max_length=TOKENIZE_LIMIT)) -> dict[str, Any]:
        """`text` in a run's tokenizer: each token's id, its bytes as text, and whether it is special."""
        return await asyncio.to_thread(tokenize_with_run, resolve_run(root, name), text)

    @app.get("/api/data")
    async def data(stage: str, spec: str = Query(..., alias="data"), run: str | None = None,
                   limit: int = Query(5, ge=1, le=MAX_ROWS), seed: int = 0) -> dict[str, Any]:
        return await asyncio.to_thread(preview_data, root, stage, spec, run, limit, seed)

    @app.get("/api/metric-notes")
    async def metric_notes() -> dict[str, Any]:
        """Each metric's unit and one-line meaning, shown with its chart (metric_notes.py)."""
        return {"notes": notes_json()}

    @app.get("/api/stages")
    async def stages() -> dict[str, Any]:
        return {"stages": launcher.stage_forms()}

    @app.post("/api/launch")
    async def launch(request: Request) -> dict[str, Any]:
        body = await json_body(request)
        return launcher.launch(root, str(body.get("stage", "")), str(body.get("name", "")),
                               _options(body.get("options", {})), body.get("processes", 1))

    @app.post("/api/preview")
    async def preview(request: Request) -> dict[str, Any]:
        body = await json_body(request)
        argv = launcher.command_line(str(body.get("stage", "")), _options(body.get("options", {})),
                                     root / str(body.get("name", "NAME")))
        return {"argv": launcher.shown_command(argv, launcher.checked_processes(body.get("processes", 1)))}

    @app.post("/api/stop")
    async def stop(request: Request) -> dict[str, Any]:
        return launcher.stop(root, str((await json_body(request)).get("name", "")))

    @app.post("/api/resume")
    async def resume(request: Request) -> dict[str, Any]:
        body = await json_body(request)
        return launcher.resume(root, str(body.get("name", "")), _options(body.get("options", {})),
                               body.get("processes"))

    app.include_router(run_files_routes(root))
    app.include_router(chat_routes(chat_models))
    app.include_router(inside_routes(root))
    app.include_router(scaling_routes(root))
    for path, file in PAGES.items():
        app.add_api_route(path, _page(file), methods=["GET"], include_in_schema=False)
    app.add_api_route("/favicon.ico", _favicon, methods=["GET"], include_in_schema=False)  # a browser asks for it
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    return app


async def _favicon() -> FileResponse:
    return FileResponse(STATIC / "favicon.svg", media_type="image/svg+xml", headers={"Cache-Control": "max-age=86400"})


def validation_message(exc: RequestValidationError) -> str:
    """FastAPI's first complaint as one line: `query parameter 'name': Field required`."""
    errors = exc.errors()
    if not errors:
        return "malformed request"
    first = errors[0]
    where = [str(part) for part in first.get("loc", ())]
    place = f"{where[0]} parameter {'.'.join(where[1:])!r}" if len(where) > 1 else ".".join(where) or "request"
    return f"{place}: {first.get('msg', 'invalid')}"


def _options(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise StudioError("options must be a JSON object of option names and values")
    return value


def _page(file: str) -> Any:
    async def page() -> FileResponse:
        return FileResponse(STATIC / file, headers={"Cache-Control": "no-cache"})
    return page
