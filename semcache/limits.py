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
    messages = request.messages
    # Each message is counted once; a dropped one's count is taken off the total.
    counts = [tokens.count_message(m.model_dump(exclude_none=True), request.model) for m in messages]
    count = tokens.count_messages([], request.model) + sum(counts)
    kept = [True] * len(messages)
    oldest, last = 0, len(messages) - 1
    while count > limit and trim_oldest_turns:
        while oldest < last and messages[oldest].role in ("system", "developer"):
            oldest += 1  # the system prompt stays
        if oldest >= last:
            break
        kept[oldest], count, oldest = False, count - counts[oldest], oldest + 1
        while oldest < last and messages[oldest].role == "tool":
            # tool results go with the assistant turn that called the tools
            kept[oldest], count, oldest = False, count - counts[oldest], oldest + 1
    if count > limit:
        raise InvalidRequest(
            f"the messages take {count} tokens, more than the {limit} allowed for model {request.model!r}",
            code="context_length_exceeded",
        )
    if all(kept):
        return request
    return request.model_copy(update={"messages": [m for m, keep in zip(messages, kept, strict=True) if keep]})
