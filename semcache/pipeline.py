"""The request path: bypass policy, then exact, template and semantic lookup, then the upstream,
then storing the answer once it completed cleanly.

The pipeline speaks in plain dicts of the OpenAI wire format; framing them for HTTP (JSON or SSE)
is the server's job.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import random
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

import numpy as np

from .coalescing import Flight, InFlight
from .decision import guards
from .decision.budget import ErrorBudgets
from .decision.judges import AnswerJudge, JudgeCase
from .decision.quality import Decision, DecisionLog, NamespacePolicies
from .decision.standalone import reads_standalone
from .decision.verification import Verification
from .dialects import Dialect, HitReply
from .dialects.chat import CHAT
from .embedders import BatchingEmbedder, FollowUp
from .entries import CacheEntry, NegativeFeedback, PendingAccesses
from .errors import InvalidRequest, NotFound, SemcacheError, StoreUnavailable, UpstreamError, UpstreamUnavailable
from .feedback import ServedHit, ServedHits, WrongAnswers
from .index import ScopedVectorIndex
from .instructions import find_answer_instruction
from .keys import (
    RequestKey,
    bypass_reason,
    cache_api_key,
    consulted_tools,
    conversation_text,
    live_data_reason,
    message_text,
    request_key,
)
from .limits import fit_context
from .observer import NullObserver, Observer, timed
from .protocols import AnswerStore, Upstream
from .tiers import ExactTier, Hit, SemanticTier
from .tiers.semantic import Probe
from .tiers.template import LiveTemplates
from .tokens import PriceTable, TokenCounter
from .wire import ChatCompletionRequest

log = logging.getLogger("semcache.pipeline")
_T = TypeVar("_T")

# After a wrong semantic hit or a refuted probe at cosine s, the entry is served only from s + this margin.
_FEEDBACK_MARGIN = 0.005
# How many times a request may find its leader failed and try again (the last try leads).
_MAX_LEADS = 3
# A padded hit waits for hit_min_latency_ms times 1 to 1 + this: a spread, not a telltale spike.
_PADDING_JITTER = 0.2
# Texts longer than this are read (keys, guards, instructions about the answer, token counts
# toward a context limit) in a worker thread, so that the event loop never waits for them.
_INLINE_SCAN_CHARS = 4_000
# Token counts of more text than this (prompt and answer together) are taken in a worker thread.
_INLINE_COUNT_CHARS = 16_000
# Labels being judged at once; past this, a probe goes unlabelled rather than queue work.
_MAX_PENDING_LABELS = 64


@dataclass(frozen=True)
class RequestControls:
    """Per-request cache controls, from the ``Cache-Control`` and ``X-Semcache-TTL`` headers."""

    read_cache: bool = True  # False on ``no-cache``: skip lookup, still store the fresh answer
    store: bool = True  # False on ``no-store``
    ttl_s: float | None = None  # overrides the default TTL; 0 keeps the entry forever
    user: str | None = None  # who sent it, hashed (``keys.user_id``): the scope with scope_per_user
    account: str | None = None  # the upstream organization and project it named, hashed (``keys.account_id``)


@dataclass
class Lookup:
    """What the pipeline learned about a request before answering it."""

    request: ChatCompletionRequest
    namespace: str
    controls: RequestControls
    key: RequestKey | None  # None when the request bypasses the cache
    bypass_reason: str | None = None
    # The keys of the request's whole conversation, when ``key`` leaves its earlier turns out (a
    # follow-up that reads on its own). Its answer may be shaped by those turns, so it is stored
    # and shared in flight under these keys only, never where single-turn prompts find it.
    conversation_key: RequestKey | None = None
    hit: Hit | None = None
    vector: np.ndarray | None = None
    # Set when the answer came from another request's upstream call: "exact" or "semantic".
    coalesced_tier: Literal["exact", "semantic"] | None = None
    usage: dict[str, int] | None = None  # of a hit, counted once
    # The semantic candidate to label with this request's own upstream answer (semcache.decision.budget).
    probe: Probe | None = None
    # False for the cache API: no upstream answer of its own will come to compare an explored hit with.
    explore: bool = True
    route: str = "chat"  # or "completions", "responses", "cache_api": how /stats counts it
    # The client's API: where a miss goes upstream, and how answers are read and written back.
    dialect: Dialect = CHAT
    # The client's headers: the upstream backend picks the credentials it passes on.
    upstream_headers: Mapping[str, str] = field(default_factory=dict)

    @property
    def explored(self) -> bool:
        """A would-be hit answered from the upstream instead, to learn whether it was right."""
        return self.probe is not None and self.probe.source != "near_miss" and self.coalesced_tier is None

    @property
    def answer_key(self) -> RequestKey | None:
        """The keys this request's own upstream answer is stored and coalesced under."""
        return self.conversation_key or self.key

    @property
    def outcome(self) -> Literal["hit", "miss", "bypass"]:
        if self.key is None:
            return "bypass"
        return "hit" if self.hit is not None or self.coalesced_tier is not None else "miss"

    @property
    def tier(self) -> str | None:
        return self.coalesced_tier or (self.hit.tier if self.hit is not None else None)


@dataclass
class Pipeline:
    store: AnswerStore
    index: ScopedVectorIndex
    embedder: BatchingEmbedder
    upstream: Upstream
    templates: LiveTemplates  # swapped whole by a reload
    tokens: TokenCounter
    policies: NamespacePolicies
    default_ttl_s: float
    max_temperature: float
    # Puts candidates under the certified line to a model (None: never verify).
    verification: Verification | None = None
    # "standalone": a prompt that reads on its own and is far from its conversation may hit entries
    # from other conversations; "strict": earlier turns are always part of the scope.
    multi_turn: Literal["standalone", "strict"] = "standalone"
    standalone_max_context_similarity: float = 0.35
    context_limits: dict[str, int] = field(default_factory=dict)  # most prompt tokens per model
    trim_oldest_turns: bool = False
    cache_tool_calls: bool = False  # store answers that call tools; served on exact matches only
    cache_answer_instructions: bool = False  # cache prompts that tell the model what to answer
    coalesce: bool = True
    # False where each client's own key goes upstream: a stream is then followed live only by requests
    # sent with the leader's key. An answer that quotes the leader's key ends its stream, and must not
    # cut short a follower that sent another; a request that is not streamed retries on its own.
    streams_shared_across_keys: bool = True
    coalesce_wait_s: float = 30.0  # longest a semantic match waits for a similar request in flight
    max_answer_bytes: int = 1_000_000  # longest answer stored, in UTF-8 bytes; longer ones are only relayed
    prices: PriceTable = field(default_factory=PriceTable)  # to estimate the money hits saved
    # Where every event goes once: the app's FanOut of /stats and Prometheus.
    observer: Observer = field(default_factory=NullObserver)
    clock: Callable[[], float] = time.time
    decisions: DecisionLog = field(default_factory=DecisionLog)
    served: ServedHits = field(default_factory=ServedHits)
    inflight: InFlight = field(default_factory=InFlight)
    # Hits since the last flush, which the sweeper writes to the store in batches.
    accesses: PendingAccesses = field(default_factory=PendingAccesses)
    wrong_answers: WrongAnswers = field(default_factory=WrongAnswers)
    # The error budgets the semantic tier decides by, and the judge that labels their evidence
    # (None: no labels from answers; feedback still counts).
    budgets: ErrorBudgets = field(default_factory=ErrorBudgets)
    judge: AnswerJudge | None = None

    def __post_init__(self) -> None:
        self.exact = ExactTier(self.store, self.observer)
        self.semantic = SemanticTier(
            self.index, self.store, self.policies, self.verification, self.decisions.add, budgets=self.budgets,
            wrong_answers=self.wrong_answers, observer=self.observer,
            reads_whole=lambda key, text: self.embedder.router.reads_whole(self.embedding_model(key), text),
        )  # fmt: skip
        self._labelling: set[asyncio.Task[None]] = set()

    # -- lookup ------------------------------------------------------------------------------

    async def lookup(
        self,
        request: ChatCompletionRequest,
        namespace: str,
        controls: RequestControls,
        dialect: Dialect = CHAT,
        upstream_headers: Mapping[str, str] | None = None,
    ) -> Lookup:
        """The request's keys and the tiers' answer. A request of another API (``dialect``) comes as
        its chat-shaped view: its prompt the last user message, its answer-shaping fields in the view.
        ``upstream_headers``: the client's, for the calls made on its behalf (a miss, a verification)."""
        headers = upstream_headers or {}
        # Only chat's own request can be trimmed: another API's goes upstream as the client sent it.
        trim = self.trim_oldest_turns and dialect.api == "chat"
        fit = functools.partial(fit_context, request, self.tokens, self.context_limits.get(request.model), trim)
        request = await _off_loop_if_long(fit, _text_chars(request))
        reason = live_data_reason(request) or await self._bypass_reason(request)
        per_user = self.policies.for_namespace(namespace).scope_per_user
        user = controls.user if per_user else None
        if reason is None and per_user and user is None:
            reason = "scope_per_user is on and the request names no user (no API key, no user field)"
        if reason is not None:
            self.decisions.add(Decision(namespace, message_text(request.messages[-1]) or "", f"bypass: {reason}"))
            return Lookup(request, namespace, controls, key=None, bypass_reason=reason, route=dialect.api,
                          dialect=dialect, upstream_headers=headers)  # fmt: skip
        key, conversation_key, vector = await self._key(request, namespace, user, controls.account, dialect)
        lookup = Lookup(request, namespace, controls, key=key, conversation_key=conversation_key, vector=vector,
                        route=dialect.api, dialect=dialect, upstream_headers=headers)  # fmt: skip
        if controls.read_cache:
            lookup = await self._find_and_note(lookup)
        log.debug("lookup: %s", "hit" if lookup.hit else "no hit", extra={"namespace": namespace, "tier": lookup.tier})
        return lookup

    async def _find_and_note(self, lookup: Lookup) -> Lookup:
        """The tiers' answer, its hit noted for the sweeper; with the store away, a bypass (answer as
        a plain proxy, and store nothing, until it is back)."""
        try:
            lookup.hit = await self._find(lookup)
        except StoreUnavailable:
            return Lookup(lookup.request, lookup.namespace, lookup.controls, key=None,
                          bypass_reason="store_unavailable", route=lookup.route, dialect=lookup.dialect,
                          upstream_headers=lookup.upstream_headers)  # fmt: skip
        if lookup.hit is not None and lookup.hit.entry_id is not None:
            self.accesses.note(lookup.hit.entry_id, self.clock())
        return lookup

    async def _bypass_reason(self, request: ChatCompletionRequest) -> str | None:
        check = functools.partial(
            bypass_reason, request, self.max_temperature, cache_answer_instructions=self.cache_answer_instructions
        )
        return await _off_loop_if_long(check, len(message_text(request.messages[-1]) or ""))

    async def _key(
        self, request: ChatCompletionRequest, namespace: str, user: str | None, account: str | None, dialect: Dialect
    ) -> tuple[RequestKey, RequestKey | None, np.ndarray | None]:
        """The keys to look the request up with, the conversation's keys when they differ, and the
        prompt's vector when it was embedded on the way.

        A follow-up that stands on its own is looked up without its conversation, so that it may be
        answered from single-turn entries. Not when its conversation tells the model what to answer
        ("From now on, reply with ..."): the answer then depends on those turns. Its own answer is
        always kept with its conversation (``Lookup.conversation_key``). Nor when earlier turns
        called tools: their results shape the answer."""
        api, detail = dialect.api, dialect.key_detail
        chars = _text_chars(request)
        keyed = functools.partial(request_key, request, namespace, user=user, account=account, api=api,
                                  api_detail=detail)  # fmt: skip
        key = await _off_loop_if_long(keyed, chars)
        if not key.has_history or self.multi_turn == "strict":
            return key, None, None
        if not await _off_loop_if_long(functools.partial(reads_standalone, key.prompt), len(key.prompt)):
            return key, None, None
        if consulted_tools(request):
            return key, None, None
        conversation = conversation_text(request)
        if not self.cache_answer_instructions:
            instruction = await _off_loop_if_long(lambda: find_answer_instruction(conversation), len(conversation))
            if instruction is not None:
                return key, None, None
        model = self.embedding_model(key)  # the conversation too: cosines across models mean nothing
        prompt_vector, context_vector = await asyncio.gather(
            self.embedder.embed(key.prompt, model), self.embedder.embed(conversation, model)
        )
        if float(prompt_vector @ context_vector) >= self.standalone_max_context_similarity:
            return key, None, prompt_vector  # on the conversation's topic: its context may shape the answer
        standalone = await _off_loop_if_long(functools.partial(keyed, standalone=True), chars)
        return standalone, key, prompt_vector

    async def _find(self, lookup: Lookup) -> Hit | None:
        assert lookup.key is not None
        now = self.clock()
        self.budgets.note_request(lookup.key.namespace)  # what the namespace may spend on exploring grows
        if lookup.conversation_key is not None:  # this conversation asked it before
            hit = await self.exact.lookup(lookup.conversation_key, now)
            if hit is not None:
                return hit
        hit = await self.exact.lookup(lookup.key, now)
        if hit is not None and self._reask(lookup, hit):
            return None
        hit = hit or self.templates.tier.lookup_exact(lookup.key, self._fits(lookup.key))
        if hit is not None or not lookup.dialect.semantic:
            return hit
        candidates = None
        if lookup.vector is None:  # one trip to the embedding thread: the vector, and the index search
            scope = lookup.key.scope
            search = FollowUp(("candidates", scope), functools.partial(self.semantic.candidates_many, scope))
            lookup.vector, candidates = await self.embedder.embed_then(
                lookup.key.prompt, self.embedding_model(lookup.key), search
            )
        match = functools.partial(self._template_match, lookup.key, lookup.vector)
        template = await _off_loop_if_long(match, len(lookup.key.prompt))
        if template is not None:
            return template
        result = await self.semantic.lookup(lookup.key, lookup.vector, now, candidates, explore=lookup.explore,
                                            headers=lookup.upstream_headers)  # fmt: skip
        lookup.probe = result.probe
        return result.hit

    def _reask(self, lookup: Lookup, hit: Hit) -> bool:
        """Whether to answer this exact hit from the upstream instead, so that the judge sees how
        two answers to one question read: a few, while the judge wants them, and once its labels
        count in a namespace that learns."""
        key = lookup.key
        assert key is not None
        if self.judge is None or not lookup.explore or hit.entry_id is None or hit.tool_calls is not None:
            return False
        if not self.semantic.rule(key.namespace, key.language).learn:
            return False
        if not self.budgets.labelled(key.namespace, key.language):
            return False
        if not self.judge.wants_reasked(key.namespace, self.embedding_model(key)):
            return False
        if not self.budgets.spend_exploration(key.namespace):
            return False
        lookup.probe = Probe(hit.entry_id, 1.0, hit.matched_prompt, hit.answer, "reasked")
        self.decisions.add(Decision(key.namespace, key.prompt, "explored: an exact hit, answered from the upstream "
                                    "to see how two answers to one question read", candidate=hit.matched_prompt,
                                    similarity=1.0, entry_id=hit.entry_id, language=key.language,
                                    explored=True))  # fmt: skip
        return True

    def embedding_model(self, key: RequestKey) -> str:
        """The model for this request's namespace and script."""
        return self.embedder.router.model_for(key.namespace, key.language)

    def _template_match(self, key: RequestKey, vector: np.ndarray) -> Hit | None:
        """Templates' phrasings are embedded by every model; the request's model's are compared. A
        script with its own threshold never matches below it: its model's cosines run higher. The
        namespace's guards veto a phrasing as they veto a stored prompt."""
        templates = self.templates.tier
        threshold = templates.threshold
        if key.language in (policy := self.policies.for_namespace(key.namespace)).thresholds:
            threshold = max(threshold, policy.threshold_for(key.language))

        def passes_guards(question: str) -> bool:
            return all(result.passed for result in guards.check(key.prompt, question, policy.guards))

        return templates.lookup_semantic(
            key, vector, self.embedding_model(key), threshold, passes_guards, self._fits(key)
        )

    def _fits(self, key: RequestKey) -> Callable[[str], bool] | None:
        """Whether a template's answer fits the request's token limit (None: it set none). The
        upstream would cut a longer answer short: the whole one is not what the client asked for."""
        limit = key.max_answer_tokens
        if limit is None:
            return None
        return lambda answer: self.tokens.count_text(answer, key.model) <= limit

    # -- the cache API: applications that call their model themselves -------------------------

    async def lookup_prompt(
        self,
        prompt: str,
        namespace: str,
        scope: dict[str, Any],
        user: str | None,
        upstream_headers: Mapping[str, str] | None = None,
    ) -> Lookup:
        """``/v1/semcache/lookup``: the prompt through the same tiers, guards, decision line and
        verification as a chat request, keyed by the application's ``scope``; a hit gets an id that
        feedback takes. ``upstream_headers``: the client's, for a verification."""
        lookup = self._cache_api_lookup(prompt, namespace, scope, user, RequestControls())
        lookup.upstream_headers = upstream_headers or {}
        reason = await self._bypass_reason(lookup.request)
        if reason is not None:  # as for chat: nothing is served to a prompt that dictates its answer
            self.decisions.add(Decision(namespace, prompt, f"bypass: {reason}"))
            lookup.key, lookup.bypass_reason = None, reason
        else:
            lookup = await self._find_and_note(lookup)
        await self.record(lookup)
        return lookup

    async def store_prompt(
        self, prompt: str, answer: str, namespace: str, scope: dict[str, Any], user: str | None, ttl_s: float | None
    ) -> int:
        """``/v1/semcache/store``: store the application's answer; returns the entry's id."""
        if len(answer.encode()) > self.max_answer_bytes:
            raise InvalidRequest(
                f"answer: at most {self.max_answer_bytes} bytes of UTF-8 (max_answer_bytes)", code="answer_too_large"
            )
        lookup = self._cache_api_lookup(prompt, namespace, scope, user, RequestControls(ttl_s=ttl_s))
        # One user message of text, never blank (the route checks): only an instruction about the
        # answer can make it bypass, whose answer would reach the same question asked plainly.
        reason = await self._bypass_reason(lookup.request)
        if reason is not None:
            raise InvalidRequest(f"not stored: {reason}", code="answer_instruction")
        return await self._store_and_index(lookup, answer, None)

    def _cache_api_lookup(
        self, prompt: str, namespace: str, scope: dict[str, Any], user: str | None, controls: RequestControls
    ) -> Lookup:
        # The request stands for the prompt in token counts and prices: one user message, the scope's model.
        key = cache_api_key(namespace, prompt, scope, user=user)
        request = ChatCompletionRequest.model_validate(
            {"model": key.model, "messages": [{"role": "user", "content": prompt}]}
        )
        return Lookup(request, namespace, controls, key=key, explore=False, route="cache_api")

    async def record(self, lookup: Lookup) -> None:
        self.observer.request(lookup.namespace, lookup.outcome, lookup.tier, lookup.route)
        if lookup.hit is not None:
            self._record_saved(lookup, await self._usage(lookup))
        # Relayed answers of another request's upstream call are counted once they are known.

    def record_error(self, namespace: str, route: str = "chat") -> None:
        self.observer.request(namespace, "error", None, route)

    def _record_saved(self, lookup: Lookup, usage: dict[str, int]) -> None:
        """An answer that needed no upstream call: count the tokens it would have cost, and their price."""
        prompt, completion = usage["prompt_tokens"], usage["completion_tokens"]
        cost = self.prices.cost_usd(lookup.request.model, prompt, completion)
        self.observer.saved(lookup.namespace, prompt, completion, cost)

    # -- hits --------------------------------------------------------------------------------

    async def pad_hit(self, lookup: Lookup, arrived: float) -> None:
        """Hold a hit until the namespace's ``hit_min_latency_ms`` (plus jitter) has passed since
        ``arrived`` (a ``time.perf_counter()`` reading), so that its speed does not give it away."""
        floor_ms = self.policies.for_namespace(lookup.namespace).hit_min_latency_ms
        if lookup.outcome != "hit" or floor_ms <= 0:
            return
        target_s = floor_ms / 1000 * (1 + random.uniform(0, _PADDING_JITTER))
        remaining_s = target_s - (time.perf_counter() - arrived)
        if remaining_s > 0:
            await asyncio.sleep(remaining_s)

    async def hit_response(self, lookup: Lookup) -> dict[str, Any]:
        return lookup.dialect.hit_response(await self._hit_reply(lookup))

    async def hit_stream(self, lookup: Lookup) -> AsyncIterator[dict[str, Any]]:
        reply = await self._hit_reply(lookup)
        async for event in lookup.dialect.hit_events(reply, lookup.request.include_usage_in_stream()):
            yield event

    async def _hit_reply(self, lookup: Lookup) -> HitReply:
        assert lookup.hit is not None
        return HitReply(response_id=self.served_id(lookup), model=lookup.request.model, answer=lookup.hit.answer,
                        usage=await self._usage(lookup), tool_calls=lookup.hit.tool_calls)  # fmt: skip

    def served_id(self, lookup: Lookup) -> str:
        """A fresh response id, remembered so that the client can report the hit as wrong
        (``POST /v1/semcache/feedback``)."""
        assert lookup.hit is not None and lookup.key is not None
        response_id = lookup.dialect.new_id()
        hit = lookup.hit
        self.served.remember(
            response_id,
            ServedHit(
                lookup.namespace,
                hit.tier,
                hit.entry_id,
                lookup.key.exact,
                query=lookup.key.prompt if hit.tier != "exact" else None,
                embedding_model=self.embedding_model(lookup.key) if hit.tier != "exact" else None,
                similarity=hit.similarity,
                language=lookup.key.language,
            ),
        )
        return response_id

    # -- feedback ----------------------------------------------------------------------------

    async def feedback(self, response_id: str, namespace: str, correct: bool) -> ServedHit:
        """Record a client's verdict on a served hit. A wrong exact hit drops its entry; a wrong
        semantic hit is never served for that query again, and the entry's threshold rises above
        the similarity it was served at."""
        served = self.served.take(response_id, namespace)
        if served is None:
            raise NotFound(f"no cache hit with id {response_id!r} in this namespace, or feedback was already given")
        self.observer.feedback(namespace, correct)
        if served.tier == "semantic" and served.similarity is not None and served.language is not None:
            self.budgets.label(namespace, served.language, served.similarity, correct, "feedback")
        if correct or served.entry_id is None:
            return served
        if served.tier == "exact":
            removed = await self.store.delete([served.entry_id])
            await asyncio.to_thread(self.index.remove, [r.id for r in removed])
        else:
            vector = None if served.query is None else await self.embedder.embed(served.query, served.embedding_model)
            negative = NegativeFeedback(served.entry_id, served.query_key, vector, served.similarity)
            raised = None if served.similarity is None else min(1.0, served.similarity + _FEEDBACK_MARGIN)
            await self.store.add_negative_feedback(negative, raised)
            self.wrong_answers.add(negative)
        return served

    async def _usage(self, lookup: Lookup) -> dict[str, int]:
        """The hit's token counts, counted once: its response and the savings both need them."""
        if lookup.usage is None:
            assert lookup.hit is not None
            lookup.usage = await self._count_tokens(lookup, lookup.hit.answer)
        return lookup.usage

    async def _count_tokens(self, lookup: Lookup, answer: str) -> dict[str, int]:
        """Prompt and answer tokens; a long text's in a worker thread (tiktoken lets go of the GIL)."""
        count = functools.partial(lookup.dialect.usage, self.tokens, lookup.request, answer)
        if len(answer) + lookup.request.content_chars() > _INLINE_COUNT_CHARS:
            return await asyncio.to_thread(count)
        return count()

    # -- misses ------------------------------------------------------------------------------

    async def forward(self, lookup: Lookup, headers: dict[str, str]) -> dict[str, Any]:
        """A non-streamed miss: follow an identical request in flight, or lead one upstream call.
        An explored would-be hit whose upstream call fails is served its cached answer after all."""
        explored = lookup.explored
        try:
            return await self._forward(lookup, headers)
        except UpstreamError:
            if not explored:
                raise
            self._serve_probe(lookup)
            return await self.hit_response(lookup)

    def _serve_probe(self, lookup: Lookup) -> None:
        """Make the explored candidate the lookup's hit: what it would have been unexplored."""
        probe = lookup.probe
        assert probe is not None
        if probe.source == "reasked":
            lookup.hit = Hit(tier="exact", answer=probe.answer, matched_prompt=probe.prompt, entry_id=probe.entry_id)
        else:
            lookup.hit = Hit(tier="semantic", answer=probe.answer, matched_prompt=probe.prompt,
                             entry_id=probe.entry_id, similarity=min(probe.similarity, 1.0),
                             verified=probe.source == "audit")  # fmt: skip
        lookup.probe = None
        log.info("the upstream failed for an explored request; served its cached answer")

    async def _forward(self, lookup: Lookup, headers: dict[str, str]) -> dict[str, Any]:
        semantic_tried = False
        for _ in range(_MAX_LEADS):
            key = lookup.answer_key
            if key is None or not self.coalesce:
                return await self._lead(lookup, headers, None)
            flight = self.inflight.get(key.exact)
            if flight is not None:
                try:
                    done = await asyncio.wait_for(flight.result(), self.coalesce_wait_s)
                except (SemcacheError, TimeoutError):
                    continue  # the leader failed or stalled: try again, perhaps as the leader
                followed = await self._followed_response(lookup, done)
                if followed is not None:
                    return followed
            if not semantic_tried:
                semantic_tried = True
                if await self._wait_for_similar(lookup):
                    return await self.hit_response(lookup)
            flight = self.inflight.lead(key, lookup.vector, streamed=False)
            try:
                return await self._lead(lookup, headers, flight)
            finally:
                self.inflight.land(flight)
        return await self._lead(lookup, headers, None)

    async def forward_stream(self, lookup: Lookup, headers: dict[str, str]) -> AsyncIterator[dict[str, Any]]:
        """A streamed miss: relay an identical request's stream as it arrives, or lead one.

        The leader passes the upstream's chunks through as they come and stores the answer after a
        clean finish. If its client goes away, this generator is closed: the upstream call is
        cancelled, nothing is stored, and its followers try again themselves. An explored would-be
        hit whose upstream call fails before its first chunk is served its cached answer after all.
        """
        explored, relayed = lookup.explored, False
        try:
            async for chunk in self._forward_stream(lookup, headers):
                relayed = True
                yield chunk
        except UpstreamError:
            if not explored or relayed:
                raise  # or bytes are out: the client sees the failure
            self._serve_probe(lookup)
            async for chunk in self.hit_stream(lookup):
                yield chunk

    async def _forward_stream(self, lookup: Lookup, headers: dict[str, str]) -> AsyncIterator[dict[str, Any]]:
        semantic_tried = False
        credential = None if self.streams_shared_across_keys else headers.get("authorization", "")
        for _ in range(_MAX_LEADS):
            key = lookup.answer_key
            flight = self.inflight.get(key.exact) if key is not None and self.coalesce else None
            if (
                key is None
                or not self.coalesce
                or (flight is not None and self._led_with_another_key(lookup, flight, credential))
            ):
                async for chunk in self._lead_stream(lookup, headers, None):
                    yield chunk
                return
            if flight is not None:
                relayed = 0
                try:
                    async for chunk in self._follow_stream(lookup, flight):
                        relayed += 1
                        yield chunk
                    if relayed:
                        return
                except SemcacheError:
                    if relayed:
                        raise  # bytes are out: the client sees the leader's failure
                lookup.coalesced_tier, lookup.hit = None, None
                continue
            if not semantic_tried:
                semantic_tried = True
                if await self._wait_for_similar(lookup):
                    async for chunk in self.hit_stream(lookup):
                        yield chunk
                    return
            flight = self.inflight.lead(key, lookup.vector, streamed=True, credential=credential)
            try:
                async for chunk in self._lead_stream(lookup, headers, flight):
                    yield chunk
            finally:
                self.inflight.land(flight)
            return
        raise UpstreamUnavailable("the upstream failed for every request sharing this answer")

    def _led_with_another_key(self, lookup: Lookup, flight: Flight, credential: str | None) -> bool:
        """Whether ``flight`` is a stream that this request would follow live, led with another key
        where streams are shared only among requests sent with one (``streams_shared_across_keys``)."""
        live = flight.streamed and lookup.dialect.shares_upstream_response
        return live and flight.credential != credential

    async def _lead(self, lookup: Lookup, headers: dict[str, str], flight: Flight | None) -> dict[str, Any]:
        dialect = lookup.dialect
        body = {**dialect.upstream_body(lookup.request), "stream": False}
        try:
            started = time.perf_counter()
            response = await self.upstream.complete(body, headers, api=dialect.api)
            self.observer.stage("upstream_total", time.perf_counter() - started)
            answer = dialect.clean_answer(response, self.max_answer_bytes)
            if answer is not None:
                await self._store(lookup, answer)
            elif self.cache_tool_calls and (calls := dialect.tool_call_answer(response, self.max_answer_bytes)):
                await self._store(lookup, calls[0], tool_calls=calls[1])
            if flight is not None:
                await flight.finish(response=response, text=answer or "", cacheable=answer is not None)
        except BaseException as exc:
            if flight is not None and not flight.done:
                await flight.fail(_as_upstream_error(exc))
            raise
        return response

    async def _lead_stream(
        self, lookup: Lookup, headers: dict[str, str], flight: Flight | None
    ) -> AsyncIterator[dict[str, Any]]:
        dialect = lookup.dialect
        answer = dialect.streamed_answer(self.max_answer_bytes)
        started, first = time.perf_counter(), True
        try:
            async for chunk in self.upstream.stream(dialect.upstream_body(lookup.request), headers, api=dialect.api):
                if first:
                    self.observer.stage("upstream_first_byte", time.perf_counter() - started)
                    first = False
                answer.add(chunk)
                if flight is not None:
                    if answer.too_large and flight.sharing:
                        flight.stop_sharing()  # never held whole: only its followers' unread chunks are kept
                    await flight.publish(chunk)
                yield chunk
            self.observer.stage("upstream_total", time.perf_counter() - started)
            if answer.cacheable():
                await self._store(lookup, answer.text())
            elif self.cache_tool_calls and (calls := answer.tool_call_answer()) is not None:
                await self._store(lookup, answer.text(), tool_calls=calls)
            if flight is not None:
                await flight.finish(response=None, text=answer.text(), cacheable=answer.cacheable())
        except BaseException as exc:
            if flight is not None and not flight.done:
                await flight.fail(_as_upstream_error(exc))
            raise

    async def _follow_stream(self, lookup: Lookup, flight: Flight) -> AsyncIterator[dict[str, Any]]:
        """The leader's answer as a stream; yields nothing when it cannot be shared in this mode."""
        if flight.streamed and lookup.dialect.shares_upstream_response:
            async for chunk in flight.follow():
                if lookup.coalesced_tier is None:
                    self._mark_followed(lookup, flight)
                yield chunk
            if lookup.coalesced_tier is not None:
                self._record_saved(lookup, await self._count_tokens(lookup, flight.text))
            return
        done = await asyncio.wait_for(flight.result(), self.coalesce_wait_s)
        if not done.cacheable:
            return  # tool calls or a cut answer: only the same mode may share it verbatim
        self._mark_followed(lookup, flight)
        lookup.hit = Hit(tier="exact", answer=done.text, matched_prompt=flight.key.prompt)
        async for chunk in self.hit_stream(lookup):
            yield chunk

    async def _followed_response(self, lookup: Lookup, flight: Flight) -> dict[str, Any] | None:
        """The leader's answer as one response, or None when it cannot be shared in this mode."""
        if flight.response is not None and lookup.dialect.shares_upstream_response:
            self._mark_followed(lookup, flight)
            self._record_saved(lookup, await self._count_tokens(lookup, flight.text))
            return flight.response
        if not flight.cacheable:
            return None
        self._mark_followed(lookup, flight)
        lookup.hit = Hit(tier="exact", answer=flight.text, matched_prompt=flight.key.prompt)
        return await self.hit_response(lookup)

    def _mark_followed(self, lookup: Lookup, flight: Flight) -> None:
        lookup.coalesced_tier = "exact"
        flight.followers += 1
        self.observer.coalesced()

    async def _wait_for_similar(self, lookup: Lookup) -> bool:
        """Wait for an in-flight request that a semantic hit could be served from; True if served."""
        if lookup.key is None or lookup.vector is None or not lookup.controls.read_cache or lookup.explored:
            return False
        if not lookup.dialect.semantic:
            return False
        nearest = self.inflight.nearest(lookup.key, lookup.vector)
        if nearest is None:
            return False
        flight, similarity = nearest
        verdict = await self.semantic.accepts_in_flight(lookup.key, lookup.vector, flight.key.prompt, similarity)
        if verdict.action == "no":
            return False
        try:
            done = await asyncio.wait_for(flight.result(), self.coalesce_wait_s)
        except (SemcacheError, TimeoutError):
            return False
        if not done.cacheable:
            return False
        verified = verdict.action == "verify"
        if verified and not await self.semantic.verify_in_flight(
            lookup.key, flight.key.prompt, done.text, similarity, verdict, lookup.upstream_headers
        ):
            return False
        lookup.hit = Hit(tier="semantic", answer=done.text, matched_prompt=flight.key.prompt, similarity=similarity,
                         verified=verified)  # fmt: skip
        lookup.coalesced_tier = "semantic"
        flight.followers += 1
        self.observer.coalesced()
        return True

    async def _store(self, lookup: Lookup, answer: str, tool_calls: list[dict[str, Any]] | None = None) -> None:
        """Store and index the answer, then set its label's judging going.

        The judging starts after the write because its embedding competes with the write for the
        CPU, and the response waits for the write but not for the judging."""
        try:
            await self._store_answer(lookup, answer, tool_calls)
        finally:
            if tool_calls is None:
                self._label_probe(lookup, answer)

    async def _store_answer(self, lookup: Lookup, answer: str, tool_calls: list[dict[str, Any]] | None) -> None:
        """Store and index the answer as one job that a client going away cannot cut in half.

        A failure to store is logged, not passed on: the client still gets its answer."""
        if lookup.answer_key is None or not lookup.controls.store:
            return
        job = asyncio.ensure_future(self._store_and_index(lookup, answer, tool_calls))
        try:
            await asyncio.shield(job)
        except asyncio.CancelledError:
            raise  # the job goes on; the sweep and restarts see a consistent store either way
        except StoreUnavailable as exc:
            log.warning("an answer was served but not cached: %s", exc.message)
        except Exception:
            log.exception("could not store an answer; it was served but not cached")

    def _label_probe(self, lookup: Lookup, answer: str) -> None:
        """Judge, off the request's path, whether the probed candidate's answer would have done; with
        no candidate, show the judge the answer (how this namespace's answers read)."""
        probe, key, vector = lookup.probe, lookup.key, lookup.vector
        if key is None or self.judge is None or lookup.coalesced_tier is not None:
            return
        if len(self._labelling) >= _MAX_PENDING_LABELS:
            return
        model = self.embedding_model(key)
        if probe is not None and probe.source == "reasked":  # an exact hit: no vector, none needed
            work = self._observe_reasked(key.namespace, model, probe.answer, answer)
        elif vector is None:
            return
        elif probe is None:
            if not lookup.controls.store or not self.semantic.rule(key.namespace, key.language).learn:
                return  # labels only teach a line that learns; an answer not kept is not read either
            if len(self._labelling) >= _MAX_PENDING_LABELS // 2:
                return  # leave room for the labels themselves
            work = self._observe(key.namespace, model, vector, answer)
        else:
            case = JudgeCase(question=key.prompt, fresh_answer=answer, cached_question=probe.prompt,
                             cached_answer=probe.answer, embedding_model=model, model=lookup.request.model,
                             namespace=key.namespace, question_vector=vector)  # fmt: skip
            work = self._judge(key.namespace, key.language, probe, case)
        task = asyncio.ensure_future(work)
        self._labelling.add(task)
        task.add_done_callback(self._labelling.discard)

    async def _observe(self, namespace: str, model: str, vector: np.ndarray, answer: str) -> None:
        assert self.judge is not None
        try:
            await self.judge.observe(namespace, model, vector, answer)
        except Exception:
            log.exception("the judge could not read an answer")

    async def _observe_reasked(self, namespace: str, model: str, first: str, second: str) -> None:
        assert self.judge is not None
        try:
            await self.judge.observe_reasked(namespace, model, first, second)
        except Exception:
            log.exception("the judge could not read two answers to one question")

    async def _judge(self, namespace: str, language: str, probe: Probe, case: JudgeCase) -> None:
        assert self.judge is not None
        try:
            same = await self.judge.same_answer(case)
        except Exception:
            log.exception("could not judge an answer; no label")
            return
        if same is None:
            return
        if probe.source == "audit":  # the verifier's label: it weighs the approvals, not the line's labels
            # A verified hit is a right answer reworded, or a wrong one: "different" counts against
            # the verifier only from a judge that knows how this namespace's rewordings read.
            knows = self.judge.knows_same_answers(namespace, case.embedding_model)
            self.semantic.audited(namespace, language, probe.similarity, same, judge_knows=knows)
            if not same and not knows:
                return
        if not same:
            # The entry's own boundary: its answer was wrong this close, so it needs more.
            try:
                await self.store.raise_min_similarity(probe.entry_id, min(1.0, probe.similarity + _FEEDBACK_MARGIN))
            except StoreUnavailable as exc:
                log.warning("could not raise a refuted entry's threshold: %s", exc.message)
        if probe.source in ("near_miss", "explored"):
            self.budgets.label(namespace, language, probe.similarity, same, probe.source)

    async def labels_settled(self) -> None:
        """Wait for the labels being judged (for replays and tests)."""
        while self._labelling:
            await asyncio.gather(*self._labelling, return_exceptions=True)

    def close_labelling(self) -> None:
        for task in self._labelling:
            task.cancel()

    async def _store_and_index(self, lookup: Lookup, answer: str, tool_calls: list[dict[str, Any]] | None) -> int:
        key = lookup.answer_key
        assert key is not None
        if lookup.vector is not None:
            vector = lookup.vector
        else:
            vector = await self.embedder.embed(key.prompt, self.embedding_model(key))
        now = self.clock()
        ttl = lookup.controls.ttl_s if lookup.controls.ttl_s is not None else self.default_ttl_s
        entry = CacheEntry(
            namespace=key.namespace,
            scope=key.scope,
            exact_key=key.exact,
            model=key.model,
            prompt=key.prompt,
            answer=answer,
            created_at=now,
            expires_at=now + ttl if ttl > 0 else None,
            vector=vector,
            last_access=now,
            tool_calls=tool_calls,
        )
        with timed(self.observer, "store_write"):
            entry_id, replaced = await self.store.put(entry)
        await asyncio.to_thread(self._index_entry, key.scope, entry_id, vector, [r.id for r in replaced])
        return entry_id

    def _index_entry(self, scope: str, entry_id: int, vector: np.ndarray, replaced: list[int]) -> None:
        if replaced:
            self.index.remove(replaced)
        self.index.add(scope, np.array([entry_id]), vector.reshape(1, -1))


async def _off_loop_if_long(check: Callable[[], _T], text_chars: int) -> _T:
    """``check()``, in a worker thread when the text it reads is long."""
    if text_chars > _INLINE_SCAN_CHARS:
        return await asyncio.to_thread(check)
    return check()


def _text_chars(request: ChatCompletionRequest) -> int:
    """About how much text reading the whole request means: its messages' text, and their other
    fields (the tool calls of earlier turns) as long text, unread. Tools' definitions are only
    serialised, in one call that a thread would not take off the loop."""
    with_fields = sum(1 for message in request.messages if message.model_extra)
    return request.content_chars() + with_fields * _INLINE_SCAN_CHARS


def _as_upstream_error(exc: BaseException) -> SemcacheError:
    if isinstance(exc, SemcacheError):
        return exc
    return UpstreamUnavailable("the request leading this answer ended before it finished")
