"""Operators' controls: per-namespace quality settings, the recent decisions, and hit feedback."""

from __future__ import annotations

import hmac
from typing import Any

from fastapi import APIRouter, Depends, Query, Request
from pydantic import BaseModel, ConfigDict, Field

from ..errors import Forbidden, InvalidRequest, Unauthorized
from ..pipeline import Pipeline
from .access import validate_namespace
from .limits import BoundedJsonRoute
from .routes import namespace_of, pipeline_of

admin_router = APIRouter(prefix="/admin", tags=["admin"], route_class=BoundedJsonRoute)
feedback_router = APIRouter(tags=["feedback"], route_class=BoundedJsonRoute)


def require_admin(request: Request) -> None:
    """The admin key, sent as a Bearer token, whenever SEMCACHE_ADMIN_KEY is set.

    Without one, /admin is open, unless client API keys are configured: then it is closed, since
    it shows every tenant's queries and a client key must never open it."""
    state = request.app.state.semcache
    expected = state.settings.admin_key
    if not expected:
        if state.access.configured:
            raise Forbidden("/admin is closed: API keys are configured but SEMCACHE_ADMIN_KEY is not",
                            code="admin_disabled")  # fmt: skip
        return
    scheme, _, token = (request.headers.get("authorization") or "").partition(" ")
    if scheme.lower() != "bearer" or not token:
        raise Unauthorized("this path needs the admin key as a Bearer token", code="admin_key_required")
    if not hmac.compare_digest(token.strip().encode(), expected.encode()):
        raise Forbidden("wrong admin key", code="invalid_admin_key")


class NamespaceConfigUpdate(BaseModel):
    """Fields to change; those left out keep their current value."""

    model_config = ConfigDict(extra="forbid")
    threshold: float | None = Field(None, ge=0, le=1, description="Minimum cosine (0-1) for a semantic hit.")
    guards: list[str] | None = Field(None, max_length=64, description="Guards to run, e.g. ['numbers', 'negation'].")
    verify_below: float | None = Field(None, ge=0, le=1, description="Verify candidates under this cosine.")
    verifier_min_score: float | None = Field(None, ge=0, le=1, description="Lowest verifier score that approves.")
    thresholds: dict[str, float] | None = Field(
        None,
        max_length=16,
        description="Minimum cosine per prompt script ('latin', 'han', 'other'), e.g. {'han': 0.99}; "
        "scripts left out keep theirs.",
    )
    scope_per_user: bool | None = Field(
        None, description="Entries serve only the user (API key and `user`) who stored them."
    )
    hit_min_latency_ms: float | None = Field(
        None, ge=0, le=60_000, description="Answer hits no sooner than this (ms, plus up to 20% jitter); 0: off."
    )


class Feedback(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str = Field(min_length=1, max_length=128, description="The id of a chat completion served from the cache.")
    correct: bool = Field(description="false marks the served answer as wrong for the question asked.")


def _namespace_config(pipeline: Pipeline, namespace: str) -> dict[str, Any]:
    policies = pipeline.policies
    return {
        "namespace": namespace,
        "config": policies.for_namespace(namespace).as_dict(),
        "overrides": policies.overrides(namespace),
    }


@admin_router.get("/namespaces/{namespace}/config", dependencies=[Depends(require_admin)],
                  summary="The quality settings in force for a namespace")  # fmt: skip
async def get_namespace_config(namespace: str, request: Request) -> dict[str, Any]:
    return _namespace_config(pipeline_of(request), validate_namespace(namespace))


@admin_router.put("/namespaces/{namespace}/config", dependencies=[Depends(require_admin)],
                  summary="Change a namespace's threshold and guards; takes effect at once and persists")  # fmt: skip
async def put_namespace_config(namespace: str, update: NamespaceConfigUpdate, request: Request) -> dict[str, Any]:
    pipeline = pipeline_of(request)
    validate_namespace(namespace)
    changes = update.model_dump(exclude_none=True)
    try:
        pipeline.policies.set(namespace, changes)
    except ValueError as exc:
        raise InvalidRequest(str(exc), code="invalid_config") from exc
    await pipeline.store.set_namespace_config(namespace, pipeline.policies.overrides(namespace))
    return _namespace_config(pipeline, namespace)


@admin_router.get("/decisions", dependencies=[Depends(require_admin)],
                  summary="Recent semantic lookups: query, best candidate, similarity, guards, decision")  # fmt: skip
async def decisions(
    request: Request,
    limit: int = Query(100, ge=1, le=10_000),
    namespace: str | None = Query(None, description="Only this namespace."),
) -> dict[str, Any]:
    items = pipeline_of(request).decisions.recent(limit, namespace)
    return {"object": "list", "data": [item.as_dict() for item in items]}


@feedback_router.post("/v1/semcache/feedback", summary="Report a served cache hit as correct or wrong")
async def feedback(body: Feedback, request: Request) -> dict[str, Any]:
    pipeline = pipeline_of(request)
    served = await pipeline.feedback(body.id, namespace_of(request), body.correct)
    return {"id": body.id, "recorded": True, "correct": body.correct, "tier": served.tier}
