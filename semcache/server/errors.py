"""Every error leaves the service in OpenAI's shape: {"error": {"message", "type", "param", "code"}}."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect

from ..errors import SemcacheError, openai_error_body
from ..logs import REQUEST_ID_HEADER, current_request_id
from .served import refusal

log = logging.getLogger("semcache.server")


class OpenAIError(BaseModel):
    message: str
    type: str = Field(description="invalid_request_error, authentication_error, rate_limit_error, server_error, ...")
    param: str | None = None
    code: str | int | None = Field(description="What went wrong, for programs: invalid_json, too_many_messages, ...")


class OpenAIErrorResponse(BaseModel):
    """The body of every error response (OpenAI's shape)."""

    error: OpenAIError


# Declared on every operation, so that the OpenAPI schema says what errors look like (and not
# FastAPI's 422, which semcache never sends: invalid input is a 400).
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    "4XX": {"model": OpenAIErrorResponse, "description": "The request was refused; `error.code` says why."},
    "5XX": {"model": OpenAIErrorResponse, "description": "semcache or its upstream failed, or is not ready yet."},
}


# nginx's status for a client that closed its connection before the answer: nothing is sent, but
# the access line says so (request_context.py).
CLIENT_CLOSED_REQUEST = 499


def error_response(error: SemcacheError) -> JSONResponse:
    return JSONResponse(error.to_openai(), status_code=error.status_code, headers=error.headers)


def client_gone_response() -> Response:
    """The answer to a client that left while its request body was being read: nobody receives it,
    and the request is no failure of semcache's (no 500, no traceback)."""
    return Response(status_code=CLIENT_CLOSED_REQUEST)


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(SemcacheError)
    async def _semcache_error(request: Request, exc: SemcacheError) -> JSONResponse:
        return error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def _invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse(openai_error_body(_describe(exc), "invalid_request_error", _code(exc)), status_code=400)

    @app.exception_handler(ClientDisconnect)
    async def _client_gone(request: Request, exc: ClientDisconnect) -> Response:
        return client_gone_response()

    @app.exception_handler(HTTPException)
    async def _http_error(request: Request, exc: HTTPException) -> Response:
        if isinstance(exc.__cause__, ClientDisconnect):
            return client_gone_response()  # FastAPI wraps it too, when it reads a body to validate
        if isinstance(exc.__cause__, SemcacheError):
            # FastAPI wraps whatever the body parser raised (wire.parse_json_body) in a generic 400.
            return error_response(exc.__cause__)
        state = getattr(request.app.state, "semcache", None)
        unrouted = exc.status_code == 405 or (exc.status_code == 404 and "route" not in request.scope)
        if unrouted and state is not None:  # no route serves this path, or not with this method
            return error_response(refusal(request.app, state.settings, request.method, request.url.path))
        error_type = "invalid_request_error" if exc.status_code < 500 else "server_error"
        return JSONResponse(
            openai_error_body(str(exc.detail), error_type, None),
            status_code=exc.status_code,
            headers=getattr(exc, "headers", None),
        )

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error on %s %s", request.method, request.url.path)
        return internal_error_response()


def internal_error_response() -> JSONResponse:
    """A 500 that says nothing of its cause (it is logged), with the request's id."""
    request_id = current_request_id()
    return JSONResponse(
        openai_error_body("internal error", "server_error", "internal_error"),
        status_code=500,
        headers={REQUEST_ID_HEADER: request_id} if request_id else None,
    )


def _code(exc: RequestValidationError) -> str:
    """A list over its ceiling in wire.py gets the code its setting's bound has (server/limits.py)."""
    for error in exc.errors():
        location = tuple(part for part in error.get("loc", ()) if part != "body")
        if error.get("type") == "json_invalid":
            return "invalid_json"
        if error.get("type") == "too_long" and location in (("messages",), ("tools",)):
            return f"too_many_{location[0]}"
        if error.get("type") == "too_long" and location[:1] == ("messages",) and "content" in location:
            return "too_many_content_parts"
    return "invalid_request"


def _describe(exc: RequestValidationError) -> str:
    problems = []
    for error in exc.errors()[:5]:
        location = ".".join(str(part) for part in error.get("loc", ()) if part != "body")
        if error.get("type") == "json_invalid":
            return "the request body is not valid JSON"
        problems.append(f"{location or 'body'}: {error.get('msg', 'invalid')}")
    return "invalid request: " + "; ".join(problems)
