"""Any OpenAI-compatible HTTP API (OpenAI, vLLM, Ollama, llama.cpp server, ...), over one pooled client."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx

from ..errors import UpstreamError, UpstreamStatusError, UpstreamUnavailable
from ..logs import REQUEST_ID_HEADER, current_request_id

# Headers from the client that are safe and useful to pass on.
_FORWARDED_HEADERS = ("authorization", "openai-organization", "openai-project")


class RemoteUpstream:
    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        connect_timeout_s: float = 5.0,
        read_timeout_s: float = 120.0,
        max_connections: int = 100,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._api_key = api_key
        self._client = httpx.AsyncClient(
            base_url=self.base_url,
            timeout=httpx.Timeout(read_timeout_s, connect=connect_timeout_s),
            limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections),
            transport=transport,
        )

    def _headers(self, client_headers: dict[str, str]) -> dict[str, str]:
        headers = {name: value for name, value in client_headers.items() if name.lower() in _FORWARDED_HEADERS}
        if self._api_key:
            headers = {k: v for k, v in headers.items() if k.lower() != "authorization"}
            headers["Authorization"] = f"Bearer {self._api_key}"
        request_id = current_request_id()
        if request_id is not None:  # ours, never the client's header: one id across both logs
            headers[REQUEST_ID_HEADER] = request_id
        return headers

    async def complete(self, body: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
        try:
            response = await self._client.post("/chat/completions", json=body, headers=self._headers(headers))
        except httpx.HTTPError as exc:
            raise _unavailable(exc) from exc
        _raise_for_status(response.status_code, response.content, response.headers)
        try:
            answer = response.json()
        except ValueError as exc:
            raise UpstreamUnavailable("the upstream sent a response that is not JSON") from exc
        choices = answer.get("choices") if isinstance(answer, dict) else None
        if not isinstance(choices, list) or not all(isinstance(choice, dict) for choice in choices):
            raise UpstreamUnavailable("the upstream sent a response without well-formed choices")
        return answer

    async def stream(self, body: dict[str, Any], headers: dict[str, str]) -> AsyncIterator[dict[str, Any]]:
        request = self._client.build_request(
            "POST", "/chat/completions", json={**body, "stream": True}, headers=self._headers(headers)
        )
        try:
            response = await self._client.send(request, stream=True)
        except httpx.HTTPError as exc:
            raise _unavailable(exc) from exc
        try:
            if response.status_code >= 400:
                _raise_for_status(response.status_code, await response.aread(), response.headers)
            async for chunk in _parse_sse(response):
                yield chunk
        except httpx.TimeoutException as exc:
            raise UpstreamUnavailable("the upstream stopped sending mid-stream", status_code=504) from exc
        except httpx.HTTPError as exc:
            raise UpstreamUnavailable("the upstream stream broke off") from exc
        finally:
            await response.aclose()

    async def list_models(self, headers: dict[str, str]) -> dict[str, Any]:
        try:
            response = await self._client.get("/models", headers=self._headers(headers))
        except httpx.HTTPError as exc:
            raise _unavailable(exc) from exc
        _raise_for_status(response.status_code, response.content, response.headers)
        try:
            models: dict[str, Any] = response.json()
        except ValueError as exc:
            raise UpstreamUnavailable("the upstream sent a model list that is not JSON") from exc
        return models

    async def close(self) -> None:
        await self._client.aclose()


async def _parse_sse(response: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    """Yield the JSON chunks of an SSE stream; raise unless it ends with ``data: [DONE]``."""
    async for line in response.aiter_lines():
        if not line.startswith("data:"):
            continue  # blank separators, comments and event names carry nothing we use
        data = line[5:].strip()
        if data == "[DONE]":
            return
        try:
            chunk = json.loads(data)
        except ValueError as exc:
            raise UpstreamUnavailable("the upstream sent a malformed stream event") from exc
        if not isinstance(chunk, dict):
            raise UpstreamUnavailable("the upstream sent a stream event that is not an object")
        if "error" in chunk:
            raise UpstreamStatusError("the upstream reported an error mid-stream", status_code=502, body=chunk)
        yield chunk
    raise UpstreamUnavailable("the upstream stream ended before [DONE]")


def _raise_for_status(status: int, content: bytes, headers: httpx.Headers) -> None:
    if status < 400:
        return
    try:
        body = json.loads(content)
    except ValueError:
        body = None
    passed_on = {"Retry-After": headers["retry-after"]} if "retry-after" in headers else {}
    raise UpstreamStatusError(
        f"the upstream answered HTTP {status}",
        status_code=status if status in (400, 401, 403, 404, 408, 409, 413, 422, 429) or status >= 500 else 502,
        body=body if isinstance(body, dict) else None,
        headers=passed_on,
    )


def _unavailable(exc: httpx.HTTPError) -> UpstreamError:
    if isinstance(exc, httpx.TimeoutException):
        return UpstreamUnavailable("the upstream timed out", status_code=504)
    return UpstreamUnavailable(f"cannot reach the upstream: {type(exc).__name__}")
