"""Limits toward clients: a token-bucket rate limit, and the context-length guard."""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable

from .errors import InvalidRequest, RateLimited
from .tokens import TokenCounter
from .wire import ChatCompletionRequest


class RateLimiter:
    """One token bucket per client (API key, else namespace): ``rate_per_s`` refill, ``burst`` size."""

    def __init__(self, rate_per_s: float, burst: int, *, max_clients: int = 100_000,
                 clock: Callable[[], float] = time.monotonic) -> None:  # fmt: skip
        self.rate_per_s = rate_per_s
        self.burst = burst
        self._clock = clock
        self._max_clients = max_clients
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # client: (tokens, updated)
        self._lock = threading.Lock()

    def admit(self, client: str) -> None:
        """Take one token for ``client``, or raise a 429 that says when one will be there."""
        now = self._clock()
        with self._lock:
            tokens, updated = self._buckets.pop(client, (float(self.burst), now))
            tokens = min(float(self.burst), tokens + (now - updated) * self.rate_per_s)
            if tokens >= 1.0:
                self._buckets[client] = (tokens - 1.0, now)
                self._forget_oldest()
                return
            self._buckets[client] = (tokens, now)
        wait = math.ceil((1.0 - tokens) / self.rate_per_s)
        raise RateLimited(
            f"rate limit of {self.rate_per_s:g} requests/s (burst {self.burst}) exceeded",
            headers={"Retry-After": str(max(wait, 1))},
        )

    def _forget_oldest(self) -> None:
        while len(self._buckets) > self._max_clients:
            self._buckets.popitem(last=False)


def fit_context(
    request: ChatCompletionRequest, tokens: TokenCounter, limit: int | None, trim_oldest_turns: bool
) -> ChatCompletionRequest:
    """The request, or a copy without its oldest turns, whose prompt fits in ``limit`` tokens.

    Raises a 400 (``context_length_exceeded``) when it does not fit and trimming is off or cannot help.
    """
    if limit is None:
        return request
    messages = list(request.messages)
    count = tokens.count_messages([m.model_dump(exclude_none=True) for m in messages], request.model)
    while count > limit and trim_oldest_turns:
        oldest = next((i for i, m in enumerate(messages[:-1]) if m.role not in ("system", "developer")), None)
        if oldest is None:
            break
        del messages[oldest]
        while oldest < len(messages) - 1 and messages[oldest].role == "tool":
            del messages[oldest]  # tool results go with the assistant turn that called the tools
        count = tokens.count_messages([m.model_dump(exclude_none=True) for m in messages], request.model)
    if count > limit:
        raise InvalidRequest(
            f"the messages take {count} tokens, more than the {limit} allowed for model {request.model!r}",
            code="context_length_exceeded",
        )
    return request if len(messages) == len(request.messages) else request.model_copy(update={"messages": messages})
