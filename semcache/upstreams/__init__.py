"""Upstream backends behind the ``Upstream`` protocol."""

from .remote import RemoteUpstream

__all__ = ["RemoteUpstream"]
