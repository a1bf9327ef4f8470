"""Every error as OpenAI's JSON, {"error": {"message", "type", "param", "code"}}, whatever raised it.

Malformed JSON is a 400, a field of the wrong type or range a 422 (FastAPI's validation, reworded
as one line naming the field), an unknown route a 404, and `APIError` carries its own status.
"""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from tinylm.serve.protocol import APIError, error_body


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(APIError)
    async def api_error(_: Request, exc: APIError) -> JSONResponse:
        return JSONResponse(exc.body(), status_code=exc.status)

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        if first.get("type") == "json_invalid":
            return JSONResponse(error_body("the request body is not valid JSON", "invalid_request_error"), 400)
        where = ".".join(str(part) for part in first.get("loc", ()) if part != "body")
        message = f"{where or 'body'}: {first.get('msg', 'invalid request')}"
        return JSONResponse(error_body(message, "invalid_request_error", where or None), 422)

    @app.exception_handler(HTTPException)
    async def http_error(_: Request, exc: HTTPException) -> JSONResponse:
        kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
        return JSONResponse(error_body(str(exc.detail), kind), exc.status_code)
