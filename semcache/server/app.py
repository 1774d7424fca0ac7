"""The app factory. The lifespan owns the long-lived parts: model, store, index, upstream client."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager, suppress
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI
from starlette.types import ASGIApp

from ..decision.budget import ErrorBudgets, share_evidence
from ..decision.judges import load_judge
from ..decision.quality import DecisionLog, NamespacePolicies, default_policy
from ..decision.verification import load_verification
from ..dialects.responses import IssuedResponses
from ..embedders import BatchingEmbedder, RoutedEmbedder, load_configured_embedder, load_routed
from ..embedding_cache import EmbeddingCache
from ..errors import StoreUnavailable
from ..feedback import WrongAnswers
from ..index import ScopedVectorIndex
from ..limits import RateLimiter
from ..logs import Redactor, bind_request_id
from ..maintenance import Maintenance, read_snapshot_soon, restore_index
from ..management import EntryAdmin
from ..metrics import Metrics, Readings
from ..observer import FanOut
from ..pipeline import Pipeline
from ..protocols import Embedder, EvidenceStore, Store, Upstream
from ..replication import Replica
from ..scrubbing import MIN_SECRET_CHARS, SecretScrubber
from ..settings import ACCOUNT_ROUTES, Settings
from ..stats import Stats
from ..stores import SQLiteStore
from ..stores.redis import RedisStore
from ..tiers import TemplateTier, load_templates
from ..tiers.template import LiveTemplates
from ..tokens import Price, PriceTable, TokenCounter
from ..upstreams import RemoteUpstream
from ..upstreams.remote import server_address
from ..upstreams.resilience import CircuitBreaker, ConcurrencyLimit, ResilientUpstream, RetryPolicy
from ..wire import ChatCompletionRequest
from ..wording import counted
from .access import AccessPolicy
from .admin import admin_router, feedback_router
from .admin_entries import entries_router
from .apis import apis_router
from .cache_api import cache_api_router
from .embeddings import embeddings_router
from .errors import ERROR_RESPONSES, install_error_handlers
from .fastpath import DirectRoute
from .limits import BodySizeLimit
from .monitoring import RequestTimer, monitoring_router
from .passthrough import passthrough_router
from .request_context import RequestContext
from .routes import CHAT_PATH, chat_completions, chat_router, router

log = logging.getLogger("semcache.server")


@dataclass
class AppState:
    """Everything a request handler may touch, built once per app."""

    settings: Settings
    upstream: Upstream | None  # None until a local model has loaded
    access: AccessPolicy
    stats: Stats = field(default_factory=Stats)
    metrics: Metrics = field(default_factory=Metrics)
    pipeline: Pipeline | None = None
    store: Store | None = None  # every role; the pipeline and the others see only theirs
    entry_admin: EntryAdmin | None = None
    embedding_cache: EmbeddingCache | None = None  # with cache_embeddings
    maintenance: Maintenance | None = None
    rate_limiter: RateLimiter | None = None
    replica: Replica | None = None  # with --store redis
    evidence_store: EvidenceStore | None = None  # where the error budgets' evidence is kept
    # The hits served as Responses, which a later previous_response_id may go on from.
    issued_responses: IssuedResponses = field(default_factory=IssuedResponses)
    load_error: str | None = None
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def __post_init__(self) -> None:
        # Every event is told once, to both: /stats's counters and Prometheus's series.
        self.observer = FanOut(self.stats, self.metrics)


def create_app(
    settings: Settings,
    *,
    embedder: Embedder | None = None,
    upstream: Upstream | None = None,
    access: AccessPolicy | None = None,
) -> FastAPI:
    """Build the service. ``embedder``, ``upstream`` and ``access`` (the API keys) default to the
    configured real ones."""
    if access is None:
        access = AccessPolicy.from_file(settings.api_keys_file)
    templates = load_templates(settings.templates) if settings.templates else []

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        limiter = (
            RateLimiter(settings.rate_limit_per_s, settings.rate_limit_burst) if settings.rate_limit_per_s else None
        )
        metrics = Metrics(lambda: _readings(state), max_namespaces=settings.metrics_max_namespaces)
        # The upstream's errors are relayed to clients: scrubbed of the secrets the logs never show.
        redact = Redactor([*settings.secrets(), *access.keys])
        # And so are its answers, which semcache also stores and serves to others.
        scrub = SecretScrubber([*settings.secrets(), *access.keys])
        state = AppState(
            settings=settings, upstream=upstream or _remote_upstream(settings, metrics, redact, scrub), access=access,
            rate_limiter=limiter, metrics=metrics, stats=Stats(max_namespaces=settings.stats_max_namespaces),
            issued_responses=IssuedResponses(
                settings.remembered_responses_max, settings.remembered_responses_max_chars
            ),
        )  # fmt: skip
        app.state.semcache = state
        if isinstance(state.upstream, ResilientUpstream) and isinstance(state.upstream.inner, RemoteUpstream):
            # In the background: an upstream that comes up later is no reason to delay or fail the start.
            state.tasks.append(asyncio.create_task(_check_upstream(state.upstream.inner, settings)))
        loader = asyncio.create_task(_load(state, embedder, TemplateTier(templates, settings.template_threshold)))
        try:
            yield
        finally:
            loader.cancel()
            await asyncio.gather(loader, return_exceptions=True)
            await _shutdown(state)

    app = SemcacheApp(
        max_body_bytes=settings.max_body_bytes,
        fast_path=settings.fast_path,
        title="semcache",
        summary="A semantic cache in front of OpenAI-compatible chat completion APIs.",
        version=_version(),
        lifespan=lifespan,
        responses=ERROR_RESPONSES,
    )
    install_error_handlers(app)
    app.include_router(chat_router)
    app.include_router(router)
    app.include_router(feedback_router)
    app.include_router(cache_api_router)
    app.include_router(apis_router)
    app.include_router(admin_router)
    app.include_router(entries_router)
    app.include_router(monitoring_router)
    if settings.cache_embeddings:
        app.include_router(embeddings_router)  # before the pass-through, which would claim its path
    app.include_router(passthrough_router)  # last: every /v1 path the routes above do not claim
    account = sorted(set(settings.passthrough_routes) & set(ACCOUNT_ROUTES))
    if account and settings.upstream_api_key:
        log.warning("passthrough_routes lets every client use %s on the operator's upstream account "
                    "(SEMCACHE_UPSTREAM_API_KEY)", ", ".join(account))  # fmt: skip
    short = [name for name in ("upstream_api_key", "admin_key", "metrics_key")
             if 0 < len(getattr(settings, name) or "") < MIN_SECRET_CHARS]  # fmt: skip
    if short:
        log.warning("%s shorter than %d characters: upstream answers are not scrubbed of it",
                    ", ".join(short), MIN_SECRET_CHARS)  # fmt: skip
    if settings.passthrough_methods and settings.upstream_api_key:
        methods = settings.passthrough_methods.items()
        added = "; ".join(f"{', '.join(names)} on /v1/{route}" for route, names in methods)
        log.warning("passthrough_methods lets every client send %s with the operator's upstream key "
                    "(SEMCACHE_UPSTREAM_API_KEY)", added)  # fmt: skip
    return app


class SemcacheApp(FastAPI):
    """FastAPI inside semcache's own middlewares, with the chat route's direct path between them
    when ``fast_path`` is on.

    The middlewares are pure ASGI and wrap everything: the request id (outermost, so that every
    response and log line has it), the latency timer, and the body's size limit.
    """

    def __init__(self, *, max_body_bytes: int, fast_path: bool, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.max_body_bytes = max_body_bytes
        self.fast_path = fast_path

    def build_middleware_stack(self) -> ASGIApp:
        app = super().build_middleware_stack()
        if self.fast_path:
            app = DirectRoute(app, CHAT_PATH, ChatCompletionRequest, chat_completions)
        return RequestContext(RequestTimer(BodySizeLimit(app, self.max_body_bytes)))


def _remote_upstream(
    settings: Settings, metrics: Metrics, redact: Redactor, scrub: SecretScrubber
) -> ResilientUpstream | None:
    """The remote backend; None for the local one, which loads with the other models."""
    if settings.backend == "local":
        return None
    remote = RemoteUpstream(
        settings.upstream_url,
        api_key=settings.upstream_api_key,
        connect_timeout_s=settings.upstream_connect_timeout_s,
        read_timeout_s=settings.upstream_first_byte_timeout_s,
        max_connections=settings.upstream_max_connections,
        max_response_bytes=settings.max_upstream_response_bytes,
        redact=redact,
        scrub=scrub,
    )
    upstream = f"the upstream at {server_address(settings.upstream_url)}"
    return _resilient(remote, settings, metrics, max_attempts=settings.upstream_max_attempts, name=upstream)


async def _check_upstream(remote: RemoteUpstream, settings: Settings) -> None:
    """Say at once, in the log, whether the upstream can be reached: a wrong or dead upstream_url
    otherwise shows only when the first miss fails."""
    address = server_address(settings.upstream_url)
    bind_request_id("upstream-check")  # in this task only: its lines (httpx's too) and the upstream's share it
    reason = await remote.unreachable_reason(settings.upstream_connect_timeout_s)
    if reason is None:
        log.info("the upstream at %s is reachable", address)
    else:
        log.warning("the upstream at %s is unreachable (%s): cache misses fail with a 503 until it answers; "
                    "check upstream_url (--upstream, SEMCACHE_UPSTREAM_URL)", address, reason)  # fmt: skip


def _local_upstream(settings: Settings, metrics: Metrics) -> ResilientUpstream:
    """A local model; retrying it would only repeat its failure, so it gets one attempt."""
    from ..upstreams.local import LocalUpstream  # imports transformers: only when asked for

    if settings.model is None:
        raise ValueError("--backend local needs --model PATH (SEMCACHE_MODEL), a local Hugging Face model folder")
    local = LocalUpstream(
        settings.model,
        max_batch_size=settings.local_max_batch_size,
        batch_window_ms=settings.local_batch_window_ms,
        max_new_tokens_default=settings.local_max_new_tokens,
    )
    return _resilient(local, settings, metrics, max_attempts=1, name=f"the local model {settings.model}")


def _resilient(
    inner: Upstream, settings: Settings, metrics: Metrics, *, max_attempts: int, name: str
) -> ResilientUpstream:
    return ResilientUpstream(
        inner,
        retry=RetryPolicy(
            max_attempts=max_attempts,
            base_delay_s=settings.upstream_retry_base_delay_s,
            max_total_s=settings.upstream_retry_max_total_s,
        ),
        breaker=CircuitBreaker(settings.breaker_failure_threshold, settings.breaker_reset_after_s, upstream=name),
        limit=ConcurrencyLimit(settings.upstream_max_concurrent, settings.upstream_max_queued),
        total_timeout_s=settings.upstream_total_timeout_s,
        observer=metrics,
    )


def _load_embedders(settings: Settings) -> RoutedEmbedder:
    """The English model, and the models other scripts and namespaces are routed to."""
    return load_routed(
        settings.embedding_model,
        settings.multilingual_embedding_model,
        settings.embedding_routes,
        lambda name: load_configured_embedder(name, settings),
        settings.embed_threads,
    )


async def _load(state: AppState, embedder: Embedder | None, templates: TemplateTier) -> None:
    """Load the model, open the store and restore the index; /healthz turns 200 once done."""
    settings = state.settings
    cleanup = AsyncExitStack()  # closes what was opened if loading stops half-way
    snapshot_dir = settings.data_dir / "faiss"
    # What needs no model starts at once, in threads of its own, while the model loads.
    tokens = asyncio.create_task(asyncio.to_thread(TokenCounter, settings.data_dir / "tiktoken"))
    snapshot = read_snapshot_soon(snapshot_dir) if settings.store != "redis" else None
    stored_ids: asyncio.Task[set[int]] | None = None
    cleanup.push_async_callback(_cancel, tokens, snapshot)
    try:
        if settings.store != "redis":
            embedded = SQLiteStore(settings.data_dir / "entries.sqlite3")
            cleanup.push_async_callback(embedded.close)
            await embedded.open()
            # Nothing writes before the pipeline exists: the ids read now are the ones to reconcile with.
            stored_ids = asyncio.create_task(embedded.stored_ids())
            cleanup.push_async_callback(_cancel, stored_ids)
        if state.upstream is None:
            state.upstream = await asyncio.to_thread(_local_upstream, settings, state.metrics)
        upstream = state.upstream
        model: Embedder = embedder if embedder is not None else await asyncio.to_thread(_load_embedders, settings)
        batcher = BatchingEmbedder(
            model,
            max_batch=settings.embed_batch_size,
            max_wait_s=settings.embed_batch_wait_ms / 1000,
            on_batch=lambda size, seconds: _embedded(state, size, seconds),
        )
        cleanup.push_async_callback(batcher.close)
        index = ScopedVectorIndex(model.dimension, hnsw_min_entries=settings.hnsw_min_entries)
        # What the shared settings change: with Redis, another replica's feedback, namespace
        # settings and templates reach the request path through these.
        policies = NamespacePolicies(default_policy(settings))
        wrong_answers = WrongAnswers()
        live_templates = LiveTemplates(templates)
        if templates.phrasings:
            await templates.embed_phrasings(batcher)
        store: Store
        evidence_store: EvidenceStore  # the same store, seen through the error budgets' seam
        if settings.store == "redis":
            store = evidence_store = _redis_store(settings)
            cleanup.push_async_callback(store.close)
            state.replica = Replica(
                store, index, batcher, state.stats, snapshot_dir, settings.template_threshold,
                policies=policies, wrong_answers=wrong_answers, templates=live_templates,
            )  # fmt: skip
            await state.replica.join()  # Redis down: start as a plain proxy; the replica catches up later
            await _share_template_file(state.replica, templates, live_templates)
        else:
            store = evidence_store = embedded
            await restore_index(store, index, batcher, snapshot_dir, snapshot, stored_ids)
            for namespace, config in (await store.namespace_configs()).items():
                policies.set(namespace, config)
            wrong_answers.load(await store.negative_feedback())
        budgets = ErrorBudgets(
            min_labels=settings.learn_min_labels,
            confidence=settings.learn_confidence,
            explore_share=settings.explore_share,
        )
        prices = PriceTable({m: Price(p.input_per_1m, p.output_per_1m) for m, p in settings.prices.items()})
        pipeline = Pipeline(
            store=store,
            index=index,
            embedder=batcher,
            upstream=upstream,
            templates=live_templates,
            tokens=await tokens,
            policies=policies,
            default_ttl_s=settings.ttl_s,
            max_answer_bytes=settings.max_answer_bytes,
            max_temperature=settings.max_temperature,
            verification=load_verification(settings, upstream, state.observer, prices),
            multi_turn=settings.multi_turn,
            cache_tool_calls=settings.cache_tool_calls,
            cache_answer_instructions=settings.cache_answer_instructions,
            context_limits=settings.context_limits,
            trim_oldest_turns=settings.trim_oldest_turns,
            standalone_max_context_similarity=settings.standalone_max_context_similarity,
            decisions=DecisionLog(settings.decisions_kept),
            prices=prices,
            observer=state.observer,
            budgets=budgets,
            judge=load_judge(settings, batcher.embed, upstream),
            # Without the operator's key each client's own goes upstream, and an answer may quote it.
            streams_shared_across_keys=settings.backend == "local" or bool(settings.upstream_api_key),
            wrong_answers=wrong_answers,
        )
        try:
            await share_evidence(budgets, evidence_store)  # what earlier runs (and other replicas) learned
        except StoreUnavailable as exc:
            log.warning("could not read the learned error budgets yet: %s", exc.message)
        if state.replica is not None:
            state.tasks.append(asyncio.create_task(state.replica.run_forever(), name="semcache-replica"))
        state.maintenance = Maintenance(
            accesses=pipeline.accesses,
            clock=pipeline.clock,
            store=store,
            index=index,
            snapshot_dir=snapshot_dir,
            max_entries=settings.max_entries,
            sweep_interval_s=settings.sweep_interval_s,
            snapshot_interval_s=settings.snapshot_interval_s,
            embedding_model=model.name,
            snapshot_metadata=state.replica.snapshot_metadata if state.replica is not None else dict,
            budgets=budgets,
            evidence_store=evidence_store,
            embedding_store=store if settings.cache_embeddings else None,
            max_embedding_entries=settings.max_embedding_entries,
        )
        if settings.cache_embeddings:
            state.embedding_cache = EmbeddingCache(
                store, upstream, pipeline.tokens, policies, default_ttl_s=settings.ttl_s, observer=state.observer,
                clock=pipeline.clock,
            )  # fmt: skip
        state.tasks.append(asyncio.create_task(state.maintenance.run_forever(), name="semcache-maintenance"))
        state.entry_admin = EntryAdmin(store, index, batcher, live_templates, policies, pipeline.clock)
        state.pipeline, state.store, state.evidence_store = pipeline, store, evidence_store
        cleanup.pop_all()  # from here on, _shutdown closes them
        log.info("semcache is ready: %s", counted(len(index), "entry"))
    except asyncio.CancelledError:
        await cleanup.aclose()
        raise
    except Exception as exc:
        await cleanup.aclose()
        state.load_error = f"{type(exc).__name__}: {exc}"
        log.exception("semcache failed to load")


async def _cancel(*tasks: asyncio.Task[Any] | None) -> None:
    """Stop what loading started and no longer needs (a thread already running finishes alone)."""
    started = [task for task in tasks if task is not None]
    for task in started:
        task.cancel()
    await asyncio.gather(*started, return_exceptions=True)


def _embedded(state: AppState, batch_size: int, seconds: float) -> None:
    state.observer.embedded(batch_size, seconds)


def _readings(state: AppState) -> Readings:
    """What /metrics reads when scraped (in a worker thread: plain attributes, and the index's lock)."""
    pipeline, maintenance, upstream = state.pipeline, state.maintenance, state.upstream
    resilient = upstream if isinstance(upstream, ResilientUpstream) else None
    return Readings(
        ready=pipeline is not None,
        index=pipeline.index.stats() if pipeline is not None else None,
        expired=maintenance.expired if maintenance is not None else 0,
        evicted=maintenance.evicted if maintenance is not None else 0,
        breaker_state=resilient.breaker.state if resilient is not None else None,
        breaker_opened=resilient.breaker.opened if resilient is not None else 0,
        upstream_retries=resilient.retries if resilient is not None else 0,
        quality=tuple(pipeline.semantic.quality(limit=state.settings.metrics_max_namespaces))
        if pipeline is not None
        else (),
    )


def _redis_store(settings: Settings) -> RedisStore:
    return RedisStore(
        settings.redis_url,
        prefix=settings.redis_prefix,
        timeout_s=settings.redis_timeout_s,
        max_connections=settings.redis_max_connections,
        feed_max_len=settings.redis_feed_max_len,
    )


async def _share_template_file(replica: Replica, templates: TemplateTier, live: LiveTemplates) -> None:
    """Publish this replica's template file, if it has one, over what joining took from Redis."""
    if not templates.templates or not replica.connected:
        return
    try:
        await replica.store.set_templates([template.as_dict() for template in templates.templates])
    except StoreUnavailable:
        replica.connected = False  # its follower loads the shared ones once Redis is back
        return
    live.swap(templates)


async def _shutdown(state: AppState) -> None:
    for task in state.tasks:
        task.cancel()
    await asyncio.gather(*state.tasks, return_exceptions=True)
    pipeline = state.pipeline
    if pipeline is not None and state.maintenance is not None:
        with suppress(Exception):
            await state.maintenance.sweep()
        if state.replica is not None:
            with suppress(StoreUnavailable):
                await state.replica.share_stats(now=True)
        try:
            await state.maintenance.snapshot()
        except Exception:
            log.exception("could not save the index snapshot; the next start rebuilds it from the store")
        pipeline.close_labelling()
        if state.maintenance.evidence_store is not None:
            with suppress(Exception):
                await share_evidence(pipeline.budgets, state.maintenance.evidence_store)
        await pipeline.embedder.close()
        pipeline.semantic.close()
        if state.store is not None:
            await state.store.close()
    if state.upstream is not None:
        await state.upstream.close()


def _version() -> str:
    from .. import __version__

    return __version__
