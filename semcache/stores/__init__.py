"""Store backends behind the ``Store`` protocol."""

from .sqlite import SQLiteStore

__all__ = ["SQLiteStore"]
