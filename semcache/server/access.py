"""Which namespace a request belongs to, whether its API key may use it, and whom its rate limit
counts against; and the one reader of Bearer tokens."""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from pathlib import Path

import yaml

from ..errors import Forbidden, InvalidRequest, Unauthorized

DEFAULT_NAMESPACE = "default"
_NAMESPACE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$")
# Long enough for the log redactor to recognise, and sendable as a Bearer token.
_KEY = re.compile(r"^[\x21-\x7e]{4,}$")


class AccessPolicy:
    """Maps client API keys to their namespaces; the first namespace listed is the key's default.

    Without a key map, any client may use any namespace, chosen with ``X-Semcache-Namespace``.
    """

    def __init__(self, namespaces_by_key: dict[str, list[str]] | None = None) -> None:
        self._namespaces_by_key = namespaces_by_key

    @property
    def configured(self) -> bool:
        """Whether client API keys are configured (and so required)."""
        return self._namespaces_by_key is not None

    @property
    def keys(self) -> list[str]:
        """The client API keys, for the log redactor: they must never reach a log line."""
        return list(self._namespaces_by_key or ())

    @classmethod
    def from_file(cls, path: Path | None) -> AccessPolicy:
        if path is None:
            return cls()
        text = path.read_text(encoding="utf-8")
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
        if not isinstance(data, dict) or not data:
            raise ValueError(f"{path}: expected a mapping of API key to a list of namespaces")
        mapping: dict[str, list[str]] = {}
        for number, (key, namespaces) in enumerate(data.items(), start=1):
            # Errors name the key's position, never the key: they are printed and logged.
            if not _KEY.fullmatch(str(key)):
                raise ValueError(f"{path}: key {number} must be at least 4 characters, with no spaces")
            names = [namespaces] if isinstance(namespaces, str) else namespaces
            if not isinstance(names, list) or not names or not all(_valid(n) for n in names):
                raise ValueError(f"{path}: key {number} needs a non-empty list of valid namespace names")
            mapping[str(key)] = [str(n) for n in names]
        return cls(mapping)

    def namespace_for(self, authorization: str | None, requested: str | None) -> str:
        """The namespace a request may use: 401 for an unknown key, before anything else is looked
        at; 403 for a namespace outside the key's list."""
        if self._namespaces_by_key is None:
            return validate_namespace(requested) if requested is not None else DEFAULT_NAMESPACE
        allowed = self._namespaces_by_key.get(bearer_token(authorization) or "")
        if allowed is None:
            raise Unauthorized("missing or unknown API key")
        if requested is None:
            return allowed[0]
        validate_namespace(requested)
        if requested not in allowed:
            raise Forbidden("this API key may not use that namespace", code="namespace_not_allowed")
        return requested

    def rate_limit_key(self, authorization: str | None, namespace: str) -> str:
        """Whom a request's rate limit counts against. With API keys: the key the request was let in
        with, as ``bearer_token`` reads it, so that every spelling of one key is one client; hashed,
        never kept in clear. Without: its namespace, since semcache accepts no credential then (the
        Authorization header is the upstream's) and a client could send a new one each time."""
        token = bearer_token(authorization) if self.configured else None
        if token is None:
            return "namespace:" + namespace
        return "key:" + hashlib.sha256(token.encode()).hexdigest()[:32]


def validate_namespace(namespace: str) -> str:
    if not _valid(namespace):
        raise InvalidRequest(
            "a namespace must be 1-64 characters of letters, digits, '_', '.', ':' or '-' (X-Semcache-Namespace)",
            code="invalid_namespace",
        )
    return namespace


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, the scheme in any case and spaces
    around the token ignored; None for anything else. Client keys, the admin and metrics keys and
    the rate limit all read credentials through this one function."""
    if not authorization:
        return None
    scheme, _, token = authorization.partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


def same_secret(token: str, secret: str) -> bool:
    """``token == secret``, in a time that does not tell how much of it matched."""
    return hmac.compare_digest(token.encode(), secret.encode())


def _valid(namespace: object) -> bool:
    return isinstance(namespace, str) and bool(_NAMESPACE.fullmatch(namespace))
