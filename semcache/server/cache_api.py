"""The cache API, for applications that call their model themselves: ``POST /v1/semcache/lookup``
asks the cache for a prompt's answer, ``POST /v1/semcache/store`` stores one.

A lookup goes through the same tiers, guards and decision line as a chat request. The key is the
namespace, the prompt and the application's own ``scope`` (any JSON object: its model name, its
parameters), never a chat request's, so an answer stored here is served to the cache API only.

Storing plants an answer for everyone in the namespace, so it gets the proxy's defences and one
more: JSON bodies only, never from another site's page (browsers post forms and text to any site
without asking it first, JSON never); the namespace must be one the client's key may use; the
answer is bounded by ``max_answer_bytes``; and without a key file, where nothing tells one client
from another, only clients on this machine may store.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, ConfigDict, Field

from ..errors import Forbidden, InvalidRequest, UnsupportedMediaType
from ..keys import user_id
from ..settings import MAX_TTL_S
from .admin import from_this_machine, refuse_cross_site
from .limits import BoundedJsonRoute, declares_json, not_json_message
from .routes import admit, canonical_authorization, pipeline_of


def require_json_from_this_site(request: Request) -> None:
    refuse_cross_site(request, "/v1/semcache", code="cross_site")
    content_type = request.headers.get("content-type")
    if not declares_json(content_type):  # even without a body: a lookup or a store always has one
        raise UnsupportedMediaType(not_json_message(request.url.path, content_type), code="unsupported_media_type")


cache_api_router = APIRouter(
    prefix="/v1/semcache",
    tags=["cache API"],
    dependencies=[Depends(require_json_from_this_site)],
    route_class=BoundedJsonRoute,
)


class LookupRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    prompt: str = Field(min_length=1, description="The question, as the model gets it (at most max_prompt_chars).")
    namespace: str | None = Field(
        None, description="Default: the X-Semcache-Namespace header, else the API key's first namespace."
    )
    scope: dict[str, Any] = Field(
        default_factory=dict,
        description="Any JSON object that is part of the key (the model name, its parameters): a lookup finds "
        "only answers stored with the same scope.",
    )


class StoreRequest(LookupRequest):
    answer: str = Field(min_length=1, description="The answer to serve to this prompt and its paraphrases.")
    ttl_s: float | None = Field(
        None, ge=0, le=MAX_TTL_S, description="Seconds the entry lives; 0 forever; default the ttl_s setting."
    )


class LookupResult(BaseModel):
    object: str = "semcache.lookup"
    hit: bool
    answer: str | None = Field(description="The cached answer; null on a miss.")
    tier: str | None = Field(description="exact, template or semantic; null on a miss.")
    similarity: float | None = Field(description="Cosine (0-1) of the prompt to the matched one; 1.0 for exact.")
    id: str | None = Field(
        description="The hit's id, for POST /v1/semcache/feedback (from this namespace); null on a miss."
    )
    namespace: str = Field(description="The namespace looked in: feedback on the hit must name it too.")
    verified: bool = Field(False, description="A semantic hit under the certified line that the model approved.")


class StoreResult(BaseModel):
    object: str = "semcache.entry"
    id: int = Field(description="The entry's id (GET /admin/entries/{id}).")
    namespace: str


_NO_USER = "scope_per_user is on in this namespace and the request names no user (send an API key)"


def _namespace_and_user(request: Request, body: LookupRequest) -> tuple[str, bool, str | None]:
    """The namespace, checked against the client's key; whether its entries are per user
    (``scope_per_user``), and then who asked (None: the request names no one)."""
    state = request.app.state.semcache
    if not body.prompt.strip():
        raise InvalidRequest("prompt: must hold some text", code="invalid_prompt")
    if len(body.prompt) > state.settings.max_prompt_chars:
        raise InvalidRequest(f"prompt: at most {state.settings.max_prompt_chars} characters", code="prompt_too_long")
    requested = body.namespace if body.namespace is not None else request.headers.get("x-semcache-namespace")
    namespace = str(state.access.namespace_for(request.headers.get("authorization"), requested))
    admit(request, namespace)
    per_user = pipeline_of(request).policies.for_namespace(namespace).scope_per_user
    if not per_user:
        return namespace, False, None
    return namespace, True, user_id(canonical_authorization(request.headers.get("authorization")), None)


@cache_api_router.post(
    "/lookup",
    summary="Look a prompt up in the cache, as the proxy would",
    response_model=LookupResult,
)
async def lookup(body: LookupRequest, request: Request) -> LookupResult:
    pipeline = pipeline_of(request)
    namespace, per_user, user = _namespace_and_user(request, body)
    # With scope_per_user and no user named, nothing is shared and so nothing found (chat bypasses).
    found = (
        None
        if per_user and user is None
        else await pipeline.lookup_prompt(body.prompt, namespace, body.scope, user, dict(request.headers))
    )
    hit = found.hit if found is not None else None
    if found is None or hit is None:
        return LookupResult(
            hit=False, answer=None, tier=None, similarity=None, id=None, namespace=namespace, verified=False
        )
    similarity = 1.0 if hit.tier == "exact" or hit.similarity is None else round(hit.similarity, 4)
    return LookupResult(hit=True, answer=hit.answer, tier=hit.tier, similarity=similarity,
                        id=pipeline.served_id(found), namespace=namespace, verified=hit.verified)  # fmt: skip


@cache_api_router.post(
    "/store",
    summary="Store an answer for a prompt, for later lookups",
    response_model=StoreResult,
)
async def store(body: StoreRequest, request: Request) -> StoreResult:
    pipeline = pipeline_of(request)
    namespace, per_user, user = _namespace_and_user(request, body)
    if not request.app.state.semcache.access.configured and not from_this_machine(request):
        raise Forbidden(
            "without client API keys (api_keys_file), only clients on this machine may store answers: "
            "anyone else could plant them for every client",
            code="store_needs_api_keys",
        )
    if per_user and user is None:
        raise InvalidRequest(_NO_USER, code="user_required")
    entry_id = await pipeline.store_prompt(body.prompt, body.answer, namespace, body.scope, user, body.ttl_s)
    return StoreResult(id=entry_id, namespace=namespace)
