"""Any OpenAI-compatible HTTP API (OpenAI, vLLM, Ollama, llama.cpp server, ...), over one pooled client."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

import httpx
from pydantic_core import from_json

from ..decision.verification import VERIFICATION_HEADER, VERIFICATION_MARK
from ..errors import (
    UpstreamAnswerTooLarge,
    UpstreamError,
    UpstreamStatusError,
    UpstreamUnavailable,
    UpstreamUnexpectedStatus,
)
from ..logs import REQUEST_ID_HEADER, Redactor, current_request_id
from ..protocols import Relayed, RelayRequest, UpstreamApi
from ..scrubbing import SecretScrubber

# Headers from the client that are safe and useful to pass on, when the client's own key is.
_FORWARDED_HEADERS = ("authorization", "openai-organization", "openai-project")
# Headers of a relayed answer passed back to the client; the body comes decoded, so no encoding or
# length of the upstream's, and none of its cookies.
_RELAYED_HEADERS = ("content-type", "content-disposition", "openai-processing-ms", "x-request-id")
# Where SSE lines end (CRLF, LF or CR, and nothing else), and the longest line kept while it arrives.
_SSE_LINE_END = re.compile(rb"\r\n|\r|\n")
MAX_SSE_LINE_BYTES = 8 * 1024 * 1024
_LINES_BETWEEN_YIELDS = 64
# JSON this long is parsed and checked in a worker thread, so that the event loop is free before
# and after it.
_PARSE_OFF_LOOP_BYTES = 256 * 1024
_T = TypeVar("_T")
# An error body longer than this is not read to its end, nor relayed: no real error needs more.
_MAX_ERROR_BODY_BYTES = 64 * 1024
# Retry-After values passed on to the client: seconds, or an HTTP date; nothing else an upstream sends.
_RETRY_AFTER = re.compile(r"\d{1,9}(\.\d{1,6})?|[A-Z][a-z]{2}, \d{2} [A-Z][a-z]{2} \d{4} \d{2}:\d{2}:\d{2} GMT")
# Where each API is, below the base URL.
_PATHS: dict[UpstreamApi, str] = {"chat": "/chat/completions", "completions": "/completions", "responses": "/responses"}
# The Responses API's stream ends with one of these events, and no [DONE].
_RESPONSE_FINAL_EVENTS = frozenset(("response.completed", "response.incomplete", "response.failed"))
# Without configured secrets, the upstream's errors are still scrubbed of anything that looks like one.
_PATTERNS_ONLY = Redactor()
_NO_SECRETS = SecretScrubber()
_DEFAULT_PORTS = {"http": 80, "https": 443}


class RemoteUpstream:
    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        connect_timeout_s: float = 5.0,
        read_timeout_s: float = 120.0,
        max_connections: int = 100,
        max_response_bytes: int = 32 * 1024 * 1024,
        redact: Redactor = _PATTERNS_ONLY,
        scrub: SecretScrubber = _NO_SECRETS,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        """``max_response_bytes`` bounds a non-streamed answer (a larger one is a 502); ``redact``
        scrubs the upstream's error messages, which may quote the key they refused, before a client
        sees them; ``scrub`` takes the configured secrets out of every answer it relays, errors or not,
        and with them the client's own key when that is what went upstream."""
        self.base_url = base_url.rstrip("/")
        self._api_key = api_key
        self._max_response_bytes = max_response_bytes
        self._redact = redact
        self._scrub = scrub
        self._client = httpx.AsyncClient(
            base_url=self.base_url,
            timeout=httpx.Timeout(read_timeout_s, connect=connect_timeout_s),
            limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections),
            transport=transport,
        )

    def _headers(self, client_headers: dict[str, str]) -> dict[str, str]:
        headers = {name: value for name, value in client_headers.items() if name.lower() in _FORWARDED_HEADERS}
        if self._api_key:
            # The operator's key: its organization and project are the operator's to choose, not a
            # client's, which could otherwise bill and act under any of them.
            headers = {"Authorization": f"Bearer {self._api_key}"}
        request_id = current_request_id()
        if request_id is not None:  # ours, never the client's header: one id across both logs
            headers[REQUEST_ID_HEADER] = request_id
        if VERIFICATION_MARK in client_headers:
            headers[VERIFICATION_HEADER] = "true"
        return headers

    def _scrubber(self, headers: dict[str, str], *, shared: bool = True) -> SecretScrubber:
        """What to take out of the answer to a request sent with ``headers``: the configured
        secrets, and the key that went upstream with it. ``shared``: the answer may be cached or
        handed to other clients, so one that holds that key fails instead (the client chose the key)."""
        scheme, _, token = headers.get("Authorization", headers.get("authorization", "")).partition(" ")
        return self._scrub.with_client_key(token.strip() if scheme.lower() == "bearer" else None, refuse=shared)

    async def complete(
        self, body: dict[str, Any], headers: dict[str, str], api: UpstreamApi = "chat"
    ) -> dict[str, Any]:
        outgoing = self._headers(headers)
        request = self._client.build_request("POST", _PATHS[api], json=body, headers=outgoing)
        data = await self._send(request)
        answer = await _off_loop_if_large(_ANSWER_READERS[api], data, len(data))
        return await _scrubbed(self._scrubber(outgoing), answer, data)

    async def stream(
        self, body: dict[str, Any], headers: dict[str, str], api: UpstreamApi = "chat"
    ) -> AsyncIterator[dict[str, Any]]:
        outgoing = self._headers(headers)
        request = self._client.build_request("POST", _PATHS[api], json={**body, "stream": True}, headers=outgoing)
        response = await self._open(request)
        await _whole_answer_status(response, request)
        try:
            async for chunk in parse_sse(response.aiter_bytes(), self._redact, api, self._scrubber(outgoing)):
                yield chunk
        except httpx.TimeoutException as exc:
            raise UpstreamUnavailable("the upstream stopped sending mid-stream", status_code=504) from exc
        except httpx.HTTPError as exc:
            raise UpstreamUnavailable("the upstream stream broke off") from exc
        finally:
            await response.aclose()

    async def embed(self, body: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
        outgoing = self._headers(headers)
        request = self._client.build_request("POST", "/embeddings", json=body, headers=outgoing)
        return await self._json_object(request, "an embeddings answer", self._scrubber(outgoing))

    async def list_models(self, headers: dict[str, str]) -> dict[str, Any]:
        outgoing = self._headers(headers)
        request = self._client.build_request("GET", "/models", headers=outgoing)
        return await self._json_object(request, "a model list", self._scrubber(outgoing))

    async def _json_object(self, request: httpx.Request, what: str, scrub: SecretScrubber) -> dict[str, Any]:
        """A successful answer that must be a JSON object, scrubbed; anything else is a 502 naming
        ``what`` it was."""
        data = await self._send(request)
        try:
            answer = await _off_loop_if_large(_json, data, len(data))
        except ValueError as exc:
            raise UpstreamUnavailable(f"the upstream sent {what} that is not JSON") from exc
        if not isinstance(answer, dict):
            raise UpstreamUnavailable(f"the upstream sent {what} that is not a JSON object")
        return await _scrubbed(scrub, answer, data)

    async def relay(self, request: RelayRequest, headers: dict[str, str]) -> Relayed:
        outgoing = self._headers(headers)
        if request.content_type:
            outgoing["Content-Type"] = request.content_type
        upstream_request = self._client.build_request(
            request.method, request.path, params=request.query or None, content=request.body, headers=outgoing
        )
        response = await self._open(upstream_request)
        passed_on = {name: value for name, value in response.headers.items() if name.lower() in _RELAYED_HEADERS}
        scrub = self._scrubber(outgoing, shared=False)  # relayed to this client alone, never cached
        passed_on = {name: scrub.text(value) for name, value in passed_on.items()}

        async def body() -> AsyncIterator[bytes]:
            try:
                async for piece in response.aiter_bytes():
                    yield piece
            except httpx.HTTPError as exc:
                raise _unavailable(exc, upstream_request) from exc

        scrubbed = scrub.wire(body(), response.headers.get("content-type"))
        return Relayed(response.status_code, passed_on, scrubbed, response.aclose)

    async def _open(self, request: httpx.Request) -> httpx.Response:
        """The upstream's response, its body not read yet; an HTTP error status is raised as a
        scrubbed ``UpstreamStatusError``, and a connection failure as ``UpstreamUnavailable``."""
        try:
            response = await self._client.send(request, stream=True)
        except httpx.HTTPError as exc:
            raise _unavailable(exc, request) from exc
        if response.status_code >= 400:
            try:
                raise self._status_error(request, response.status_code, await _error_body(response), response.headers)
            finally:
                await response.aclose()
        return response

    async def _send(self, request: httpx.Request) -> bytes:
        """The body of a successful answer, read as it arrives and never past ``max_response_bytes``."""
        response = await self._open(request)
        await _whole_answer_status(response, request)
        try:
            body = await _read_at_most(response, self._max_response_bytes)
        except httpx.HTTPError as exc:
            raise _unavailable(exc, request) from exc
        finally:
            await response.aclose()
        if body is None:
            raise UpstreamAnswerTooLarge(
                f"the upstream's answer is too large to relay: over {self._max_response_bytes} bytes "
                "(max_upstream_response_bytes)"
            )
        return body

    def _status_error(
        self, request: httpx.Request, status: int, content: bytes | None, headers: httpx.Headers
    ) -> UpstreamStatusError:
        """The upstream's HTTP error, its body scrubbed of secrets: it is relayed to the client."""
        try:
            body = _json(content) if content is not None else None
        except ValueError:
            body = None
        retry_after = headers.get("retry-after")
        passed_on = {"Retry-After": retry_after} if retry_after and _RETRY_AFTER.fullmatch(retry_after) else {}
        return UpstreamStatusError(
            f"the upstream at {upstream_address(request)} answered HTTP {status}",
            status_code=status if status in (400, 401, 403, 404, 408, 409, 413, 422, 429) or status >= 500 else 502,
            body=self._redact.scrub(body) if isinstance(body, dict) else None,
            headers=passed_on,
        )

    async def unreachable_reason(self, timeout_s: float) -> str | None:
        """Why the upstream cannot be reached, or None when it answers anything at all (an error
        status too) to ``GET /models`` within ``timeout_s``: a check at start-up, never retried."""
        request = self._client.build_request("GET", "/models", headers=self._headers({}), timeout=timeout_s)
        try:
            response = await self._client.send(request, stream=True)
        except httpx.ConnectTimeout:
            return f"no connection within {timeout_s:g} s"
        except httpx.TimeoutException:
            return f"connected, but no answer to GET /models within {timeout_s:g} s"
        except httpx.HTTPError as exc:
            return type(exc).__name__
        await response.aclose()
        return None

    async def close(self) -> None:
        await self._client.aclose()


async def parse_sse(
    body: AsyncIterator[bytes],
    redact: Redactor = _PATTERNS_ONLY,
    api: UpstreamApi = "chat",
    scrub: SecretScrubber = _NO_SECRETS,
) -> AsyncIterator[dict[str, Any]]:
    """Yield the JSON chunks of an SSE stream; raise unless it ends with ``data: [DONE]`` (or, for
    the Responses API, with its final ``response.completed``, ``.incomplete`` or ``.failed`` event).

    Every chunk is an object whose ``choices``, if any, is a list of objects with an object ``delta``
    (a ``text`` for the legacy completions). Anything else the upstream sends ends the stream with an
    ``UpstreamError``; an in-band error event is relayed as the upstream worded it, scrubbed by ``redact``.
    Every other event is scrubbed of the secrets ``scrub`` knows, also of one split across events.
    """
    choice_body = "delta" if api == "chat" else None
    events = scrub.events()
    async for line in _sse_lines(body):
        if not line.startswith(b"data:"):
            continue  # blank separators, comments and event names carry nothing we use
        data = line[5:].strip()
        if data == b"[DONE]":
            for chunk in events.finish():
                yield chunk
            return
        chunk = await _off_loop_if_large(lambda data: _stream_event(data, choice_body), data, len(data))
        if _is_error_event(chunk):
            scrubbed = await _off_loop_if_large(redact.scrub, scrub.value(chunk), len(data))
            raise UpstreamStatusError("the upstream reported an error mid-stream", status_code=502, body=scrubbed)
        for scrubbed in await _off_loop_if_large(lambda sent: events.feed(*sent), (chunk, data), len(data)):
            yield scrubbed
        if api == "responses" and _is_final_event(chunk):
            return
    raise UpstreamUnavailable("the upstream stream ended before [DONE]")


async def _sse_lines(body: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """The lines of an event stream, split where the SSE spec splits them.

    Not ``httpx.Response.aiter_lines``: that also splits at U+2028, U+0085 and other characters
    that JSON strings may hold as they are, which cut an answer's event in two.
    """
    pending: list[bytes] = []
    pending_bytes = 0
    async for chunk in body:
        *ended, rest = _SSE_LINE_END.split(chunk)
        for number, part in enumerate(ended, start=1):
            yield b"".join((*pending, part))
            pending, pending_bytes = [], 0
            if not number % _LINES_BETWEEN_YIELDS:
                await asyncio.sleep(0)  # a chunk of many small events must not hold the loop while it is relayed
        pending.append(rest)
        pending_bytes += len(rest)
        if pending_bytes > MAX_SSE_LINE_BYTES:
            raise UpstreamUnavailable(f"the upstream sent a stream line over {MAX_SSE_LINE_BYTES} bytes")
    if pending_bytes:
        yield b"".join(pending)  # the last line, with no line end after it


async def _read_at_most(response: httpx.Response, limit: int) -> bytes | None:
    """The response's body as it arrives, or None once it passes ``limit`` bytes (read no further)."""
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        return None
    parts: list[bytes] = []
    size = 0
    async for part in response.aiter_bytes():
        size += len(part)
        if size > limit:
            return None
        parts.append(part)
    return b"".join(parts)


async def _error_body(response: httpx.Response) -> bytes | None:
    """An error response's body, when it is short enough to be an error message."""
    try:
        return await _read_at_most(response, _MAX_ERROR_BODY_BYTES)
    except httpx.HTTPError:
        return None  # the status says enough


async def _off_loop_if_large(work: Callable[[Any], _T], value: Any, size: int) -> _T:
    """``work(value)``, in a worker thread when ``size`` (the bytes it came from) is large."""
    if size >= _PARSE_OFF_LOOP_BYTES:
        return await asyncio.to_thread(work, value)
    return work(value)


async def _whole_answer_status(response: httpx.Response, request: httpx.Request) -> None:
    """Raise ``UpstreamUnexpectedStatus`` (and close ``response``) unless it is a 200: a 206 is a
    part of an answer, a 203 one that a proxy changed, a 3xx no answer at all."""
    if response.status_code == 200:
        return
    await response.aclose()
    raise UpstreamUnexpectedStatus(
        f"the upstream at {upstream_address(request)} answered HTTP {response.status_code}, where its API answers "
        "200; semcache neither relays nor caches such an answer"
    )


async def _scrubbed(scrub: SecretScrubber, answer: dict[str, Any], data: bytes) -> dict[str, Any]:
    """``answer`` (read from ``data``) without the secrets ``scrub`` knows: an upstream that quotes
    its key must not hand it on, nor have it cached."""
    if not scrub.may_hold(data):
        return answer
    scrubbed: dict[str, Any] = await _off_loop_if_large(scrub.value, answer, len(data))
    return scrubbed


def _is_final_event(chunk: dict[str, Any]) -> bool:
    kind = chunk.get("type")
    return isinstance(kind, str) and kind in _RESPONSE_FINAL_EVENTS


def _json_object(data: bytes) -> dict[str, Any]:
    try:
        answer = _json(data)
    except ValueError as exc:
        raise UpstreamUnavailable("the upstream sent a response that is not JSON") from exc
    if not isinstance(answer, dict):
        raise UpstreamUnavailable("the upstream sent a response that is not a JSON object")
    return answer


def _completion(data: bytes, choice_body: str | None = "message") -> dict[str, Any]:
    """A non-streamed chat (or legacy) completion: a JSON object with well-formed choices."""
    answer = _json_object(data)
    if not _well_formed_choices(answer.get("choices"), choice_body):
        raise UpstreamUnavailable("the upstream sent a response without well-formed choices")
    return answer


def _response(data: bytes) -> dict[str, Any]:
    """A non-streamed Response object: a JSON object with a list of output items."""
    answer = _json_object(data)
    output = answer.get("output")
    if not isinstance(output, list) or not all(isinstance(item, dict) for item in output):
        raise UpstreamUnavailable("the upstream sent a response without a well-formed output list")
    return answer


_ANSWER_READERS: dict[UpstreamApi, Callable[[bytes], dict[str, Any]]] = {
    "chat": _completion,
    "completions": lambda data: _completion(data, None),
    "responses": _response,
}


def _stream_event(data: bytes, choice_body: str | None = "delta") -> dict[str, Any]:
    """One stream event: a JSON object, an error or with well-formed choices, if any."""
    try:
        chunk = _json(data)
    except ValueError as exc:
        raise UpstreamUnavailable("the upstream sent a malformed stream event") from exc
    if not isinstance(chunk, dict):
        raise UpstreamUnavailable("the upstream sent a stream event that is not an object")
    if not _is_error_event(chunk) and "choices" in chunk and not _well_formed_choices(chunk["choices"], choice_body):
        raise UpstreamUnavailable("the upstream sent a stream event without well-formed choices")
    return chunk


def _is_error_event(chunk: dict[str, Any]) -> bool:
    """OpenAI's ``{"error": {...}}`` (the Responses API's ``{"type": "error", ...}``), or the
    ``{"object": "error", "message": ...}`` of vLLM and others."""
    return "error" in chunk or chunk.get("object") == "error" or chunk.get("type") == "error"


def _json(data: bytes) -> Any:
    """Upstream JSON: strict UTF-8, no NaN, no lone surrogates (text the client could not be sent),
    and a ValueError, never a RecursionError, when it is nested too deep."""
    return from_json(data, allow_inf_nan=False)


def _well_formed_choices(choices: object, body_field: str | None) -> bool:
    """A list of objects whose ``message`` (or ``delta``), when present, is an object, and whose tool
    calls, when present, are a list of objects with integer indexes: what the pipeline reads."""
    if not isinstance(choices, list):
        return False
    for choice in choices:
        if not isinstance(choice, dict):
            return False
        if body_field is None:
            continue
        body = choice.get(body_field)
        if body is None:
            continue
        if not isinstance(body, dict):
            return False
        calls = body.get("tool_calls")
        if calls is not None and not (
            isinstance(calls, list)
            and all(isinstance(call, dict) and isinstance(call.get("index", 0), int | None) for call in calls)
        ):
            return False
    return True


def _unavailable(exc: httpx.HTTPError, request: httpx.Request) -> UpstreamError:
    if isinstance(exc, httpx.TimeoutException):
        return UpstreamUnavailable(f"the upstream at {upstream_address(request)} timed out", status_code=504)
    return UpstreamUnavailable(f"cannot reach the upstream at {upstream_address(request)}: {type(exc).__name__}")


def upstream_address(request: httpx.Request) -> str:
    """``scheme://host:port/path`` of a request to the upstream, for the errors that clients and
    operators read: a wrong base URL shows in it, and never a password or query the URL may hold."""
    return f"{server_address(request.url)}{request.url.path}"


def server_address(url: httpx.URL | str) -> str:
    """``scheme://host:port`` of an upstream URL, the port spelled out even when it is the
    scheme's default: what names the upstream in errors and log lines, without its credentials."""
    url = httpx.URL(url)
    host = f"[{url.host}]" if ":" in url.host else url.host
    port = url.port if url.port is not None else _DEFAULT_PORTS.get(url.scheme)
    return f"{url.scheme}://{host}" + (f":{port}" if port is not None else "")
