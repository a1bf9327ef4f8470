"""The one way the studio reads a POST: a JSON object, sent by one of its own pages."""

from __future__ import annotations

from typing import Any

from fastapi import Request

from tinylm.studio.runs import StudioError


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
