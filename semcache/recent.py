"""The most recent things served, by response id, for what a client may later say or ask of them."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar


class _InNamespace(Protocol):
    @property
    def namespace(self) -> str: ...


T = TypeVar("T", bound=_InNamespace)


class RecentById(Generic[T]):
    """The latest ``capacity`` values by id, older ones forgotten, weighing (``weigh``) no more than
    ``max_weight`` together; each readable only from the namespace it was served in. Kept in
    this process only."""

    def __init__(self, capacity: int, weigh: Callable[[T], int] = lambda _: 0, max_weight: int = 0) -> None:
        self._capacity = capacity
        self._weigh = weigh
        self._max_weight = max_weight
        self._weight = 0
        self._values: OrderedDict[str, T] = OrderedDict()
        self._lock = threading.Lock()

    def remember(self, value_id: str, value: T) -> None:
        weight = self._weigh(value)
        if weight > self._max_weight:
            return  # heavier than all may be together: not kept at all
        with self._lock:
            self._forget(value_id)
            self._values[value_id] = value
            self._weight += weight
            while len(self._values) > self._capacity or self._weight > self._max_weight:
                self._forget(next(iter(self._values)))

    def _forget(self, value_id: str) -> None:
        value = self._values.pop(value_id, None)
        if value is not None:
            self._weight -= self._weigh(value)

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
            self._forget(value_id)
            return value
