"""The shared store: entries, the exact tier, templates, counters and a change feed in Redis.

Several replicas share one cache through it. Each keeps its own FAISS index and follows the change
feed (a Redis Stream) to stay in step: see ``semcache/replication.py``.

Key layout, for prefix ``P`` (``--redis-prefix``, default ``semcache``). Every key carries the hash
tag ``{P}``, so one cache lives in one Redis Cluster slot and the Lua scripts may touch any of them.

    {P}:meta              hash    cache_id, embedding_model, dimension
    {P}:next_id           string  the last entry id handed out (INCR); ids are never reused
    {P}:entry:<id>        hash    one entry; expires natively at its TTL
    {P}:exact:<key>       string  exact key -> entry id; expires with its entry
    {P}:lru               zset    entry id by last access, for the size bound
    {P}:lru_ns:<ns>       zset    a namespace's entry ids by last access: the size bound takes from the
                                  namespace holding the most (semcache.fairness)
    {P}:ns_sizes          zset    namespace -> how many entries it holds
    {P}:entry_ns          hash    entry id -> its namespace, also once its hash expired natively
    {P}:expiry            zset    entry id by expiry time, so expiries reach the feed
    {P}:neg:<id>          list    negative feedback on an entry (JSON)
    {P}:neg_ids           set     entries that have negative feedback
    {P}:ns_config         hash    namespace -> its policy overrides (JSON)
    {P}:evidence:<l>:<ns> hash    the error budget's counters of a namespace and script (HINCRBY)
    {P}:evidence_keys     set     "<l>:<ns>" of every evidence hash
    {P}:evidence_batch:<id> string  a batch of evidence already added (7 days): resent, it counts once
    {P}:emb:<key>         string  one embeddings input's vector (float32 bytes); expires natively
    {P}:emb_lru           zset    embedding key by last use, for the size bound
    {P}:emb_lru_ns:<ns>   zset    a namespace's embedding keys by last use: the size bound takes from the
                                  namespace holding the most (semcache.fairness)
    {P}:emb_ns_sizes      zset    namespace -> how many embeddings it holds
    {P}:emb_ns            hash    embedding key -> its namespace, also once its vector expired natively
    {P}:emb_lru_old       zset    embedding keys stored before namespaces were kept, by last use: the
                                  size bound takes them first
    {P}:emb_expiry        zset    embedding key by expiry time, so the sweeper can drop its lru member
    {P}:templates         string  the curated templates (JSON)
    {P}:stats             hash    request counters of every replica together
    {P}:feed              stream  put / del / neg / cfg / templates events, trimmed to about
                                  ``feed_max_len`` events

Writes that belong together (an entry, its exact key, its place in both sorted sets and its feed
event) run as one Lua script, so a replica killed mid-write leaves all of it or none.
"""

from __future__ import annotations

import base64
import json
import logging
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import redis.asyncio as aioredis
from redis import exceptions as redis_errors
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from ..entries import CacheEntry, EntryQuery, NegativeFeedback, RemovedEntry
from ..errors import StoreUnavailable

log = logging.getLogger("semcache.stores.redis")
T = TypeVar("T")

# While Redis is known to be down, calls fail at once for this long instead of each waiting for
# a connection timeout; the replica's feed follower probes it meanwhile and clears the mark.
_DOWN_FOR_S = 1.0
_SCRIPT_BATCH = 500
_REDIS_DOWN = (redis_errors.ConnectionError, redis_errors.TimeoutError, OSError)

# Removes one entry and everything that points to it; returns its scope ('' if already expired).
_LUA_DROP = """
local P = ARGV[1]
local function drop(id)
  local ekey = P .. ':entry:' .. id
  local fields = redis.call('HMGET', ekey, 'exact_key', 'scope')
  if fields[1] then
    local exkey = P .. ':exact:' .. fields[1]
    if redis.call('GET', exkey) == tostring(id) then redis.call('DEL', exkey) end
  end
  redis.call('DEL', ekey, P .. ':neg:' .. id)
  redis.call('SREM', P .. ':neg_ids', id)
  redis.call('ZREM', P .. ':lru', id)
  redis.call('ZREM', P .. ':expiry', id)
  local ns = redis.call('HGET', P .. ':entry_ns', id)
  if ns then
    redis.call('HDEL', P .. ':entry_ns', id)
    redis.call('ZREM', P .. ':lru_ns:' .. ns, id)
    local left = redis.call('ZCARD', P .. ':lru_ns:' .. ns)
    if left > 0 then redis.call('ZADD', P .. ':ns_sizes', left, ns) else redis.call('ZREM', P .. ':ns_sizes', ns) end
  end
  return fields[2] or ''
end
local function publish(...)
  return redis.call('XADD', P .. ':feed', 'MAXLEN', '~', ARGV[2], '*', ...)
end
local function drop_all(ids, origin)
  local out = {}
  for _, id in ipairs(ids) do
    local scope = drop(id)
    table.insert(out, id)
    table.insert(out, scope)
  end
  if #ids > 0 then publish('op', 'del', 'ids', table.concat(ids, ','), 'origin', origin) end
  return out
end
"""

# ARGV: P, maxlen, origin, exact_key, expires_at_ms or '', last_access, namespace, field, value, ...
_LUA_PUT = (
    _LUA_DROP
    + """
local id = tostring(redis.call('INCR', P .. ':next_id'))
local exkey = P .. ':exact:' .. ARGV[4]
local old = redis.call('GET', exkey)
local replaced = {}
if old then replaced = {old, drop(old)} end
local ekey = P .. ':entry:' .. id
redis.call('HSET', ekey, unpack(ARGV, 8))
redis.call('SET', exkey, id)
if ARGV[5] ~= '' then
  redis.call('PEXPIREAT', ekey, ARGV[5])
  redis.call('PEXPIREAT', exkey, ARGV[5])
  redis.call('ZADD', P .. ':expiry', tonumber(ARGV[5]) / 1000, id)
end
redis.call('ZADD', P .. ':lru', ARGV[6], id)
local ns = ARGV[7]
redis.call('HSET', P .. ':entry_ns', id, ns)
redis.call('ZADD', P .. ':lru_ns:' .. ns, ARGV[6], id)
redis.call('ZADD', P .. ':ns_sizes', redis.call('ZCARD', P .. ':lru_ns:' .. ns), ns)
if old then
  publish('op', 'put', 'id', id, 'replaced', old, 'origin', ARGV[3])
else
  publish('op', 'put', 'id', id, 'origin', ARGV[3])
end
return {id, replaced}
"""
)

# ARGV: P, maxlen, origin, id, ...
_LUA_DELETE = (
    _LUA_DROP
    + """
local ids = {}
for i = 4, #ARGV do
  if redis.call('ZSCORE', P .. ':lru', ARGV[i]) or redis.call('EXISTS', P .. ':entry:' .. ARGV[i]) == 1 then
    table.insert(ids, ARGV[i])
  end
end
return drop_all(ids, ARGV[3])
"""
)

# ARGV: P, maxlen, origin, now, limit
_LUA_EXPIRE = (
    _LUA_DROP
    + """
return drop_all(redis.call('ZRANGEBYSCORE', P .. ':expiry', '-inf', ARGV[4], 'LIMIT', 0, ARGV[5]), ARGV[3])
"""
)

# ARGV: P, maxlen, origin, keep, limit. One at a time, the least recently used entry of the
# namespace holding the most; entries stored before namespaces were counted go first, oldest first.
_LUA_EVICT = (
    _LUA_DROP
    + """
local surplus = math.min(redis.call('ZCARD', P .. ':lru') - tonumber(ARGV[4]), tonumber(ARGV[5]))
local out, ids = {}, {}
while #ids < surplus do
  local id = nil
  if redis.call('ZCARD', P .. ':lru') > redis.call('HLEN', P .. ':entry_ns') then
    id = redis.call('ZRANGE', P .. ':lru', 0, 0)[1]
  else
    local top = redis.call('ZREVRANGE', P .. ':ns_sizes', 0, 0)[1]
    if not top then break end
    id = redis.call('ZRANGE', P .. ':lru_ns:' .. top, 0, 0)[1]
    if not id then redis.call('ZREM', P .. ':ns_sizes', top) end
  end
  if id then
    table.insert(ids, id)
    table.insert(out, id)
    table.insert(out, drop(id))
  end
end
if #ids > 0 then publish('op', 'del', 'ids', table.concat(ids, ','), 'origin', ARGV[3]) end
return out
"""
)

# Counts entries stored before namespaces were counted. ARGV: P, then id and namespace, two by two.
_LUA_COUNT_NAMESPACES = """
local P = ARGV[1]
local counted = {}
for i = 2, #ARGV, 2 do
  local score = redis.call('ZSCORE', P .. ':lru', ARGV[i])
  if score and redis.call('HSETNX', P .. ':entry_ns', ARGV[i], ARGV[i + 1]) == 1 then
    redis.call('ZADD', P .. ':lru_ns:' .. ARGV[i + 1], score, ARGV[i])
    counted[ARGV[i + 1]] = true
  end
end
for ns in pairs(counted) do
  redis.call('ZADD', P .. ':ns_sizes', redis.call('ZCARD', P .. ':lru_ns:' .. ns), ns)
end
return 0
"""

# ARGV: P, id, at, id, at, ...  Only live entries are touched: a hit racing a delete must not
# bring a half-entry back.
_LUA_TOUCH = """
local P = ARGV[1]
for i = 2, #ARGV, 2 do
  local ekey = P .. ':entry:' .. ARGV[i]
  if redis.call('EXISTS', ekey) == 1 then
    redis.call('HINCRBY', ekey, 'hits', 1)
    redis.call('ZADD', P .. ':lru', 'XX', 'GT', ARGV[i + 1], ARGV[i])
    local ns = redis.call('HGET', P .. ':entry_ns', ARGV[i])
    if ns then redis.call('ZADD', P .. ':lru_ns:' .. ns, 'XX', 'GT', ARGV[i + 1], ARGV[i]) end
  end
end
return 0
"""

# ARGV: P, exact_key
_LUA_GET_EXACT = """
local id = redis.call('GET', ARGV[1] .. ':exact:' .. ARGV[2])
if not id then return false end
return {id, redis.call('HGETALL', ARGV[1] .. ':entry:' .. id)}
"""

# ARGV: P, with_vectors ('1' or '0'), id, ...  For each live entry: id, its fields but the vector as
# one JSON object, the vector or nil, its recency score. Four replies an entry instead of one per
# field: parsing replies is what a scan spends its time on in redis-py without hiredis.
_LUA_LIST = """
local P = ARGV[1]
local names = {'namespace', 'scope', 'exact_key', 'model', 'prompt', 'answer', 'created_at', 'expires_at',
               'last_access', 'hits', 'min_similarity', 'tool_calls'}
local out = {}
for i = 3, #ARGV do
  local ekey = P .. ':entry:' .. ARGV[i]
  local values = redis.call('HMGET', ekey, unpack(names))
  if values[1] then
    local fields = {}
    for j, name in ipairs(names) do
      if values[j] then fields[name] = values[j] end
    end
    table.insert(out, ARGV[i])
    table.insert(out, cjson.encode(fields))
    table.insert(out, ARGV[2] == '1' and redis.call('HGET', ekey, 'vector') or false)
    table.insert(out, redis.call('ZSCORE', P .. ':lru', ARGV[i]) or false)
  end
end
return out
"""

# ARGV: P, maxlen, origin, entry id, feedback JSON, raise_to or ''
_LUA_NEGATIVE = """
local P = ARGV[1]
local ekey = P .. ':entry:' .. ARGV[4]
if redis.call('EXISTS', ekey) == 0 then return 0 end
redis.call('RPUSH', P .. ':neg:' .. ARGV[4], ARGV[5])
local ttl = redis.call('PTTL', ekey)
if ttl > 0 then redis.call('PEXPIRE', P .. ':neg:' .. ARGV[4], ttl) end
redis.call('SADD', P .. ':neg_ids', ARGV[4])
if ARGV[6] ~= '' then
  local current = tonumber(redis.call('HGET', ekey, 'min_similarity') or '0') or 0
  if tonumber(ARGV[6]) > current then redis.call('HSET', ekey, 'min_similarity', ARGV[6]) end
end
redis.call('XADD', P .. ':feed', 'MAXLEN', '~', ARGV[2], '*', 'op', 'neg', 'feedback', ARGV[5], 'origin', ARGV[3])
return 1
"""

# KEYS: the entry's hash. ARGV: the new threshold. A missing entry is left missing.
_LUA_RAISE_MIN_SIMILARITY = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local current = tonumber(redis.call('HGET', KEYS[1], 'min_similarity') or '0') or 0
if tonumber(ARGV[1]) > current then redis.call('HSET', KEYS[1], 'min_similarity', ARGV[1]) end
return 1
"""


# Adds one batch of the error budgets' evidence, once: a batch resent after a timeout (it may have
# landed) finds its id taken and adds nothing. ARGV: prefix, batch id, then language, namespace,
# counter name and count, four by four.
_LUA_EVIDENCE = """
local P = ARGV[1]
if not redis.call('SET', P .. ':evidence_batch:' .. ARGV[2], '1', 'NX', 'EX', 604800) then return 0 end
for i = 3, #ARGV, 4 do
  redis.call('SADD', P .. ':evidence_keys', ARGV[i] .. ':' .. ARGV[i + 1])
  redis.call('HINCRBY', P .. ':evidence:' .. ARGV[i] .. ':' .. ARGV[i + 1], ARGV[i + 2], ARGV[i + 3])
end
return 1
"""


# Drops embeddings and their places in every sorted set. ARGV: P, then what a script below needs.
_LUA_DROP_EMBEDDINGS = """
local P = ARGV[1]
local function drop_embeddings(keys)
  for _, key in ipairs(keys) do
    redis.call('DEL', P .. ':emb:' .. key)
    redis.call('ZREM', P .. ':emb_lru', key)
    redis.call('ZREM', P .. ':emb_expiry', key)
    redis.call('ZREM', P .. ':emb_lru_old', key)
    local ns = redis.call('HGET', P .. ':emb_ns', key)
    if ns then
      redis.call('HDEL', P .. ':emb_ns', key)
      redis.call('ZREM', P .. ':emb_lru_ns:' .. ns, key)
      local left = redis.call('ZCARD', P .. ':emb_lru_ns:' .. ns)
      if left > 0 then
        redis.call('ZADD', P .. ':emb_ns_sizes', left, ns)
      else
        redis.call('ZREM', P .. ':emb_ns_sizes', ns)
      end
    end
  end
  return #keys
end
"""
# ARGV: P, namespace, now, expires_at or '', expires_at_ms or '', then key and vector, two by two.
_LUA_PUT_EMBEDDINGS = (
    _LUA_DROP_EMBEDDINGS
    + """
local ns, now, expires_at, pxat = ARGV[2], ARGV[3], ARGV[4], ARGV[5]
for i = 6, #ARGV, 2 do
  local key = ARGV[i]
  local old = redis.call('HGET', P .. ':emb_ns', key)
  if old and old ~= ns then drop_embeddings({key}) end
  redis.call('ZREM', P .. ':emb_lru_old', key)
  if pxat == '' then
    redis.call('SET', P .. ':emb:' .. key, ARGV[i + 1])
    redis.call('ZREM', P .. ':emb_expiry', key)  -- a vector stored again without a TTL
  else
    redis.call('SET', P .. ':emb:' .. key, ARGV[i + 1], 'PXAT', pxat)
    redis.call('ZADD', P .. ':emb_expiry', expires_at, key)
  end
  redis.call('ZADD', P .. ':emb_lru', now, key)
  redis.call('HSET', P .. ':emb_ns', key, ns)
  redis.call('ZADD', P .. ':emb_lru_ns:' .. ns, now, key)
end
redis.call('ZADD', P .. ':emb_ns_sizes', redis.call('ZCARD', P .. ':emb_lru_ns:' .. ns), ns)
return 0
"""
)
# ARGV: P, now, key, ...  Recency of the vectors just read, in both sorted sets; a key dropped
# meanwhile is not brought back.
_LUA_TOUCH_EMBEDDINGS = """
local P = ARGV[1]
for i = 3, #ARGV do
  redis.call('ZADD', P .. ':emb_lru', 'XX', 'GT', ARGV[2], ARGV[i])
  redis.call('ZADD', P .. ':emb_lru_old', 'XX', 'GT', ARGV[2], ARGV[i])
  local ns = redis.call('HGET', P .. ':emb_ns', ARGV[i])
  if ns then redis.call('ZADD', P .. ':emb_lru_ns:' .. ns, 'XX', 'GT', ARGV[2], ARGV[i]) end
end
return 0
"""
# Sets apart the vectors stored before namespaces were kept. ARGV: P, key, ...
_LUA_MARK_OLD_EMBEDDINGS = """
local P = ARGV[1]
for i = 2, #ARGV do
  local score = redis.call('ZSCORE', P .. ':emb_lru', ARGV[i])
  if score and redis.call('HEXISTS', P .. ':emb_ns', ARGV[i]) == 0 then
    redis.call('ZADD', P .. ':emb_lru_old', score, ARGV[i])
  end
end
return 0
"""
# ARGV: P, now, limit
_LUA_EXPIRE_EMBEDDINGS = (
    _LUA_DROP_EMBEDDINGS
    + """
return drop_embeddings(redis.call('ZRANGEBYSCORE', P .. ':emb_expiry', '-inf', ARGV[2], 'LIMIT', 0, ARGV[3]))
"""
)
# ARGV: P, keep, limit. One at a time, the least recently used vector of the namespace holding the
# most; vectors stored before namespaces were kept go first, oldest first.
_LUA_EVICT_EMBEDDINGS = (
    _LUA_DROP_EMBEDDINGS
    + """
local surplus = math.min(redis.call('ZCARD', P .. ':emb_lru') - tonumber(ARGV[2]), tonumber(ARGV[3]))
local dropped = 0
while dropped < surplus do
  local key = nil
  if redis.call('ZCARD', P .. ':emb_lru_old') > 0 then
    key = redis.call('ZRANGE', P .. ':emb_lru_old', 0, 0)[1]
  else
    local top = redis.call('ZREVRANGE', P .. ':emb_ns_sizes', 0, 0)[1]
    if not top then break end
    key = redis.call('ZRANGE', P .. ':emb_lru_ns:' .. top, 0, 0)[1]
    if not key then redis.call('ZREM', P .. ':emb_ns_sizes', top) end
  end
  if key then dropped = dropped + drop_embeddings({key}) end
end
return dropped
"""
)


@dataclass(frozen=True)
class FeedEvent:
    """One change to the shared cache, in feed order. ``offset`` is its stream id."""

    offset: str
    op: str  # put, del, neg, cfg, templates
    origin: str  # the replica that made the change
    entry_id: int | None = None  # put
    replaced: int | None = None  # put: the entry with the same exact key that it replaced
    ids: tuple[int, ...] = ()  # del
    feedback: NegativeFeedback | None = None  # neg
    namespace: str | None = None  # cfg


class RedisStore:
    """The ``Store`` protocol on Redis, plus the change feed, templates and shared counters."""

    def __init__(
        self,
        url: str,
        *,
        prefix: str = "semcache",
        timeout_s: float = 1.0,
        max_connections: int = 64,
        feed_max_len: int = 100_000,
    ) -> None:
        self.url = url
        self.prefix = "{" + prefix + "}"
        self.origin = uuid.uuid4().hex[:12]  # this replica, in the feed
        self.feed_max_len = feed_max_len
        common: dict[str, Any] = {
            "socket_connect_timeout": timeout_s,
            "health_check_interval": 15,
            # One immediate retry on a fresh connection: pooled connections go stale when Redis restarts.
            "retry": Retry(NoBackoff(), retries=1),
            "retry_on_error": [redis_errors.ConnectionError],
        }
        # Typed as Any: redis-py types every reply as ``bytes | str``, whatever decode_responses says.
        self._redis: Any = aioredis.Redis.from_url(
            url, socket_timeout=timeout_s, max_connections=max_connections, **common
        )
        # Blocking feed reads get their own connection, with room for the block.
        self._feed_redis: Any = aioredis.Redis.from_url(url, socket_timeout=timeout_s + 5, max_connections=2, **common)
        self._down_until = 0.0
        self._put = self._redis.register_script(_LUA_PUT)
        self._delete = self._redis.register_script(_LUA_DELETE)
        self._expire = self._redis.register_script(_LUA_EXPIRE)
        self._evict = self._redis.register_script(_LUA_EVICT)
        self._count_namespaces = self._redis.register_script(_LUA_COUNT_NAMESPACES)
        self._touch = self._redis.register_script(_LUA_TOUCH)
        self._get_exact = self._redis.register_script(_LUA_GET_EXACT)
        self._negative = self._redis.register_script(_LUA_NEGATIVE)
        self._raise_min_similarity = self._redis.register_script(_LUA_RAISE_MIN_SIMILARITY)
        self._list = self._redis.register_script(_LUA_LIST)
        self._evidence = self._redis.register_script(_LUA_EVIDENCE)
        self._expire_embeddings = self._redis.register_script(_LUA_EXPIRE_EMBEDDINGS)
        self._evict_embeddings = self._redis.register_script(_LUA_EVICT_EMBEDDINGS)
        self._put_embeddings = self._redis.register_script(_LUA_PUT_EMBEDDINGS)
        self._touch_embeddings = self._redis.register_script(_LUA_TOUCH_EMBEDDINGS)
        self._mark_old_embeddings = self._redis.register_script(_LUA_MARK_OLD_EMBEDDINGS)

    def key(self, *parts: object) -> str:
        return ":".join([self.prefix, *map(str, parts)])

    # -- availability --------------------------------------------------------------------------

    @property
    def available(self) -> bool:
        return time.monotonic() >= self._down_until

    async def _call(self, command: Callable[[], Awaitable[T]]) -> T:
        """Run one Redis call; a dead Redis becomes ``StoreUnavailable``, fast while it stays down."""
        if not self.available:
            raise StoreUnavailable("the Redis store is unreachable")
        try:
            return await command()
        except _REDIS_DOWN as exc:
            self._down_until = time.monotonic() + _DOWN_FOR_S
            raise StoreUnavailable(f"the Redis store is unreachable: {exc}") from exc
        except redis_errors.BusyLoadingError as exc:
            self._down_until = time.monotonic() + _DOWN_FOR_S
            raise StoreUnavailable("the Redis store is loading its data") from exc

    async def ping(self) -> bool:
        """Probe Redis even while it is marked down; True (and unmarked) if it answers."""
        try:
            await self._redis.ping()
        except (*_REDIS_DOWN, redis_errors.BusyLoadingError):
            self._down_until = time.monotonic() + _DOWN_FOR_S
            return False
        if self._down_until:  # back after an outage: drop the pooled connections to the old server
            await self._redis.connection_pool.disconnect()
            await self._feed_redis.connection_pool.disconnect()
        self._down_until = 0.0
        return True

    async def open_cache(self, embedding_model: str, dimension: int) -> str:
        """Join the shared cache, creating it if new; returns its id. Every replica must embed with
        the same model, since they share vectors."""

        async def join() -> str:
            meta = self.key("meta")
            await self._redis.hsetnx(meta, "cache_id", uuid.uuid4().hex)
            await self._redis.hsetnx(meta, "embedding_model", embedding_model)
            await self._redis.hsetnx(meta, "dimension", str(dimension))
            cache_id, model, stored_dimension = await self._redis.hmget(
                meta, ["cache_id", "embedding_model", "dimension"]
            )
            if model.decode() != embedding_model or int(stored_dimension) != dimension:
                raise ValueError(
                    f"the Redis cache {self.prefix} holds vectors of the embedding model {model.decode()!r}, "
                    f"not {embedding_model!r}: run every replica with the same model, or use another --redis-prefix"
                )
            return str(cache_id.decode())

        cache_id = await self._call(join)
        if not await self._call(lambda: self._redis.hexists(self.key("meta"), "namespaces_counted")):
            await self._count_stored_namespaces()
        if not await self._call(lambda: self._redis.hexists(self.key("meta"), "embedding_namespaces_kept")):
            await self._mark_old_embeddings_stored()
        return cache_id

    async def _mark_old_embeddings_stored(self) -> None:
        """Set apart the vectors stored by a version that did not keep their namespace (their key
        is a digest: it cannot be recovered), so that the size bound takes them first."""

        async def mark() -> None:
            page: list[bytes] = []
            async for key, _ in self._redis.zscan_iter(self.key("emb_lru"), count=_SCRIPT_BATCH):
                page.append(key)
                if len(page) == _SCRIPT_BATCH:
                    await self._mark_old_embeddings(args=[self.prefix, *page])
                    page = []
            if page:
                await self._mark_old_embeddings(args=[self.prefix, *page])

        await self._call(mark)
        await self._call(lambda: self._redis.hset(self.key("meta"), "embedding_namespaces_kept", "1"))

    async def _count_stored_namespaces(self) -> None:
        """Give the entries stored by a version that did not count namespaces their place in the
        per-namespace recency sets, in pages; an entry already counted stays as it is."""
        ids = sorted(await self.stored_ids())
        for start in range(0, len(ids), _SCRIPT_BATCH):
            chunk = ids[start : start + _SCRIPT_BATCH]

            async def count(c: list[int] = chunk) -> None:
                async with self._redis.pipeline(transaction=False) as pipe:
                    for entry_id in c:
                        pipe.hget(self.key("entry", entry_id), "namespace")
                    namespaces = await pipe.execute()
                args: list[Any] = [self.prefix]
                for entry_id, namespace in zip(c, namespaces, strict=True):
                    if namespace is not None:
                        args += [entry_id, namespace]
                if len(args) > 1:
                    await self._count_namespaces(args=args)

            await self._call(count)
        await self._call(lambda: self._redis.hset(self.key("meta"), "namespaces_counted", "1"))

    async def cache_id(self) -> str | None:
        value = await self._call(lambda: self._redis.hget(self.key("meta"), "cache_id"))
        return None if value is None else value.decode()

    async def close(self) -> None:
        await self._redis.aclose()
        await self._feed_redis.aclose()

    # -- Store protocol ------------------------------------------------------------------------

    async def put(self, entry: CacheEntry) -> tuple[int, list[RemovedEntry]]:
        args = self._put_args(entry)
        return _put_result(await self._call(lambda: self._put(args=args)))

    async def put_many(self, entries: Sequence[CacheEntry]) -> list[tuple[int, list[RemovedEntry]]]:
        """The put script once per entry, pipelined: each entry is still written atomically (with
        its feed event), and the batch costs one round trip."""

        async def write() -> list[Any]:
            async with self._redis.pipeline(transaction=False) as pipe:
                for entry in entries:
                    await self._put(args=self._put_args(entry), client=pipe)
                return list(await pipe.execute())

        return [_put_result(reply) for reply in await self._call(write)] if entries else []

    def _put_args(self, entry: CacheEntry) -> list[Any]:
        expires_ms = "" if entry.expires_at is None else str(int(entry.expires_at * 1000))
        fields: list[Any] = []
        for name, value in _entry_fields(entry).items():
            fields += [name, value]
        last_access = entry.last_access or entry.created_at
        return [
            self.prefix, self.feed_max_len, self.origin, entry.exact_key, expires_ms, last_access, entry.namespace,
            *fields,
        ]  # fmt: skip

    async def get(self, entry_id: int) -> CacheEntry | None:
        fields = await self._call(lambda: self._redis.hgetall(self.key("entry", entry_id)))
        return _entry_from_fields(entry_id, fields) if fields else None

    async def get_by_exact_key(self, exact_key: str) -> CacheEntry | None:
        found = await self._call(lambda: self._get_exact(args=[self.prefix, exact_key]))
        if not found or not found[1]:
            return None
        flat = found[1]
        return _entry_from_fields(int(found[0]), dict(zip(flat[::2], flat[1::2], strict=True)))

    async def touch(self, accesses: dict[int, float]) -> None:
        items = list(accesses.items())
        for start in range(0, len(items), _SCRIPT_BATCH):
            args: list[Any] = [self.prefix]
            for entry_id, at in items[start : start + _SCRIPT_BATCH]:
                args += [entry_id, at]
            await self._call(lambda a=args: self._touch(args=a))  # type: ignore[misc]

    async def delete_expired(self, now: float) -> list[RemovedEntry]:
        return await self._drop_in_batches(lambda: self._expire(args=self._args(now, _SCRIPT_BATCH)))

    async def evict_fairly(self, keep: int) -> list[RemovedEntry]:
        return await self._drop_in_batches(lambda: self._evict(args=self._args(keep, _SCRIPT_BATCH)))

    async def delete(self, entry_ids: Iterable[int]) -> list[RemovedEntry]:
        ids = list(entry_ids)
        removed: list[RemovedEntry] = []
        for start in range(0, len(ids), _SCRIPT_BATCH):
            chunk = ids[start : start + _SCRIPT_BATCH]
            removed += _removed(await self._call(lambda c=chunk: self._delete(args=self._args(*c))))  # type: ignore[misc]
        return removed

    async def _drop_in_batches(self, script: Callable[[], Awaitable[list[bytes]]]) -> list[RemovedEntry]:
        removed: list[RemovedEntry] = []
        while True:
            batch = _removed(await self._call(script))
            removed += batch
            if len(batch) < _SCRIPT_BATCH:
                return removed

    def _args(self, *args: object) -> list[Any]:
        return [self.prefix, self.feed_max_len, self.origin, *args]

    async def count(self) -> int:
        return int(await self._call(lambda: self._redis.zcard(self.key("lru"))))

    async def entries(
        self, query: EntryQuery, *, after_id: int = 0, batch_size: int = 500, with_vectors: bool = False
    ) -> AsyncIterator[list[CacheEntry]]:
        """Ids from the recency set, sorted; then each batch read by one script, filtered here."""
        ids = sorted(entry_id for entry_id in await self.stored_ids() if entry_id > after_id)
        for start in range(0, len(ids), batch_size):
            # At most _SCRIPT_BATCH entries per script call, so that Redis is never held for long.
            flat: list[Any] = []
            for part in range(start, min(start + batch_size, len(ids)), _SCRIPT_BATCH):
                args = [self.prefix, int(with_vectors), *ids[part : min(part + _SCRIPT_BATCH, start + batch_size)]]
                flat += await self._call(lambda a=args: self._list(args=a))  # type: ignore[misc]
            batch = [_listed_entry(*flat[i : i + 4]) for i in range(0, len(flat), 4)]
            batch = [entry for entry in batch if query.matches(entry)]
            if batch:
                yield batch

    async def stored_ids(self) -> set[int]:
        """Every entry id, read in pages (ZSCAN) so that no single call holds Redis for long: one
        ZRANGE of a million ids blocked Redis for half a second and outlasted the timeout. Ids
        added or removed meanwhile reach a replica through the change feed."""
        ids: set[int] = set()
        cursor = 0
        while True:
            cursor, page = await self._call(
                lambda c=cursor: self._redis.zscan(self.key("lru"), c, count=10_000)  # type: ignore[misc]
            )
            ids.update(int(member) for member, _ in page)
            if cursor == 0:
                return ids

    async def vectors_for(self, entry_ids: list[int]) -> tuple[list[int], list[str], np.ndarray]:
        found: list[int] = []
        scopes: list[str] = []
        rows: list[np.ndarray] = []
        for start in range(0, len(entry_ids), 1000):
            chunk = entry_ids[start : start + 1000]

            async def fetch(c: list[int] = chunk) -> list[Any]:
                async with self._redis.pipeline(transaction=False) as pipe:
                    for entry_id in c:
                        pipe.hmget(self.key("entry", entry_id), ["scope", "vector"])
                    return list(await pipe.execute())

            for entry_id, (scope, vector) in zip(chunk, await self._call(fetch), strict=True):
                if scope is not None and vector:
                    found.append(entry_id)
                    scopes.append(scope.decode())
                    rows.append(np.frombuffer(vector, dtype=np.float32))
        matrix = np.vstack(rows) if rows else np.zeros((0, 0), dtype=np.float32)
        return found, scopes, matrix

    # -- feedback and per-namespace settings -----------------------------------------------------

    async def add_negative_feedback(self, feedback: NegativeFeedback, raise_min_similarity_to: float | None) -> None:
        raise_to = "" if raise_min_similarity_to is None else repr(float(raise_min_similarity_to))
        args = [*self._args(feedback.entry_id), _feedback_json(feedback), raise_to]
        await self._call(lambda: self._negative(args=args))

    async def raise_min_similarity(self, entry_id: int, to: float) -> None:
        keys = [self.key("entry", entry_id)]
        await self._call(lambda: self._raise_min_similarity(keys=keys, args=[repr(float(to))]))

    async def negative_feedback(self) -> list[NegativeFeedback]:
        async def read() -> list[NegativeFeedback]:
            ids = [int(i) for i in await self._redis.smembers(self.key("neg_ids"))]
            found: list[NegativeFeedback] = []
            for entry_id in ids:
                items = await self._redis.lrange(self.key("neg", entry_id), 0, -1)
                if not items:
                    await self._redis.srem(self.key("neg_ids"), entry_id)  # its entry expired
                found += [_feedback_from_json(item) for item in items]
            return found

        return await self._call(read)

    async def namespace_configs(self) -> dict[str, dict[str, Any]]:
        rows = await self._call(lambda: self._redis.hgetall(self.key("ns_config")))
        return {namespace.decode(): json.loads(config) for namespace, config in rows.items()}

    async def namespace_config(self, namespace: str) -> dict[str, Any]:
        value = await self._call(lambda: self._redis.hget(self.key("ns_config"), namespace))
        return {} if value is None else dict(json.loads(value))

    async def set_namespace_config(self, namespace: str, config: dict[str, Any]) -> None:
        async def write() -> None:
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.hset(self.key("ns_config"), namespace, json.dumps(config))
                self._publish(pipe, op="cfg", namespace=namespace)
                await pipe.execute()

        await self._call(write)

    # -- error budgets ---------------------------------------------------------------------------

    async def add_evidence(self, batch_id: str, deltas: dict[tuple[str, str], dict[str, int]]) -> None:
        args: list[Any] = [self.prefix, batch_id]
        for (namespace, language), counts in deltas.items():
            for name, count in counts.items():
                args += [language, namespace, name, count]
        if len(args) > 2:
            await self._call(lambda: self._evidence(args=args))

    async def clear_evidence(self, namespace: str | None) -> None:
        async def write() -> None:
            members = [m.decode() for m in await self._redis.smembers(self.key("evidence_keys"))]
            dropped = [m for m in members if namespace is None or m.partition(":")[2] == namespace]
            if dropped:
                async with self._redis.pipeline(transaction=True) as pipe:
                    for member in dropped:
                        language, _, name = member.partition(":")
                        pipe.delete(self.key("evidence", language, name))
                    pipe.srem(self.key("evidence_keys"), *dropped)
                    await pipe.execute()

        await self._call(write)

    async def evidence(self) -> dict[tuple[str, str], dict[str, int]]:
        async def read() -> dict[tuple[str, str], dict[str, int]]:
            members = [m.decode().partition(":") for m in await self._redis.smembers(self.key("evidence_keys"))]
            async with self._redis.pipeline(transaction=False) as pipe:
                for language, _, namespace in members:
                    pipe.hgetall(self.key("evidence", language, namespace))
                found = await pipe.execute()
            return {
                (namespace, language): {name.decode(): int(count) for name, count in counts.items()}
                for (language, _, namespace), counts in zip(members, found, strict=True)
            }

        return await self._call(read)

    # -- the embeddings cache ----------------------------------------------------------------------

    async def get_embeddings(self, keys: Sequence[str], now: float) -> dict[str, bytes]:
        """The vectors, then recency for those found: two round trips at most. A key that expired
        natively is missing here; its sorted-set members go with the next sweep."""
        wanted = list(dict.fromkeys(keys))
        if not wanted:
            return {}
        vectors = await self._call(lambda: self._redis.mget([self.key("emb", key) for key in wanted]))
        found = {key: bytes(vector) for key, vector in zip(wanted, vectors, strict=True) if vector is not None}
        if found:
            await self._call(lambda: self._touch_embeddings(args=[self.prefix, now, *found]))
        return found

    async def put_embeddings(
        self, namespace: str, items: dict[str, bytes], now: float, expires_at: float | None
    ) -> None:
        """One script per batch of keys: each batch is whole or absent, and Redis is never held long."""
        expiry = ["", ""] if expires_at is None else [repr(expires_at), int(expires_at * 1000)]
        pairs = list(items.items())
        for start in range(0, len(pairs), _SCRIPT_BATCH):
            args: list[Any] = [self.prefix, namespace, repr(now), *expiry]
            for key, vector in pairs[start : start + _SCRIPT_BATCH]:
                args += [key, vector]
            await self._call(lambda a=args: self._put_embeddings(args=a))  # type: ignore[misc]

    async def delete_expired_embeddings(self, now: float) -> int:
        return await self._count_in_batches(lambda: self._expire_embeddings(args=[self.prefix, now, _SCRIPT_BATCH]))

    async def evict_embeddings(self, keep: int) -> int:
        return await self._count_in_batches(lambda: self._evict_embeddings(args=[self.prefix, keep, _SCRIPT_BATCH]))

    async def _count_in_batches(self, script: Callable[[], Awaitable[int]]) -> int:
        dropped = 0
        while True:
            batch = int(await self._call(script))
            dropped += batch
            if batch < _SCRIPT_BATCH:
                return dropped

    async def count_embeddings(self) -> int:
        return int(await self._call(lambda: self._redis.zcard(self.key("emb_lru"))))

    # -- templates -------------------------------------------------------------------------------

    async def set_templates(self, templates: list[dict[str, Any]]) -> None:
        async def write() -> None:
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.set(self.key("templates"), json.dumps(templates))
                self._publish(pipe, op="templates")
                await pipe.execute()

        await self._call(write)

    async def templates(self) -> list[dict[str, Any]] | None:
        """The shared templates, or None when no replica published any."""
        value = await self._call(lambda: self._redis.get(self.key("templates")))
        return None if value is None else list(json.loads(value))

    # -- counters of every replica ---------------------------------------------------------------

    async def add_counts(self, counts: Counter[str]) -> None:
        async def write() -> None:
            async with self._redis.pipeline(transaction=True) as pipe:
                for name, value in counts.items():
                    pipe.hincrby(self.key("stats"), name, value)
                await pipe.execute()

        if counts:
            await self._call(write)

    async def counts(self) -> Counter[str]:
        rows = await self._call(lambda: self._redis.hgetall(self.key("stats")))
        return Counter({name.decode(): int(value) for name, value in rows.items()})

    # -- the change feed -------------------------------------------------------------------------

    def _publish(self, pipe: Any, **fields: str) -> None:
        pipe.xadd(self.key("feed"), {**fields, "origin": self.origin}, maxlen=self.feed_max_len, approximate=True)

    async def feed_position(self) -> str:
        """The offset of the newest event, '0-0' when there is none."""
        info = await self._call(lambda: self._feed_info())
        return str(info.get("last-generated-id") or "0-0")

    async def feed_has_gap_after(self, offset: str) -> bool:
        """True if events after ``offset`` may have been trimmed away: a follower there must
        reconcile instead. Trimming drops the oldest events first, so while the event at
        ``offset`` is still there, everything after it is too."""
        if offset == "0-0":
            info = await self._call(lambda: self._feed_info())
            return int(info.get("entries-added") or 0) > int(info.get("length") or 0)
        found = await self._call(lambda: self._redis.xrange(self.key("feed"), offset, offset, count=1))
        return not found

    async def _feed_info(self) -> dict[str, Any]:
        try:
            info = await self._redis.xinfo_stream(self.key("feed"))
        except redis_errors.ResponseError:  # no stream yet
            return {}
        return {
            (k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes) else v)
            for k, v in info.items()
        }

    async def read_feed(self, after: str, *, block_ms: int | None = None, count: int = 1000) -> list[FeedEvent]:
        """Events after ``after``, oldest first; waits up to ``block_ms`` for one if there are none."""

        async def read() -> Any:
            return await self._feed_redis.xread({self.key("feed"): after}, count=count, block=block_ms)

        reply = await self._call(read)
        if not reply:
            return []
        return [_event(offset.decode(), fields) for offset, fields in reply[0][1]]


def _stream_id(offset: str) -> tuple[int, int]:
    milliseconds, _, sequence = offset.partition("-")
    return int(milliseconds), int(sequence or 0)


def _event(offset: str, raw: dict[bytes, bytes]) -> FeedEvent:
    fields = {k.decode(): v.decode() for k, v in raw.items()}
    op, origin = fields.get("op", ""), fields.get("origin", "")
    if op == "put":
        replaced = fields.get("replaced")
        return FeedEvent(offset, op, origin, entry_id=int(fields["id"]), replaced=int(replaced) if replaced else None)
    if op == "del":
        return FeedEvent(offset, op, origin, ids=tuple(int(i) for i in fields["ids"].split(",") if i))
    if op == "neg":
        return FeedEvent(offset, op, origin, feedback=_feedback_from_json(fields["feedback"].encode()))
    return FeedEvent(offset, op, origin, namespace=fields.get("namespace"))


def _listed_entry(entry_id: bytes, fields: bytes, vector: bytes | None, score: bytes | None) -> CacheEntry:
    """An entry from one item of the list script; recency comes from the sorted set, since hits
    move the score there, not the hash field."""
    raw = {name.encode(): value.encode() for name, value in json.loads(fields).items()}
    if vector is not None:
        raw[b"vector"] = vector
    entry = _entry_from_fields(int(entry_id), raw)
    if score is not None:
        entry.last_access = max(entry.last_access, float(score))
    return entry


def _put_result(reply: list[Any]) -> tuple[int, list[RemovedEntry]]:
    entry_id, replaced = reply
    return int(entry_id), [RemovedEntry(int(replaced[0]), replaced[1].decode())] if replaced else []


def _removed(flat: list[bytes]) -> list[RemovedEntry]:
    return [RemovedEntry(int(flat[i]), flat[i + 1].decode()) for i in range(0, len(flat), 2)]


def _entry_fields(entry: CacheEntry) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "namespace": entry.namespace,
        "scope": entry.scope,
        "exact_key": entry.exact_key,
        "model": entry.model,
        "prompt": entry.prompt,
        "answer": entry.answer,
        "created_at": repr(entry.created_at),
        "last_access": repr(entry.last_access or entry.created_at),
        "hits": entry.hits,
    }
    if entry.expires_at is not None:
        fields["expires_at"] = repr(entry.expires_at)
    if entry.vector is not None:
        fields["vector"] = np.asarray(entry.vector, dtype=np.float32).tobytes()
    if entry.min_similarity is not None:
        fields["min_similarity"] = repr(entry.min_similarity)
    if entry.tool_calls is not None:
        fields["tool_calls"] = json.dumps(entry.tool_calls)
    return fields


def _entry_from_fields(entry_id: int, raw: dict[bytes, bytes]) -> CacheEntry:
    text = {k.decode(): v for k, v in raw.items()}

    def string(name: str) -> str:
        return text[name].decode()

    def optional_float(name: str) -> float | None:
        return float(text[name]) if name in text else None

    return CacheEntry(
        id=entry_id,
        namespace=string("namespace"),
        scope=string("scope"),
        exact_key=string("exact_key"),
        model=string("model"),
        prompt=string("prompt"),
        answer=string("answer"),
        created_at=float(text["created_at"]),
        expires_at=optional_float("expires_at"),
        last_access=float(text.get("last_access", text["created_at"])),
        hits=int(text.get("hits", b"0")),
        vector=np.frombuffer(text["vector"], dtype=np.float32) if "vector" in text else None,
        min_similarity=optional_float("min_similarity"),
        tool_calls=json.loads(text["tool_calls"]) if "tool_calls" in text else None,
    )


def _feedback_json(feedback: NegativeFeedback) -> str:
    vector = None if feedback.vector is None else base64.b64encode(np.asarray(feedback.vector, np.float32).tobytes())
    return json.dumps(
        {
            "entry_id": feedback.entry_id,
            "query_key": feedback.query_key,
            "vector": None if vector is None else vector.decode(),
            "similarity": feedback.similarity,
        }
    )


def _feedback_from_json(raw: bytes) -> NegativeFeedback:
    item = json.loads(raw)
    vector = item.get("vector")
    return NegativeFeedback(
        entry_id=int(item["entry_id"]),
        query_key=str(item["query_key"]),
        vector=None if vector is None else np.frombuffer(base64.b64decode(vector), dtype=np.float32),
        similarity=item.get("similarity"),
    )
