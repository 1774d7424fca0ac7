"""The most recent things served, by response id, for what a client may later say or ask of them."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Generic, Protocol, TypeVar


class _InNamespace(Protocol):
    @property
    def namespace(self) -> str: ...


T = TypeVar("T", bound=_InNamespace)


class RecentById(Generic[T]):
    """The latest ``capacity`` values by id, older ones forgotten; each readable only from the
    namespace it was served in. Kept in this process only."""

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._values: OrderedDict[str, T] = OrderedDict()
        self._lock = threading.Lock()

    def remember(self, value_id: str, value: T) -> None:
        with self._lock:
            self._values[value_id] = value
            while len(self._values) > self._capacity:
                self._values.popitem(last=False)

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
            return self._values.pop(value_id)
