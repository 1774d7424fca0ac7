"""Sharing one size bound between namespaces, and keeping per-namespace state bounded.

Clients choose namespaces, and a client may fill the cache on purpose (the cache API stores at no
upstream cost). So when a bound is reached, the namespace holding the most loses its least recently
used: a namespace within its fair share (the bound divided by the namespaces holding anything)
loses nothing to another's load.
"""

from __future__ import annotations

import heapq
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")

# The label every namespace past a bound shares ("(" is not allowed in a namespace: no clash).
OTHER_NAMESPACES = "(other)"


def fair_cuts(sizes: Mapping[str, int], keep: int) -> dict[str, int]:
    """How many each namespace loses so that ``keep`` remain in all: the result of taking one at a
    time from the namespace holding the most. Of namespaces left equal, those that held more lose
    first, then by name (any order would do)."""
    total = sum(sizes.values())
    if total <= keep:
        return {}
    # The highest level where every namespace keeps min(size, level) and all fit within keep.
    low, high = 0, max(sizes.values())
    while low < high:
        middle = (low + high + 1) // 2
        if sum(min(size, middle) for size in sizes.values()) <= keep:
            low = middle
        else:
            high = middle - 1
    level = low
    above = sorted((name for name, size in sizes.items() if size > level), key=lambda n: (sizes[n], n))
    # Some of those above the level may keep one more; the least loaded ones do.
    spare = keep - sum(min(size, level) for size in sizes.values())
    keeps_one_more = set(above[:spare])
    cuts = {}
    for name in above:
        cut = sizes[name] - level - (1 if name in keeps_one_more else 0)
        if cut > 0:
            cuts[name] = cut
    return cuts


class FairRecency(Generic[V]):
    """Values by id, each in a namespace, within ``capacity`` values and ``max_weight`` together:
    past either bound, the namespace holding the most of it (values, or weight) loses its least
    recently remembered. Not thread-safe: the caller holds a lock."""

    def __init__(self, capacity: int, max_weight: int, weigh: Callable[[V], int]) -> None:
        self.capacity = capacity
        self.max_weight = max_weight
        self._weigh = weigh
        self._by_namespace: dict[str, OrderedDict[str, V]] = {}
        self._namespace_of: dict[str, str] = {}
        self._weight_of: dict[str, int] = {}  # per namespace
        self._weight = 0
        # Lazy max-heaps of (-amount, namespace): an item whose amount is stale is fixed when it surfaces.
        self._by_count: list[tuple[int, str]] = []
        self._by_weight: list[tuple[int, str]] = []

    def __len__(self) -> int:
        return len(self._namespace_of)

    @property
    def weight(self) -> int:
        return self._weight

    def namespaces(self) -> int:
        return len(self._by_namespace)

    def count_in(self, namespace: str) -> int:
        return len(self._by_namespace.get(namespace, ()))

    def get(self, value_id: str) -> V | None:
        namespace = self._namespace_of.get(value_id)
        return None if namespace is None else self._by_namespace[namespace][value_id]

    def put(self, value_id: str, namespace: str, value: V) -> None:
        weight = self._weigh(value)
        if weight > self.max_weight:
            return  # heavier than all may be together: not kept at all
        self.pop(value_id)
        values = self._by_namespace.setdefault(namespace, OrderedDict())
        values[value_id] = value
        self._namespace_of[value_id] = namespace
        self._weight_of[namespace] = self._weight_of.get(namespace, 0) + weight
        self._weight += weight
        heapq.heappush(self._by_count, (-len(values), namespace))
        heapq.heappush(self._by_weight, (-self._weight_of[namespace], namespace))
        while len(self._namespace_of) > self.capacity:
            self._forget_oldest_of(self._largest(self._by_count, lambda n: len(self._by_namespace[n])))
        while self._weight > self.max_weight:
            self._forget_oldest_of(self._largest(self._by_weight, self._weight_of.__getitem__))
        if len(self._by_count) + len(self._by_weight) > 4 * len(self._by_namespace) + 64:
            self._compact()

    def pop(self, value_id: str) -> V | None:
        namespace = self._namespace_of.pop(value_id, None)
        if namespace is None:
            return None
        values = self._by_namespace[namespace]
        value = values.pop(value_id)
        weight = self._weigh(value)
        self._weight -= weight
        self._weight_of[namespace] -= weight
        if not values:
            del self._by_namespace[namespace]
            del self._weight_of[namespace]
        return value

    def _forget_oldest_of(self, namespace: str) -> None:
        self.pop(next(iter(self._by_namespace[namespace])))

    def _largest(self, heap: list[tuple[int, str]], amount: Callable[[str], int]) -> str:
        while True:
            negative, namespace = heap[0]
            if namespace in self._by_namespace and -negative == amount(namespace):
                return namespace
            heapq.heappop(heap)
            if namespace in self._by_namespace:  # stale: its amount went down since
                heapq.heappush(heap, (-amount(namespace), namespace))

    def _compact(self) -> None:
        self._by_count = [(-len(values), ns) for ns, values in self._by_namespace.items()]
        self._by_weight = [(-self._weight_of[ns], ns) for ns in self._by_namespace]
        heapq.heapify(self._by_count)
        heapq.heapify(self._by_weight)


class NamespaceLabels:
    """The first ``limit`` namespaces seen keep their own name in counters and series; the rest
    share ``OTHER_NAMESPACES``, so that clients naming namespaces at will cannot grow them."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._names: set[str] = set()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._names)

    def __call__(self, namespace: str) -> str:
        if namespace in self._names:
            return namespace
        with self._lock:
            if len(self._names) < self.limit:
                self._names.add(namespace)
                return namespace
        return OTHER_NAMESPACES
