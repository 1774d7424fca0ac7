"""Every error leaves the service in OpenAI's shape: {"error": {"message", "type", "param", "code"}}."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from ..errors import SemcacheError, openai_error_body
from ..logs import REQUEST_ID_HEADER, current_request_id

log = logging.getLogger("semcache.server")


def error_response(error: SemcacheError) -> JSONResponse:
    return JSONResponse(error.to_openai(), status_code=error.status_code, headers=error.headers)


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(SemcacheError)
    async def _semcache_error(request: Request, exc: SemcacheError) -> JSONResponse:
        return error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def _invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse(
            openai_error_body(_describe(exc), "invalid_request_error", "invalid_request"), status_code=400
        )

    @app.exception_handler(HTTPException)
    async def _http_error(request: Request, exc: HTTPException) -> JSONResponse:
        error_type = "invalid_request_error" if exc.status_code < 500 else "server_error"
        return JSONResponse(
            openai_error_body(str(exc.detail), error_type, None),
            status_code=exc.status_code,
            headers=getattr(exc, "headers", None),
        )

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error on %s %s", request.method, request.url.path)
        # This handler runs outside every middleware, so the request id is added here.
        request_id = current_request_id()
        return JSONResponse(
            openai_error_body("internal error", "server_error", "internal_error"),
            status_code=500,
            headers={REQUEST_ID_HEADER: request_id} if request_id else None,
        )


def _describe(exc: RequestValidationError) -> str:
    problems = []
    for error in exc.errors()[:5]:
        location = ".".join(str(part) for part in error.get("loc", ()) if part != "body")
        if error.get("type") == "json_invalid":
            return "the request body is not valid JSON"
        problems.append(f"{location or 'body'}: {error.get('msg', 'invalid')}")
    return "invalid request: " + "; ".join(problems)
