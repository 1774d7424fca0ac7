"""What semcache serves, at which path and with which method: what its 404s and 405s say.

A path that semcache serves, asked with another method, is a 405 whose ``Allow`` names the methods
it takes. A path it does not serve is a 404 that says so and names the nearest path it serves; only
a real OpenAI route that an operator could pass on (``passthrough_routes``) gets that advice.
"""

from __future__ import annotations

import difflib
from typing import Any

from fastapi.routing import iter_route_contexts
from starlette.types import ASGIApp

from ..errors import MethodNotAllowed, NotFound, SemcacheError
from ..settings import OPENAI_ROUTES, PASSTHROUGH_METHODS, Settings

# The tag of the pass-through's catch-all operations, which serve no path of their own.
PASS_THROUGH_TAG = "pass-through"
_NEAREST_CUTOFF = 0.6


def refusal(app: ASGIApp, settings: Settings, method: str, path: str) -> SemcacheError:
    """The answer to ``method`` on ``path``, which no route serves with that method: a 405 when
    semcache serves or passes on ``path`` with other methods, else a 404."""
    segments = path.split("/")
    route = segments[2] if len(segments) > 2 and segments[1] == "v1" else None
    passed_on = set(settings.passthrough_methods_of(route)) if route else set()
    allowed = served_methods(app, path) | passed_on
    if allowed:
        return method_not_allowed(method, path, allowed, pass_through=bool(passed_on))
    return not_found(app, settings, path)


def served_methods(app: ASGIApp, path: str) -> set[str]:
    """The methods of semcache's own routes at ``path`` (the pass-through's catch-all aside)."""
    methods: set[str] = set()
    for route in _own_routes(app):
        if route.path_regex.match(path):
            methods |= set(route.methods or ())
    return methods


def method_not_allowed(method: str, path: str, allowed: set[str], *, pass_through: bool = False) -> MethodNotAllowed:
    """A 405 for ``method`` on ``path``, whose ``Allow`` lists ``allowed``; ``pass_through`` when
    ``path`` is under a pass-through route, whose methods an operator may widen."""
    listed = ", ".join(sorted(allowed, key=_method_order))
    message = f"{method} {path} is not served: it takes {listed}"
    if pass_through:
        message += f"; an operator can pass {method} on with passthrough_methods"
    return MethodNotAllowed(message, headers={"Allow": listed})


def not_found(app: ASGIApp, settings: Settings, path: str) -> NotFound:
    """The 404 for ``path``: advice for an OpenAI route an operator could pass on, else the nearest
    path semcache serves."""
    segments = path.removeprefix("/").split("/")
    route = segments[1] if len(segments) > 1 and segments[0] == "v1" else None
    if route in OPENAI_ROUTES and route not in settings.passthrough_routes:
        return NotFound(
            f"semcache does not pass on /v1/{segments[1]}; an operator can add it to passthrough_routes",
            code="unknown_route",
        )
    nearest = nearest_route(app, settings, path)
    hint = f"; did you mean {nearest}?" if nearest else "; GET /docs lists the paths semcache serves"
    return NotFound(f"unknown route {_shown(path)}{hint}", code="unknown_route")


def nearest_route(app: ASGIApp, settings: Settings, path: str) -> str | None:
    """The path semcache serves nearest to ``path``, with its methods (``POST /v1/chat/completions``):
    one it lies below or above, else the closest spelling; None when none is close."""
    routes: dict[str, set[str]] = {}
    for route in _own_routes(app):
        routes.setdefault(route.path, set()).update(route.methods or ())
    for name in settings.passthrough_routes:
        routes.setdefault(f"/v1/{name}", set()).update(settings.passthrough_methods_of(name))
    asked = path.lower().rstrip("/") or "/"
    related = [known for known in routes if known in (asked, *_parents(asked)) or known.startswith(asked + "/")]
    nearest = related or difflib.get_close_matches(asked, list(routes), n=1, cutoff=_NEAREST_CUTOFF)
    if not nearest:
        return None
    best = max(nearest, key=lambda known: difflib.SequenceMatcher(None, asked, known).ratio())
    methods = ", ".join(sorted(routes[best], key=_method_order))
    return f"{methods} {best}" if methods else best


def _parents(path: str) -> list[str]:
    """``/v1/a/b``'s parents: ``/v1/a`` and ``/v1`` (not ``/``, which every path is below)."""
    parts = path.split("/")
    return ["/".join(parts[:end]) for end in range(len(parts) - 1, 1, -1)]


def _own_routes(app: Any) -> list[Any]:
    """semcache's routes that serve paths of their own: every one but the pass-through's catch-all,
    included routers' routes as FastAPI routes them."""
    return [
        route
        for route in iter_route_contexts(getattr(app, "routes", ()))
        if hasattr(route, "path_regex") and PASS_THROUGH_TAG not in (getattr(route, "tags", None) or ())
    ]


def _method_order(method: str) -> int:
    return PASSTHROUGH_METHODS.index(method) if method in PASSTHROUGH_METHODS else len(PASSTHROUGH_METHODS)


def _shown(path: str) -> str:
    """A client's path in a message: bounded, and printable."""
    shown = path if len(path) <= 200 else path[:200] + "…"
    return shown if shown.isprintable() else repr(shown)
