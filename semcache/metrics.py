"""Prometheus metrics of one app, in a registry of its own (several apps may share a process).

Counters and histograms are fed by the request path through the ``Observer`` hooks. Figures that
other parts keep already (the index's size, the sweeper's counts, the circuit breaker) are read
when Prometheus scrapes, so they can never drift from what ``/stats`` shows.

Every series is this replica's own: Prometheus adds replicas up itself (``sum by (...)``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from .fairness import NamespaceLabels
from .index import IndexStats
from .observer import Stage, UpstreamErrorKind
from .stats import LATENCY_PATHS, LatencyPath, Outcome
from .upstreams.resilience import CircuitState

# Bucket bounds in seconds: a request spans an exact hit (about a millisecond) to a long upstream
# answer; the steps inside it span a FAISS search (tens of microseconds) to a slow embedding batch.
REQUEST_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
STEP_BUCKETS_S = (0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5)
UPSTREAM_BUCKETS_S = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
BATCH_SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
# Namespaces beyond the first ``max_namespaces`` share the label value OTHER_NAMESPACES: clients
# choose namespaces, Prometheus pays per series.
CIRCUIT_STATES: tuple[CircuitState, ...] = ("closed", "open", "half_open")


@dataclass(frozen=True)
class Readings:
    """Figures read at scrape time from the parts that keep them; None where there is no such part."""

    ready: bool = False
    index: IndexStats | None = None
    expired: int = 0
    evicted: int = 0
    breaker_state: CircuitState | None = None
    breaker_opened: int = 0
    upstream_retries: int = 0
    quality: tuple[dict[str, Any], ...] = ()  # each namespace's error budget (SemanticTier.quality)


class Metrics:
    """The app's Prometheus series. Implements ``semcache.observer.Observer``; ``exposition`` is
    what /metrics serves."""

    def __init__(self, read: Callable[[], Readings] = Readings, *, max_namespaces: int = 100) -> None:
        self.registry = _Registry()
        self._namespace = NamespaceLabels(max_namespaces)
        # Labelled children, kept at hand: ``labels()`` costs microseconds, on every request.
        self._request_children: dict[tuple[str, str, str], Counter] = {}
        self._saved_children: dict[str, tuple[Counter, Counter, Counter]] = {}
        registry = self.registry
        self._requests = Counter(
            "semcache_requests",
            "Chat completion requests by outcome, tier (of hits; 'none' otherwise) and namespace.",
            ["outcome", "tier", "namespace"],
            registry=registry,
        )
        request_seconds = Histogram(
            "semcache_request_duration_seconds",
            "Whole chat requests, first byte in to last byte out, by path: exact_hit, template_hit, semantic_hit, "
            "miss, bypass, error.",
            ["path"],
            buckets=REQUEST_BUCKETS_S,
            registry=registry,
        )
        self._request_seconds = {path: request_seconds.labels(path) for path in LATENCY_PATHS}
        self._embedding_seconds = Histogram(
            "semcache_embedding_duration_seconds",
            "One embedding model call, on a batch of prompts.",
            buckets=STEP_BUCKETS_S,
            registry=registry,
        )
        self._embedding_batch = Histogram(
            "semcache_embedding_batch_size",
            "Prompts per embedding model call.",
            buckets=BATCH_SIZE_BUCKETS,
            registry=registry,
        )
        store_seconds = Histogram(
            "semcache_store_duration_seconds",
            "Store calls on the request path: lookup (exact key), read (a semantic candidate), write (a new entry).",
            ["operation"],
            buckets=STEP_BUCKETS_S,
            registry=registry,
        )
        self._stages = {
            "index_search": Histogram(
                "semcache_index_search_duration_seconds",
                "One FAISS search of a scope: one request's, or those of one embedding batch with that scope.",
                buckets=STEP_BUCKETS_S,
                registry=registry,
            ),
            "guards": Histogram(
                "semcache_guards_duration_seconds",
                "The guards' checks of one semantic candidate, or of a similar request in flight.",
                buckets=STEP_BUCKETS_S,
                registry=registry,
            ),
            "store_lookup": store_seconds.labels("lookup"),
            "store_read": store_seconds.labels("read"),
            "store_write": store_seconds.labels("write"),
            "upstream_first_byte": Histogram(
                "semcache_upstream_first_byte_seconds",
                "Streamed upstream calls: time to the first chunk, retries included.",
                buckets=UPSTREAM_BUCKETS_S,
                registry=registry,
            ),
            "upstream_total": Histogram(
                "semcache_upstream_duration_seconds",
                "Upstream calls, streamed or not, to the end of the answer, retries included.",
                buckets=UPSTREAM_BUCKETS_S,
                registry=registry,
            ),
        }
        self._upstream_errors = Counter(
            "semcache_upstream_errors",
            "Failed upstream attempts by HTTP status and kind: 'status' (it answered with an error) or "
            "'unavailable' (unreachable, timed out, or a broken answer: status 502 or 504).",
            ["status", "kind"],
            registry=registry,
        )
        self._tokens_saved = Counter(
            "semcache_tokens_saved",
            "Tokens of answers served without an upstream call (tiktoken), by kind.",
            ["namespace", "kind"],
            registry=registry,
        )
        self._cost_saved = Counter(
            "semcache_cost_saved_usd",
            "Estimated US dollars those tokens would have cost (the price table).",
            ["namespace"],
            registry=registry,
        )
        self._coalesced = Counter(
            "semcache_coalesced", "Requests answered from another request's upstream call.", registry=registry
        )
        self._feedback = Counter(
            "semcache_feedback",
            "Clients' verdicts on served hits, by namespace and verdict ('correct', 'wrong').",
            ["namespace", "verdict"],
            registry=registry,
        )
        embedding_inputs = Counter(
            "semcache_embedding_inputs",
            "Inputs of /v1/embeddings requests by source: 'cache' (a stored vector) or 'upstream' (asked, once each).",
            ["source"],
            registry=registry,
        )
        self._embedding_inputs = {source: embedding_inputs.labels(source) for source in ("cache", "upstream")}
        self._embedding_tokens_saved = Counter(
            "semcache_embedding_tokens_saved",
            "Upstream tokens that /v1/embeddings inputs served from the cache avoided (tiktoken; token ids count "
            "themselves).",
            registry=registry,
        )
        self._verifications = Counter(
            "semcache_verifications",
            "Semantic candidates put to the upstream model, by namespace and verdict ('yes', 'no', 'failed').",
            ["namespace", "verdict"],
            registry=registry,
        )
        self._verification_seconds = Histogram(
            "semcache_verification_seconds", "Time a verification took, the upstream's retries included.",
            buckets=(0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0), registry=registry,
        )  # fmt: skip
        self._verification_tokens = Counter(
            "semcache_verification_tokens", "Tokens verifications spent, by kind.", ["kind"], registry=registry
        )
        self._verification_cost = Counter(
            "semcache_verification_cost_usd", "Estimated US dollars verifications cost (the price table).",
            registry=registry,
        )  # fmt: skip
        registry.register(_ScrapeTimeCollector(read))

    # -- Observer ----------------------------------------------------------------------------------

    def request(self, namespace: str, outcome: Outcome, tier: str | None, route: str = "chat") -> None:
        # One series per outcome, tier and namespace, as dashboards know them; /stats has them by route.
        labels = (outcome, tier or "none", self._namespace(namespace))
        child = self._request_children.get(labels)
        if child is None:
            child = self._request_children.setdefault(labels, self._requests.labels(*labels))
        child.inc()

    def stage(self, stage: Stage, seconds: float) -> None:
        self._stages[stage].observe(seconds)

    def upstream_error(self, status: int, kind: UpstreamErrorKind) -> None:
        self._upstream_errors.labels(str(status), kind).inc()

    def saved(self, namespace: str, prompt_tokens: int, completion_tokens: int, cost_usd: float | None) -> None:
        label = self._namespace(namespace)
        children = self._saved_children.get(label)
        if children is None:
            children = self._saved_children.setdefault(
                label,
                (self._tokens_saved.labels(label, "prompt"), self._tokens_saved.labels(label, "completion"),
                 self._cost_saved.labels(label)),
            )  # fmt: skip
        prompt, completion, cost = children
        prompt.inc(prompt_tokens)
        completion.inc(completion_tokens)
        cost.inc(cost_usd or 0.0)

    def coalesced(self) -> None:
        self._coalesced.inc()

    def feedback(self, namespace: str, correct: bool) -> None:
        self._feedback.labels(self._namespace(namespace), "correct" if correct else "wrong").inc()

    def request_duration(self, path: LatencyPath, seconds: float) -> None:
        self._request_seconds[path].observe(seconds)

    def embedded(self, batch_size: int, seconds: float) -> None:
        self._embedding_seconds.observe(seconds)
        self._embedding_batch.observe(batch_size)

    def embeddings(self, namespace: str, inputs: int, from_cache: int, asked: int, tokens_saved: int) -> None:
        self._embedding_inputs["cache"].inc(from_cache)
        self._embedding_inputs["upstream"].inc(asked)
        self._embedding_tokens_saved.inc(tokens_saved)

    def verified(
        self,
        namespace: str,
        verdict: str,
        seconds: float,
        prompt_tokens: int,
        completion_tokens: int,
        cost_usd: float | None,
    ) -> None:
        self._verifications.labels(self._namespace(namespace), verdict).inc()
        self._verification_seconds.observe(seconds)
        self._verification_tokens.labels("prompt").inc(prompt_tokens)
        self._verification_tokens.labels("completion").inc(completion_tokens)
        self._verification_cost.inc(cost_usd or 0.0)

    def exposition(self) -> tuple[bytes, str]:
        """The text format Prometheus scrapes, and its content type."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


class _Registry(CollectorRegistry):
    """Leaves out the ``_created`` timestamps prometheus-client adds to counters and histograms:
    Prometheus would store each as one more series, for nothing a dashboard reads.
    (``prometheus_client.disable_created_metrics()`` would do it, for the whole process.)"""

    def collect(self) -> Iterator[Metric]:
        for metric in super().collect():
            metric.samples = [sample for sample in metric.samples if not sample.name.endswith("_created")]
            yield metric


class _ScrapeTimeCollector(Collector):
    def __init__(self, read: Callable[[], Readings]) -> None:
        self._read = read

    def collect(self) -> Iterable[Metric]:
        readings = self._read()
        yield GaugeMetricFamily(
            "semcache_ready", "1 once the model, the store and the index are loaded.", value=float(readings.ready)
        )
        yield CounterMetricFamily(
            "semcache_expiries", "Entries removed when their TTL ran out.", value=readings.expired
        )
        yield CounterMetricFamily(
            "semcache_evictions",
            "Entries removed by the size bound, least recently used first.",
            value=readings.evicted,
        )
        index = readings.index
        if index is not None:
            yield GaugeMetricFamily("semcache_index_entries", "Vectors in the FAISS index.", value=index.entries)
            yield GaugeMetricFamily(
                "semcache_index_tombstones",
                "Removed vectors an HNSW index still holds until its next rebuild.",
                value=index.tombstones,
            )
            yield GaugeMetricFamily(
                "semcache_index_partitions", "Index partitions (one per scope).", value=index.partitions
            )
            yield GaugeMetricFamily("semcache_index_rebuilding", "Index rebuilds running now.", value=index.rebuilding)
            yield CounterMetricFamily("semcache_index_rebuilds", "Index rebuilds finished.", value=index.rebuilds)
        if readings.breaker_state is not None:
            state = GaugeMetricFamily(
                "semcache_circuit_breaker_state",
                "1 for the state the upstream's circuit breaker is in, 0 for the others.",
                labels=["state"],
            )
            for name in CIRCUIT_STATES:
                state.add_metric([name], float(name == readings.breaker_state))
            yield state
            yield CounterMetricFamily(
                "semcache_circuit_breaker_opened", "Times the circuit breaker opened.", value=readings.breaker_opened
            )
            yield CounterMetricFamily(
                "semcache_upstream_retries", "Upstream attempts beyond the first.", value=readings.upstream_retries
            )
        if readings.quality:
            yield from _quality_metrics(readings.quality)


def _quality_metrics(quality: tuple[dict[str, Any], ...]) -> Iterable[Metric]:
    labels = ["namespace", "language"]
    line = GaugeMetricFamily(
        "semcache_decision_line", "The cosine a semantic hit needs now (learned or set).", labels=labels
    )
    estimated = GaugeMetricFamily(
        "semcache_estimated_wrong_hit_share",
        "Estimated share of semantic hits that are wrong, at the line.",
        labels=labels,
    )
    upper = GaugeMetricFamily(
        "semcache_estimated_wrong_hit_share_upper", "Upper confidence bound of that share.", labels=labels
    )
    evidence = CounterMetricFamily(
        "semcache_quality_labels", "Labels behind the estimate, by source.", labels=[*labels, "source"]
    )
    given_up = CounterMetricFamily(
        "semcache_hits_given_up",
        "Would-be hits at the configured threshold that the learned line held back.",
        labels=labels,
    )
    explored = CounterMetricFamily(
        "semcache_explored", "Would-be hits answered from the upstream to label them.", labels=labels
    )
    band_edge = GaugeMetricFamily(
        "semcache_verification_band_edge",
        "The lowest cosine a candidate is verified at (1.0: verification off).",
        labels=labels,
    )
    approvals = CounterMetricFamily(
        "semcache_verifier_approvals", "Approvals the verifier gave when asked.", labels=labels
    )
    approvals_counted = GaugeMetricFamily(
        "semcache_verifier_approvals_counted",
        "Of those approvals, the ones counted as labels now (all once audits vouch for the verifier, else none).",
        labels=labels,
    )
    audits = CounterMetricFamily(
        "semcache_verifier_audits", "Verified hits answered from the upstream and judged.", labels=[*labels, "outcome"]
    )
    audit_upper = GaugeMetricFamily(
        "semcache_verifier_wrong_share_upper",
        "Upper confidence bound of the audited wrong share of verified hits (1.0: too few audits).",
        labels=labels,
    )
    for item in quality:
        names = [str(item["namespace"]), str(item["language"])]
        verification = item.get("verification") or {}
        band_edge.add_metric(names, 1.0 if verification.get("mode") == "off" else verification.get("lower_edge", 1.0))
        approvals.add_metric(names, item["verdicts"])
        approvals_counted.add_metric(names, item["verdict_labels"])
        audits.add_metric([*names, "right"], item["verifier_audits"] - item["verifier_audits_wrong"])
        audits.add_metric([*names, "wrong"], item["verifier_audits_wrong"])
        audit_upper.add_metric(names, item["verifier_error_bound"])
        line.add_metric(names, item["decision_line"])
        estimated.add_metric(names, item["estimated_error"])
        upper.add_metric(names, item["interval"][1])
        for source, count in item["labels"].items():
            evidence.add_metric([*names, source], count)
        given_up.add_metric(names, item["hits_given_up"])
        explored.add_metric(names, item["explored"])
    yield from (line, estimated, upper, evidence, given_up, explored)
    yield from (band_edge, approvals, approvals_counted, audits, audit_upper)
