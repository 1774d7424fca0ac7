"""``POST /v1/embeddings``, cached per input (``semcache.embedding_cache``), with ``cache_embeddings``
on; off, the pass-through serves it. Same auth, namespace, rate limit and body bounds as chat."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response

from ..embedding_cache import EmbeddingCache, parse_embedding_request
from ..errors import NotReady
from .limits import BoundedJsonRoute, require_json_body
from .rendering import json_response
from .routes import admitted_namespace, request_controls, upstream_of

embeddings_router = APIRouter(dependencies=[Depends(require_json_body)], route_class=BoundedJsonRoute)


def embedding_cache_of(request: Request) -> EmbeddingCache:
    """The embeddings cache, once the store is open (a 503 until then)."""
    state = request.app.state.semcache
    if state.embedding_cache is None:
        detail = f"semcache failed to load: {state.load_error}" if state.load_error else "semcache is still loading"
        raise NotReady(detail, headers={"Retry-After": "5"})
    cache: EmbeddingCache = state.embedding_cache
    return cache


@embeddings_router.post(
    "/v1/embeddings",
    summary="Create embeddings, each input from the cache when it was embedded before",
    tags=["embeddings"],
)
async def create_embeddings(request: Request) -> Response:
    namespace = admitted_namespace(request)
    upstream_of(request)  # a 503 while the local model loads
    cache = embedding_cache_of(request)
    body = parse_embedding_request(await request.json())
    answer = await cache.embed(body, namespace, request_controls(request, body.user), dict(request.headers))
    headers = {
        "X-Semcache": answer.outcome,
        "X-Semcache-Cached-Inputs": f"{answer.from_cache}/{len(answer.vectors)}",
    }
    return await json_response(answer.response(body.encoding_format), headers=headers)
