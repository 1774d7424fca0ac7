"""The most recent things served, by response id, for what a client may later say or ask of them."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

from .fairness import FairRecency


class _InNamespace(Protocol):
    @property
    def namespace(self) -> str: ...


T = TypeVar("T", bound=_InNamespace)


class RecentById(Generic[T]):
    """The latest values by id, at most ``capacity`` of them weighing (``weigh``) at most
    ``max_weight`` together; past either bound, the namespace holding the most of it forgets its
    oldest, so that one client's traffic never pushes out another namespace's fair share. Each
    value is readable only from the namespace it was served in. Kept in this process only."""

    def __init__(self, capacity: int, weigh: Callable[[T], int] = lambda _: 0, max_weight: int = 0) -> None:
        self._values: FairRecency[T] = FairRecency(capacity, max_weight, weigh)
        self._lock = threading.Lock()

    def remember(self, value_id: str, value: T) -> None:
        with self._lock:
            self._values.put(value_id, value.namespace, value)

    def get(self, value_id: str, namespace: str) -> T | None:
        with self._lock:
            value = self._values.get(value_id)
        return value if value is not None and value.namespace == namespace else None

    def take(self, value_id: str, namespace: str) -> T | None:
        """``get``, and forget it: for what may be done once."""
        with self._lock:
            value = self._values.get(value_id)
            if value is None or value.namespace != namespace:
                return None
            self._values.pop(value_id)
            return value

    def held(self) -> tuple[int, int, int]:
        """How many values, how much weight, and how many namespaces are held now."""
        with self._lock:
            return len(self._values), self._values.weight, self._values.namespaces()
