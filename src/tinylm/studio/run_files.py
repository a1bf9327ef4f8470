"""What a run page shows besides its curves: the model's replies as it learned, its evaluations, its report card.

    samples.jsonl   the replies the loop wrote at each evaluation (and a pretraining run's final sample),
                    grouped by step, so the page can show the first answers next to the latest
    evals.jsonl     every `tinylm eval` of the run's checkpoints: scores and a few sample replies
    report.html     the report card (`tinylm report`), built on request from the same files

Each is read from disk when asked for; none is required (a run that never evaluated has no samples).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse

from tinylm.errors import TinyLMError
from tinylm.evaluate.report_card import REPORT_HTML, write_report_card
from tinylm.evaluate.scores import read_evaluations
from tinylm.metrics import read_samples
from tinylm.stages import report_curves
from tinylm.studio.post_body import json_body
from tinylm.studio.runs import StudioError, resolve_run

SAMPLE_STEPS = 50  # the newest steps' samples a page is sent (a long run evaluates hundreds of times)


def samples_by_step(run_dir: Path, steps: int = SAMPLE_STEPS) -> dict[str, Any]:
    """{"steps": [...], "samples": {step: [rows]}}: the first step's samples and the newest `steps - 1`."""
    grouped: dict[int, list[dict[str, Any]]] = {}
    for row in read_samples(run_dir):
        sample = {k: row[k] for k in ("prompt", "reply", "verified") if k in row}
        grouped.setdefault(row["step"], []).append(sample)
    ordered = sorted(grouped)
    kept = ordered[:1] + ordered[1:][-(steps - 1):] if ordered else []
    return {"steps": kept, "samples": {str(step): grouped[step] for step in kept}}


def evaluations(run_dir: Path) -> list[dict[str, Any]]:
    """Every recorded `tinylm eval` of the run, oldest first, without the per-problem outcome strings."""
    try:
        found = read_evaluations(run_dir)
    except (OSError, UnicodeDecodeError) as exc:  # a damaged evals.jsonl: a 409 naming it, not a 500
        raise StudioError(f"{run_dir.name}/evals.jsonl cannot be read: {exc}", 409) from None
    return [{k: v for k, v in row.items() if k != "outcomes"} for row in found]


def report_card(run_dir: Path) -> Path:
    """The run's report.html; StudioError (404) until one is built, or when it is a link out of the run."""
    path = run_dir / REPORT_HTML
    if not path.is_file() or run_dir.resolve() not in path.resolve().parents:
        raise StudioError(f"{run_dir.name} has no report card yet: build it (tinylm report --run RUN)", 404)
    return path


def build_report_card(run_dir: Path) -> Path:
    """(Re)build the report card from the run's files, as `tinylm report --run RUN` does."""
    try:
        return write_report_card(run_dir, report_curves)
    except TinyLMError as exc:
        raise StudioError(str(exc), 409) from None


def run_files_routes(root: Path) -> APIRouter:
    """GET /api/samples, /api/evaluations (and whether a card exists), /api/report (the card's HTML); POST
    /api/report builds it."""
    routes = APIRouter()

    @routes.get("/api/samples")
    async def samples(name: str) -> dict[str, Any]:
        return await asyncio.to_thread(samples_by_step, resolve_run(root, name))

    @routes.get("/api/evaluations")
    async def evals(name: str) -> dict[str, Any]:
        folder = resolve_run(root, name)
        return {"evaluations": await asyncio.to_thread(evaluations, folder), "report": (folder / REPORT_HTML).is_file()}

    @routes.get("/api/report")
    async def report(name: str) -> FileResponse:
        # a card is data, never code: sandboxed, a script in a crafted report.html cannot act as the studio
        return FileResponse(report_card(resolve_run(root, name)), media_type="text/html",
                            headers={"Cache-Control": "no-cache", "Content-Security-Policy": "sandbox"})

    @routes.post("/api/report")
    async def build(request: Request) -> dict[str, Any]:
        body = await json_body(request)
        path = await asyncio.to_thread(build_report_card, resolve_run(root, str(body.get("name", ""))))
        return {"report": path.name}

    return routes
