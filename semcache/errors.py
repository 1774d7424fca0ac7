"""semcache's exceptions, and the only place that builds OpenAI-shaped error bodies.

    SemcacheError                 base; carries an HTTP status, an OpenAI error type and a code
    ├── InvalidRequest            400  the request is malformed or asks for something unsupported
    │   ├── BodyTooLarge          413
    │   ├── RequestTimeout        408  the request's head or body did not arrive in time
    │   └── UnsupportedMediaType  415  an /admin body that is not JSON
    ├── Unauthorized              401  unknown or missing client API key, admin key or metrics key
    ├── Forbidden                 403  a namespace the key may not use, a wrong admin or metrics key,
    │                                  or /admin asked from another site or machine without the key
    ├── RateLimited               429  the client's token bucket is empty (with Retry-After)
    ├── NotFound                  404
    ├── MethodNotAllowed          405  a path semcache serves, or passes on, asked with another method
    ├── NotReady                  503  the model or the index is still loading
    ├── StoreUnavailable          503  the store cannot be reached (Redis) or written (a full disk)
    └── UpstreamError             the upstream failed; status mirrors what the client should see
        ├── UpstreamUnavailable   502/504  connection refused, timed out, or a broken response
        ├── UpstreamAnswerTooLarge  502    an answer larger than semcache relays; never retried
        └── UpstreamStatusError   the upstream answered with an HTTP error; its status is passed on

Foreign exceptions (httpx, sqlite3, pydantic) are translated at the boundary with
``raise ... from exc``; never map every ValueError to a 400.
"""

from __future__ import annotations

from typing import Any


class SemcacheError(Exception):
    status_code = 500
    error_type = "server_error"
    code: str | None = None

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        status_code: int | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        if status_code is not None:
            self.status_code = status_code
        self.headers = headers or {}

    def to_openai(self) -> dict[str, Any]:
        return openai_error_body(self.message, self.error_type, self.code)


class InvalidRequest(SemcacheError):
    status_code = 400
    error_type = "invalid_request_error"
    code = "invalid_request"


class BodyTooLarge(InvalidRequest):
    status_code = 413
    code = "request_too_large"


class RequestTimeout(InvalidRequest):
    status_code = 408
    code = "request_timeout"


class UnsupportedMediaType(InvalidRequest):
    status_code = 415
    code = "unsupported_media_type"


class Unauthorized(SemcacheError):
    status_code = 401
    error_type = "authentication_error"
    code = "invalid_api_key"


class Forbidden(SemcacheError):
    status_code = 403
    error_type = "permission_error"
    code = "forbidden"


class RateLimited(SemcacheError):
    status_code = 429
    error_type = "rate_limit_error"
    code = "rate_limit_exceeded"


class NotFound(SemcacheError):
    status_code = 404
    error_type = "invalid_request_error"
    code = "not_found"


class MethodNotAllowed(SemcacheError):
    """Carries the ``Allow`` header, which names the methods the path takes."""

    status_code = 405
    error_type = "invalid_request_error"
    code = "method_not_allowed"


class NotReady(SemcacheError):
    status_code = 503
    error_type = "server_error"
    code = "not_ready"


class StoreUnavailable(SemcacheError):
    """The store cannot be reached, or cannot write. The request path answers without it instead."""

    status_code = 503
    error_type = "server_error"
    code = "store_unavailable"


class UpstreamError(SemcacheError):
    status_code = 502
    error_type = "upstream_error"
    code = "upstream_error"


class UpstreamUnavailable(UpstreamError):
    code = "upstream_unavailable"


class UnusableAnswer(UpstreamError):
    """The upstream answered, with an answer semcache does not relay: a retry would only fetch
    another like it, and the upstream is not unwell for it (the circuit breaker does not count it)."""


class UpstreamAnswerTooLarge(UnusableAnswer):
    """The upstream's answer is larger than semcache relays."""

    code = "upstream_response_too_large"


class UpstreamQuotedCredential(UnusableAnswer):
    """The upstream's answer holds the API key the client sent it. Taking the key out would let a
    client choose a text to cut from an answer that others are then served, or share with it; the
    answer is neither relayed nor cached."""

    code = "upstream_quoted_credential"


class UpstreamUnexpectedStatus(UnusableAnswer):
    """A success status other than 200 (206 Partial Content, 203 from a proxy that changed the
    answer): not a whole answer as the upstream's API gives one, so it is neither relayed nor cached."""

    code = "upstream_unexpected_status"


class UpstreamStatusError(UpstreamError):
    """The upstream answered with an HTTP error; ``body`` is its OpenAI-shaped error if it sent one."""

    def __init__(
        self,
        message: str,
        *,
        status_code: int,
        body: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message, status_code=status_code, headers=headers)
        self.body = body

    def to_openai(self) -> dict[str, Any]:
        if self.body and isinstance(self.body.get("error"), dict):
            upstream = self.body["error"]
            return openai_error_body(
                str(upstream.get("message") or self.message),
                str(upstream.get("type") or self.error_type),
                upstream.get("code") if upstream.get("code") is not None else self.code,
            )
        return super().to_openai()


def openai_error_body(message: str, error_type: str, code: str | None) -> dict[str, Any]:
    return {"error": {"message": message, "type": error_type, "param": None, "code": code}}
