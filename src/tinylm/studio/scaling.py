"""The studio's Scaling page: every sweep of `tinylm scaling` under the runs root, its points, fits and pictures.

    GET /api/scaling                       the sweep folders under the root (each holds sweep.json)
    GET /api/scaling/sweep?name=S          its points (points.jsonl), fit.json and prediction.json when written
    GET /api/scaling/plot?name=S&file=F    one of its PNGs (isoflop.png, frontier.png, law.png)

The page draws the IsoFLOP curves itself (points and each budget's parabola, from fit.json) while a sweep
runs; the PNGs are the ones `tinylm scaling` wrote at its end. Each run of a sweep is an ordinary run folder,
so the runs page lists them too.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Query
from fastapi.responses import FileResponse

from tinylm.scaling.plots import PLOTS
from tinylm.scaling.predict import PREDICTION, PREDICTION_POINTS
from tinylm.scaling.sweep import POINTS, SWEEP, read_rows
from tinylm.studio.runs import StudioError

FIT = "fit.json"


def find_sweeps(root: Path) -> list[str]:
    """Every folder under the root (itself included) that holds a sweep, by name; hidden folders skipped."""
    found = []
    for record in sorted(root.rglob(SWEEP)):
        relative = record.parent.relative_to(root)
        if not any(part.startswith(".") for part in relative.parts):
            found.append(relative.as_posix() or ".")
    return found


def resolve_sweep(root: Path, name: str) -> Path:
    """The sweep folder `name` stands for; StudioError (404) if it is not a sweep under the root."""
    root = root.resolve()
    folder = (root / name).resolve()
    if (folder != root and root not in folder.parents) or not (folder / SWEEP).is_file():
        raise StudioError(f"no sweep {name!r} under the runs root", 404)
    return folder


def _json(path: Path) -> Any:
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None  # being rewritten: the next refresh reads it


def sweep_record(folder: Path) -> dict[str, Any]:
    rows = []
    for file in (POINTS, PREDICTION_POINTS):
        try:
            rows.append(read_rows(folder / file))
        except (OSError, json.JSONDecodeError):
            rows.append([])
    return {"sweep": _json(folder / SWEEP), "points": rows[0], "prediction_points": rows[1],
            "fit": _json(folder / FIT), "prediction": _json(folder / PREDICTION),
            "plots": [plot for plot in PLOTS if (folder / plot).is_file()]}


def scaling_routes(root: Path) -> APIRouter:
    router = APIRouter()

    @router.get("/api/scaling")
    def sweeps() -> dict[str, Any]:
        return {"sweeps": find_sweeps(root)}

    @router.get("/api/scaling/sweep")
    def sweep(name: str = Query(...)) -> dict[str, Any]:
        return sweep_record(resolve_sweep(root, name))

    @router.get("/api/scaling/plot")
    def plot(name: str = Query(...), file: str = Query(...)) -> FileResponse:
        folder = resolve_sweep(root, name)
        if file not in PLOTS or not (folder / file).is_file():
            raise StudioError(f"no plot {file!r} in sweep {name!r} (one of {', '.join(PLOTS)})", 404)
        return FileResponse(folder / file, media_type="image/png")

    return router
