"""The HTTP layer: app factory, routes, error handling, access control."""

from .app import create_app

__all__ = ["create_app"]
