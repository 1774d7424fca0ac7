"""``POST /v1/completions`` (the legacy API) and ``POST /v1/responses``: answered from the cache
like chat when they can be (see ``semcache.dialects``), passed on untouched when they cannot."""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response

from ..dialects.completions import CompletionsDialect
from ..dialects.responses import ResponsesDialect
from ..keys import user_id
from ..wire import CompletionRequest, ResponsesRequest
from .limits import BoundedJsonRoute, require_json_body
from .passthrough import relay
from .routes import admitted, answer, canonical_authorization

apis_router = APIRouter(dependencies=[Depends(require_json_body)], route_class=BoundedJsonRoute)


@apis_router.post(
    "/v1/completions",
    summary="Create a legacy completion, from the cache when its prompt is one text",
    responses={200: {"content": {"text/event-stream": {}}, "description": "With `stream: true`: server-sent "
                     "events, one text_completion chunk each, ending with `data: [DONE]`"}},
)  # fmt: skip
async def completions(body: CompletionRequest, request: Request) -> Response:
    arrived, pipeline, namespace = admitted(request)
    sent = body.model_dump(exclude_unset=True)
    dialect = CompletionsDialect(sent)
    view = dialect.chat_view()
    if dialect.bypass_reason is not None:
        return await relay(request, "/completions", namespace, dialect.api, await request.body())
    return await answer(request, pipeline, view, namespace, arrived, dialect, _end_user(sent))


@apis_router.post(
    "/v1/responses",
    summary="Create a response, from the cache when the request is stateless",
    responses={200: {"content": {"text/event-stream": {}}, "description": "With `stream: true`: the "
                     "Responses API's events, from response.created to response.completed"}},
)  # fmt: skip
async def responses(body: ResponsesRequest, request: Request) -> Response:
    arrived, pipeline, namespace = admitted(request)
    sent = body.model_dump(exclude_unset=True)
    user = _end_user(sent)
    per_user = pipeline.policies.for_namespace(namespace).scope_per_user
    owner = user_id(canonical_authorization(request.headers.get("authorization")), user) if per_user else None
    dialect = ResponsesDialect(sent, namespace, owner, request.app.state.semcache.issued_responses)
    view = dialect.chat_view()
    if dialect.bypass_reason is not None:
        # Stateful, acting or not text: untouched, but for a hit's id written out as its conversation.
        raw = await request.body() if dialect.body is sent else _json_bytes(dialect.body)
        return await relay(request, "/responses", namespace, dialect.api, raw)
    return await answer(request, pipeline, view, namespace, arrived, dialect, user)


def _end_user(body: dict[str, Any]) -> str | None:
    """Who the client says the request is for (``user``, and the Responses API's
    ``safety_identifier``): with ``scope_per_user``, part of whose answers these are."""
    user, safety = (value if isinstance(value, str) else None for value in map(body.get, ("user", "safety_identifier")))
    return user if safety is None else f"{user or ''}\x00{safety}"


def _json_bytes(body: dict[str, Any]) -> bytes:
    return json.dumps(body, ensure_ascii=False).encode()
