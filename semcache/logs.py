"""Logging for ``semcache serve``: one JSON object per line, the request id on every line logged
while a request is served, and no secrets, whoever logged them.

The request id lives in a context variable, so lines from the pipeline, the upstream client and
the libraries below them (httpx, uvicorn) carry it without being handed it. Tasks and
``asyncio.to_thread`` calls started during a request copy the context, and with it the id; workers
that outlive a request (the embedding batcher) start from an empty context instead.

Redaction happens in a filter on the one handler, so it covers every logger that propagates to the
root (uvicorn's included, which ``configure_logging`` makes propagate), exception tracebacks and
extra fields as well as messages.
"""

from __future__ import annotations

import json
import logging
import os
import re
import secrets
import sys
import time
from collections.abc import Iterable
from contextvars import ContextVar, Token
from typing import Any, Literal, TextIO

REQUEST_ID_HEADER = "X-Request-Id"
REDACTED = "[redacted]"
LogFormat = Literal["json", "text"]

_request_id: ContextVar[str | None] = ContextVar("semcache_request_id", default=None)
# A client's own id is kept when it is short and plain: it goes into every log line and upstream.
_SANE_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:+/=-]{1,128}$")
# Secrets shorter than this are not replaced as plain text (a one-letter key would blank the logs);
# the patterns below still catch them after "Bearer", "api_key=" and the like.
_MIN_LITERAL_SECRET = 4

# (words, one of which a line must hold for the pattern to be tried; the pattern; its replacement).
# The words spare most lines the regular expressions: an access line is redacted in microseconds.
_PATTERNS: tuple[tuple[tuple[str, ...], re.Pattern[str], str], ...] = (
    # Header or parameter names followed by a value: "Authorization: Bearer x", "'api_key': 'x'",
    # "?api_key=x", "password=x", and header tuples as httpcore logs them: (b'authorization', b'x').
    (
        ("auth", "key", "token", "pass", "secret", "cookie"),
        re.compile(
            r"(?i)\b(authorization|proxy-authorization|x-api-key|api[-_]?key|admin[-_]?key|access[-_]?token"
            r"|password|passwd|secret|cookie|set-cookie)(['\"]?\s*[:=]\s*(?:(?-i:b)?['\"])?|['\"]\s*,\s*(?-i:b)?['\"])"
            r"(?:(?:bearer|basic|token)\s+)?(?!\[redacted\])[^\s'\",;&})\]]+"
        ),
        rf"\1\2{REDACTED}",
    ),
    (("bearer",), re.compile(r"(?i)\bbearer\s+(?!\[redacted\])[^\s'\",;)\]]+"), f"Bearer {REDACTED}"),
    # OpenAI-style keys anywhere: sk-..., sk-proj-...
    (("sk-",), re.compile(r"(?<![A-Za-z0-9])sk-[A-Za-z0-9_\-]{3,}"), REDACTED),
    # Passwords in URLs: redis://:pass@host, https://user:pass@host
    (("@",), re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://[^\s:/@]*:)[^\s@/]+@"), rf"\1{REDACTED}@"),
)
# The redacted forms of up to this many texts of at most this many characters are remembered.
_REMEMBERED_TEXTS = 1024
_REMEMBERED_CHARS = 80
_ANY_TRIGGER = re.compile("|".join(re.escape(word) for words, _, _ in _PATTERNS for word in words))  # on lower case

# Attributes every LogRecord has; anything else on a record came from ``extra=``.
_RECORD_FIELDS = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {
    "message",
    "asctime",
    "request_id",
    "taskName",
    "color_message",  # uvicorn's copy of the message with terminal colours
}


def current_request_id() -> str | None:
    """The id of the request being served in this context, if any."""
    return _request_id.get()


def bind_request_id(request_id: str) -> Token[str | None]:
    return _request_id.set(request_id)


def unbind_request_id(token: Token[str | None]) -> None:
    _request_id.reset(token)


def accept_request_id(client_value: str | None) -> str:
    """The client's ``X-Request-Id`` when it is sane (1-128 plain characters), else a fresh one."""
    if client_value is not None and _SANE_REQUEST_ID.fullmatch(client_value):
        return client_value
    return secrets.token_hex(16)  # 32 hex digits, as a uuid4 hex (which cost 4x as much)


class Redactor:
    """Replaces known secrets and anything that looks like a credential with ``[redacted]``."""

    def __init__(self, secrets: Iterable[str | None] = ()) -> None:
        literals = sorted({s for s in secrets if s and len(s) >= _MIN_LITERAL_SECRET}, key=len, reverse=True)
        self._literals = re.compile("|".join(map(re.escape, literals))) if literals else None
        self._literal_bytes = [secret.encode() for secret in literals]
        # Short texts come back again and again (a method, a path, a tier, an access line's message).
        self._short: dict[str, str] = {}

    def __call__(self, text: str) -> str:
        if len(text) > _REMEMBERED_CHARS:
            return self._redact(text)
        redacted = self._short.get(text)
        if redacted is None:
            if len(self._short) >= _REMEMBERED_TEXTS:
                self._short.clear()
            redacted = self._short[text] = self._redact(text)
        return redacted

    def _redact(self, text: str) -> str:
        if self._literals is not None:
            text = self._literals.sub(REDACTED, text)
        lowered = text.lower()
        if not _ANY_TRIGGER.search(lowered):
            return text
        for words, pattern, replacement in _PATTERNS:
            if any(word in lowered for word in words):
                text = pattern.sub(replacement, text)
        return text

    def may_hold_secret(self, data: bytes) -> bool:
        """Whether raw JSON might hold a known secret: as it is, or behind ``\\u`` escapes. Cheap,
        so that every stream event can be checked, and only the few that may are scrubbed."""
        return b"\\u" in data or any(secret in data for secret in self._literal_bytes)

    def scrub(self, value: Any) -> Any:
        """``value`` with every string in it redacted; what JSON cannot hold becomes a string."""
        if isinstance(value, str):
            return self(value)
        if value is None or isinstance(value, bool | int | float):
            return value
        if isinstance(value, dict):
            return {self(str(k)): self.scrub(v) for k, v in value.items()}
        if isinstance(value, list | tuple | set | frozenset):
            return [self.scrub(v) for v in value]
        return self(str(value))


class RequestContextFilter(logging.Filter):
    """Stamps the request id on every record and redacts its message, traceback and extra fields.

    It rewrites the record in place (the message is formatted here, once), so every formatter
    after it sees only the redacted text.
    """

    def __init__(self, redactor: Redactor) -> None:
        super().__init__()
        self._redact = redactor

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "request_id", None) is None:
            record.request_id = current_request_id()
        try:
            message = record.getMessage()
        except Exception:  # a bad format string must not turn logging into a crash
            message = f"{record.msg!s} (arguments could not be formatted)"
        record.msg, record.args = self._redact(message), None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self._redact(record.exc_text)
        if record.stack_info:
            record.stack_info = self._redact(record.stack_info)
        names = extra_fields(record)
        for name in names:
            setattr(record, name, self._redact.scrub(getattr(record, name)))
        record._extra_fields = names  # for the formatter: the scan of the record is done once
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, request_id, then extra fields."""

    def __init__(self) -> None:
        super().__init__()
        self._second: tuple[int, str] = (-1, "")  # the last whole second formatted, and its text

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": self._iso_time(record.created),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "request_id": getattr(record, "request_id", None),
        }
        for name in extra_fields(record):
            line.setdefault(name, getattr(record, name))
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            line["exception"] = record.exc_text
        if record.stack_info:
            line["stack"] = record.stack_info
        return json.dumps(line, ensure_ascii=False, default=str)

    def _iso_time(self, created: float) -> str:
        second = int(created)
        if second != self._second[0]:
            self._second = (second, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second)))
        return f"{self._second[1]}.{int(created % 1 * 1000):03d}Z"


class TextFormatter(logging.Formatter):
    """``time LEVEL logger [request id] message key=value ...``, for people reading a terminal."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        if getattr(record, "request_id", None) is None:
            record.request_id = "-"
        text = super().format(record)
        extras = " ".join(f"{name}={_text_value(getattr(record, name))}" for name in extra_fields(record))
        if not extras:
            return text
        first, newline, rest = text.partition("\n")  # keep a traceback below the fields
        return f"{first} {extras}{newline}{rest}"


def _text_value(value: Any) -> str:
    """A field's value for ``key=value``: a plain word as it is, anything else as JSON (true, 0.5,
    "two words", {"a": 1}), so that the line reads, and parses, the same way whatever the type."""
    if isinstance(value, str) and value and not any(c.isspace() or c in '"=' for c in value):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)


def configure_logging(
    level: str = "info",
    log_format: LogFormat = "json",
    secrets: Iterable[str | None] = (),
    stream: TextIO | None = None,
) -> logging.Handler:
    """Send every log line, uvicorn's included, through one redacting handler on stderr.

    Call once, before the server starts (``semcache serve`` does); returns the handler.
    """
    # No formatter here prints the caller's file and line, nor thread and process names: skipping
    # them takes a fifth off every line (the logging HOWTO's "Optimization").
    logging._srcfile = None
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.addFilter(RequestContextFilter(Redactor(secrets)))
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    root = logging.getLogger()
    for old in root.handlers[:]:
        root.removeHandler(old)
    root.addHandler(handler)
    numeric = logging.getLevelName(level.upper())
    root.setLevel(numeric)
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access", "uvicorn.asgi"):
        logger = logging.getLogger(name)
        logger.handlers.clear()
        logger.propagate = True
        logger.setLevel(logging.NOTSET)  # follow the root until uvicorn sets its own level
    # Above debug, a line per upstream call from httpx would only repeat the request line.
    quiet = logging.WARNING if numeric > logging.DEBUG else logging.NOTSET
    for name in ("httpx", "httpcore"):
        logging.getLogger(name).setLevel(quiet)
    logging.captureWarnings(True)
    # Progress bars would put non-JSON lines on stderr (transformers draws one per model load).
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    return handler


def extra_fields(record: logging.LogRecord) -> list[str]:
    """The names a log call added with ``extra=`` (as ``RequestContextFilter`` found them, if it ran)."""
    found: list[str] | None = record.__dict__.get("_extra_fields")
    if found is not None:
        return found
    return [name for name in record.__dict__ if name not in _RECORD_FIELDS and not name.startswith("_")]
