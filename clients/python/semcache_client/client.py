"""A small client for the cache API, for applications that call their model themselves::

    from semcache_client import Client

    cache = Client("http://127.0.0.1:8080", api_key="team-a-key")
    found = cache.lookup("How do I reset my password?", scope={"model": "gpt-4o-mini"})
    if found.hit:
        answer = found.answer
    else:
        answer = call_my_model(...)
        cache.store("How do I reset my password?", answer, scope={"model": "gpt-4o-mini"})

Every method has an async twin (``alookup``, ``astore``, ``afeedback``). Errors are raised as
``SemcacheClientError`` with the service's OpenAI-shaped message and code.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import httpx


class SemcacheClientError(Exception):
    """The cache API answered with an error (or could not be reached)."""

    def __init__(self, message: str, *, status: int | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code


@dataclass(frozen=True)
class Found:
    """What a lookup found: on a hit, the answer, the tier and the id feedback takes."""

    hit: bool
    answer: str | None = None
    tier: str | None = None
    similarity: float | None = None
    id: str | None = None
    namespace: str | None = None  # where it was found: feedback on the hit goes there


class Client:
    """``base_url`` is the service's root (``http://host:port``; a trailing ``/v1`` is accepted)."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        *,
        namespace: str | None = None,
        timeout_s: float = 10.0,
    ) -> None:
        root = base_url.rstrip("/").removesuffix("/v1")
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.namespace = namespace
        self._options: dict[str, Any] = {"base_url": root, "headers": headers, "timeout": timeout_s}
        self._sync = httpx.Client(**self._options)
        # An async client serves one event loop: a caller that runs several (LangChain, tests) gets one each.
        self._async: httpx.AsyncClient | None = None
        self._async_loop: asyncio.AbstractEventLoop | None = None

    # -- sync ----------------------------------------------------------------------------------

    def lookup(self, prompt: str, *, scope: dict[str, Any] | None = None, namespace: str | None = None) -> Found:
        return _found(self._call("/v1/semcache/lookup", self._lookup_body(prompt, scope, namespace)))

    def store(
        self,
        prompt: str,
        answer: str,
        *,
        scope: dict[str, Any] | None = None,
        namespace: str | None = None,
        ttl_s: float | None = None,
    ) -> int:
        """Store ``answer`` for ``prompt``; returns the entry's id."""
        body = self._store_body(prompt, answer, scope, namespace, ttl_s)
        return int(self._call("/v1/semcache/store", body)["id"])

    def feedback(self, hit: Found | str, *, correct: bool, namespace: str | None = None) -> None:
        """Report a hit (a ``Found``, or its id and namespace) as right or wrong; a wrong one is
        never served to that prompt again."""
        body, headers = self._feedback(hit, correct, namespace)
        self._call("/v1/semcache/feedback", body, headers)

    def close(self) -> None:
        self._sync.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()

    # -- async ---------------------------------------------------------------------------------

    async def alookup(self, prompt: str, *, scope: dict[str, Any] | None = None, namespace: str | None = None) -> Found:
        body = self._lookup_body(prompt, scope, namespace)
        return _found(await self._acall("/v1/semcache/lookup", body))

    async def astore(
        self,
        prompt: str,
        answer: str,
        *,
        scope: dict[str, Any] | None = None,
        namespace: str | None = None,
        ttl_s: float | None = None,
    ) -> int:
        body = self._store_body(prompt, answer, scope, namespace, ttl_s)
        return int((await self._acall("/v1/semcache/store", body))["id"])

    async def afeedback(self, hit: Found | str, *, correct: bool, namespace: str | None = None) -> None:
        body, headers = self._feedback(hit, correct, namespace)
        await self._acall("/v1/semcache/feedback", body, headers)

    async def aclose(self) -> None:
        if self._async is not None:
            await self._async.aclose()
            self._async = None

    # -- plumbing ------------------------------------------------------------------------------

    def _lookup_body(self, prompt: str, scope: dict[str, Any] | None, namespace: str | None) -> dict[str, Any]:
        body: dict[str, Any] = {"prompt": prompt, "scope": scope or {}}
        if namespace or self.namespace:
            body["namespace"] = namespace or self.namespace
        return body

    def _store_body(
        self, prompt: str, answer: str, scope: dict[str, Any] | None, namespace: str | None, ttl_s: float | None
    ) -> dict[str, Any]:
        body = {**self._lookup_body(prompt, scope, namespace), "answer": answer}
        if ttl_s is not None:
            body["ttl_s"] = ttl_s
        return body

    def _feedback(
        self, hit: Found | str, correct: bool, namespace: str | None
    ) -> tuple[dict[str, Any], dict[str, str]]:
        hit_id = hit.id if isinstance(hit, Found) else hit
        if not hit_id:
            raise SemcacheClientError("feedback needs a hit's id: a miss has none")
        where = namespace or (hit.namespace if isinstance(hit, Found) else None) or self.namespace
        return {"id": hit_id, "correct": correct}, ({"X-Semcache-Namespace": where} if where else {})

    def _call(self, path: str, body: dict[str, Any], headers: dict[str, str] | None = None) -> dict[str, Any]:
        try:
            response = self._sync.post(path, json=body, headers=headers)
        except httpx.HTTPError as exc:
            raise SemcacheClientError(f"semcache is unreachable: {exc}") from exc
        return _json(response)

    async def _acall(self, path: str, body: dict[str, Any], headers: dict[str, str] | None = None) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        if self._async is None or self._async_loop is not loop:
            self._async, self._async_loop = httpx.AsyncClient(**self._options), loop
        try:
            response = await self._async.post(path, json=body, headers=headers)
        except httpx.HTTPError as exc:
            raise SemcacheClientError(f"semcache is unreachable: {exc}") from exc
        return _json(response)


def _json(response: httpx.Response) -> dict[str, Any]:
    try:
        data = response.json()
    except ValueError:
        data = None
    if response.status_code >= 400 or not isinstance(data, dict):
        error = data.get("error") if isinstance(data, dict) else None
        message = error.get("message") if isinstance(error, dict) else response.text[:200]
        code = error.get("code") if isinstance(error, dict) else None
        raise SemcacheClientError(f"semcache answered {response.status_code}: {message}", status=response.status_code,
                                  code=code)  # fmt: skip
    return data


def _found(data: dict[str, Any]) -> Found:
    return Found(
        hit=bool(data.get("hit")), answer=data.get("answer"), tier=data.get("tier"),
        similarity=data.get("similarity"), id=data.get("id"), namespace=data.get("namespace"),
    )  # fmt: skip
