"""Which namespace a request belongs to, and whether its API key may use it."""

from __future__ import annotations

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
        allowed = self._namespaces_by_key.get(_bearer_token(authorization) or "")
        if allowed is None:
            raise Unauthorized("missing or unknown API key")
        if requested is None:
            return allowed[0]
        validate_namespace(requested)
        if requested not in allowed:
            raise Forbidden("this API key may not use that namespace", code="namespace_not_allowed")
        return requested


def validate_namespace(namespace: str) -> str:
    if not _valid(namespace):
        raise InvalidRequest(
            "a namespace must be 1-64 characters of letters, digits, '_', '.', ':' or '-' (X-Semcache-Namespace)",
            code="invalid_namespace",
        )
    return namespace


def _bearer_token(authorization: str | None) -> str | None:
    if not authorization:
        return None
    scheme, _, token = authorization.partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


def _valid(namespace: object) -> bool:
    return isinstance(namespace, str) and bool(_NAMESPACE.fullmatch(namespace))
