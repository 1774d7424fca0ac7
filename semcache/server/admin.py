"""Operators' controls: per-namespace quality settings, the recent decisions, and hit feedback;
and ``require_admin``, which every path under /admin goes through."""

from __future__ import annotations

import ipaddress
import re
from typing import Any, Literal
from urllib.parse import urlsplit

from fastapi import APIRouter, Depends, Query, Request
from pydantic import BaseModel, ConfigDict, Field

from ..errors import Forbidden, InvalidRequest, Unauthorized, UnsupportedMediaType
from ..pipeline import Pipeline
from .access import bearer_token, same_secret, validate_namespace
from .limits import BoundedJsonRoute, declares_json, has_body, not_json_message, require_json_body
from .routes import admitted_namespace, pipeline_of

feedback_router = APIRouter(tags=["feedback"], dependencies=[Depends(require_json_body)], route_class=BoundedJsonRoute)

# A Host header: a name or IPv4 address, or an IPv6 address in brackets; then an optional port.
_HOST = re.compile(r"(?:\[(?P<ipv6>[0-9A-Fa-f:.]+)\]|(?P<name>[^\[\]:/@\s]+))(?::(?P<port>\d{1,5}))?")
# The one body type besides JSON that /admin takes: JSONL, for POST /admin/entries/import.
_JSONL = "application/x-ndjson"


def require_admin(request: Request) -> None:
    """Who may use /admin: it shows every tenant's queries and can plant answers.

    Always refused: a request a browser sends on behalf of another site (an ``Origin`` that is
    neither a loopback page nor this service's own /docs, or ``Sec-Fetch-Site: cross-site``), and a
    body that is not JSON (415): browsers send text/plain, forms and untyped bodies to any site
    without asking it first (no CORS preflight), JSON never.

    With SEMCACHE_ADMIN_KEY set, it is needed as a Bearer token. Without one, /admin is closed when
    client API keys are configured (a client key must never open it); else it answers only a client
    connected over loopback that names a loopback host, so that neither another machine nor a
    DNS-rebinding page (which reaches 127.0.0.1 under its own name) can use it."""
    headers = request.headers
    refuse_cross_site(request, "/admin", code="admin_cross_site")
    state = request.app.state.semcache
    expected = state.settings.admin_key
    if expected:
        token = bearer_token(headers.get("authorization"))
        if token is None:
            raise Unauthorized("this path needs the admin key as a Bearer token", code="admin_key_required")
        if not same_secret(token, expected):
            raise Forbidden("wrong admin key", code="invalid_admin_key")
    elif state.access.configured:
        raise Forbidden("/admin is closed: API keys are configured but SEMCACHE_ADMIN_KEY is not",
                        code="admin_disabled")  # fmt: skip
    elif not from_this_machine(request):
        raise Forbidden(
            "without SEMCACHE_ADMIN_KEY, /admin answers only clients on this machine that call it localhost "
            "or by a loopback address",
            code="admin_loopback_only",
        )
    content_type = headers.get("content-type")
    if has_body(headers) and not _admin_media_type(content_type):
        message = not_json_message(request.url.path, content_type, also=f" ({_JSONL} for an import)")
        raise UnsupportedMediaType(message, code="unsupported_media_type")


admin_router = APIRouter(
    prefix="/admin", tags=["admin"], dependencies=[Depends(require_admin)], route_class=BoundedJsonRoute
)


def is_loopback_address(address: str) -> bool:
    """Whether an IP address is this machine's: 127.0.0.0/8 or ::1 (IPv4-mapped too); never a name."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


def is_loopback_host(host: str) -> bool:
    """Whether a ``Host`` header, or the host of an origin, names this machine: localhost or a name
    under .localhost (which browsers resolve to loopback themselves), 127.x.x.x or [::1], with any
    port. A name that merely starts with one of these (127.0.0.1.evil.example) is not loopback."""
    match = _HOST.fullmatch(host)
    if match is None:
        return False
    if match["ipv6"] is not None:
        return ":" in match["ipv6"] and is_loopback_address(match["ipv6"])
    name = match["name"].lower().removesuffix(".")
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.IPv4Address(name).is_loopback  # four decimal parts only: not 2130706433, 0x7f.1
    except ValueError:
        return False


def is_loopback_origin(origin: str) -> bool:
    """Whether an ``Origin`` header is a page served from this machine (``null`` is not)."""
    parts = urlsplit(origin)
    return parts.scheme in ("http", "https") and not parts.path and is_loopback_host(parts.netloc)


def _same_host(origin: str, host: str) -> bool:
    """Whether a page came from the host the request names: this service's own /docs. A rebinding
    page passes this too, and then meets the key or the loopback check, as every request does."""
    match = _HOST.fullmatch(host)
    if match is None:
        return False
    name = (match["ipv6"] or match["name"]).lower().removesuffix(".")
    parts = urlsplit(origin)
    return parts.scheme in ("http", "https") and not parts.path and parts.hostname == name


def refuse_cross_site(request: Request, what: str, *, code: str) -> None:
    """403 for a request a browser sends on behalf of another site: an ``Origin`` that is neither a
    loopback page nor this service's own /docs, or ``Sec-Fetch-Site: cross-site``."""
    headers = request.headers
    host = headers.get("host", "")
    if (
        any(not (is_loopback_origin(origin) or _same_host(origin, host)) for origin in headers.getlist("origin"))
        or headers.get("sec-fetch-site", "").lower() == "cross-site"
    ):
        raise Forbidden(f"{what} does not answer web pages of other sites", code=code)


def from_this_machine(request: Request) -> bool:
    """Whether the TCP peer is on this machine (``semcache serve`` keeps uvicorn from replacing it
    with an X-Forwarded-For address) and names a loopback host, so that a DNS-rebinding page, which
    reaches 127.0.0.1 under its own name, does not pass."""
    loopback_peer = request.client is not None and is_loopback_address(request.client.host)
    return loopback_peer and is_loopback_host(request.headers.get("host", ""))


def _admin_media_type(content_type: str | None) -> bool:
    media = (content_type or "").split(";", 1)[0].strip().lower()
    return declares_json(content_type) or media == _JSONL


class NamespaceConfigUpdate(BaseModel):
    """Fields to change; those left out keep their current value."""

    model_config = ConfigDict(extra="forbid")
    threshold: float | None = Field(None, ge=0, le=1, description="Minimum cosine (0-1) for a semantic hit.")
    guards: list[str] | None = Field(None, max_length=64, description="Guards to run, e.g. ['numbers', 'negation'].")
    verify: Literal["sync", "async", "off"] | None = Field(
        None, description="Verify candidates under the certified line: 'sync', 'async' or 'off'."
    )
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
    target_error: float | None = Field(
        None, gt=0, le=0.5, description="Error budget: the share of semantic hits that may be wrong (0-0.5)."
    )
    learn: bool | None = Field(
        None, description="Learn the line within target_error from live evidence; false: the threshold is the line."
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


@admin_router.get("/namespaces/{namespace}/config", summary="The quality settings in force for a namespace")
async def get_namespace_config(namespace: str, request: Request) -> dict[str, Any]:
    return _namespace_config(pipeline_of(request), validate_namespace(namespace))


@admin_router.put(
    "/namespaces/{namespace}/config",
    summary="Change a namespace's threshold and guards; takes effect at once and persists",
)
async def put_namespace_config(namespace: str, update: NamespaceConfigUpdate, request: Request) -> dict[str, Any]:
    pipeline = pipeline_of(request)
    validate_namespace(namespace)
    changes = update.model_dump(exclude_none=True)
    try:
        pipeline.policies.set(namespace, changes)
    except ValueError as exc:
        raise InvalidRequest(str(exc), code="invalid_config") from exc
    await request.app.state.semcache.store.set_namespace_config(namespace, pipeline.policies.overrides(namespace))
    return _namespace_config(pipeline, namespace)


@admin_router.get(
    "/namespaces/{namespace}/quality",
    summary="A namespace's error budget: the decision line, the estimated wrong share and the evidence behind it",
)
async def namespace_quality(namespace: str, request: Request) -> dict[str, Any]:
    pipeline = pipeline_of(request)
    validate_namespace(namespace)
    return _quality(pipeline, namespace)


@admin_router.delete(
    "/namespaces/{namespace}/quality",
    summary="Forget a namespace's evidence: its line goes back to the threshold until it has learned again",
)
async def reset_namespace_quality(namespace: str, request: Request) -> dict[str, Any]:
    pipeline, evidence = pipeline_of(request), request.app.state.semcache.evidence_store
    validate_namespace(namespace)
    pipeline.budgets.forget(namespace)
    pipeline.semantic.verification.forget(namespace)
    if pipeline.judge is not None:
        pipeline.judge.forget(namespace)
    await evidence.clear_evidence(namespace)
    return _quality(pipeline, namespace)


def _quality(pipeline: Pipeline, namespace: str) -> dict[str, Any]:
    """The namespace's error budget per script, and how the judge that labels its evidence decides."""
    judge = pipeline.judge.describe(namespace) if pipeline.judge is not None else None
    return {"namespace": namespace, "scripts": pipeline.semantic.quality(namespace), "judge": judge}


@admin_router.get("/decisions", summary="Recent semantic lookups: query, best candidate, similarity, guards, decision")
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
    served = await pipeline.feedback(body.id, admitted_namespace(request), body.correct)
    return {"id": body.id, "recorded": True, "correct": body.correct, "tier": served.tier}
