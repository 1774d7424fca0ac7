"""A Hugging Face causal language model on this machine, behind the ``Upstream`` protocol.

How a request travels:

1. On the event loop, the body is checked (``InvalidRequest`` for what this backend cannot do), then
   the messages are rendered with the tokenizer's chat template (or a plain ``role: content``
   transcript) and tokenised in a worker thread. A prompt that does not fit the model's context is
   refused here, before anything is queued.
2. A scheduler task collects requests for ``batch_window_ms`` after the first one arrives, up to
   ``max_batch_size``. A batch holds requests whose longest prompt plus largest ``max_tokens`` fits
   the context; the others wait for the next batch, in arrival order.
3. One dedicated thread runs ``model.generate`` for the batch, prompts padded on the left and masked.
   The batch runs for as many steps as its greediest member asked for. Greedy and sampled requests
   share a batch: when any member samples, a logits processor applies each row's own temperature
   and top_p, and leaves a greedy row (temperature 0) only its likeliest token, so the draw is the
   argmax. Only OpenAI's ``temperature`` and ``top_p`` shape sampling: the checkpoint's own sampling
   defaults (top_k, typical_p, its temperature) are switched off; its other logits processors
   (a repetition penalty, say) apply to every request.
4. Once per step, ``generate`` hands the whole batch's new tokens to a ``_BatchDispatcher`` (passed as a
   stopping criterion). For each row it decodes the new text, holds back what could be the start of
   a stop string, and posts the increment to that request's own asyncio queue with
   ``loop.call_soon_threadsafe``. It also tells ``generate`` which rows are done (their own
   ``max_tokens``, EOS, a stop string, or a client that went away), so ``generate`` ends as soon as
   every row is.

A stopping criterion rather than a ``BaseStreamer`` does the dispatching because the decision that a
row is done has to be taken in the same step as its token arrives, and ``generate`` calls the
criteria exactly once per step with the whole batch; when it calls a streamer, relative to that
check, differs between transformers versions (and is one step late on Apple GPUs).

Cancellation: when a client closes its stream (or the task awaiting ``complete()`` is cancelled),
its request is flagged. A request still queued is dropped before it reaches the model. A request
already in a running batch stops receiving at the next step, and its row counts as done; the rest
of the batch carries on undisturbed. A batch whose members have all gone stops at the next step.

The instance binds itself to the event loop of its first request.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections import deque
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from contextvars import Context
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from ..errors import InvalidRequest, NotFound, UpstreamError, UpstreamUnavailable
from ..protocols import Relayed, RelayRequest, UpstreamApi
from ..wire import chat_chunk, chat_completion, completion_id, usage_chunk

if TYPE_CHECKING:
    from collections.abc import AsyncGenerator

    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

FinishReason = Literal["stop", "length"]

# OpenAI accepts at most this many stop strings.
_MAX_STOP_STRINGS = 4


@dataclass(frozen=True)
class _Text:
    text: str


@dataclass(frozen=True)
class _Finish:
    reason: FinishReason
    completion_tokens: int


@dataclass(frozen=True)
class _Failed:
    cause: BaseException | None  # None: the upstream was closed under the request


_Event = _Text | _Finish | _Failed


@dataclass(frozen=True)
class _Params:
    """What a request body asks of the model, checked."""

    messages: list[dict[str, str]]
    max_new_tokens: int | None  # None: the backend's default, capped to what the context leaves
    temperature: float  # 0: greedy
    top_p: float
    stop: tuple[str, ...]
    include_usage: bool


@dataclass(eq=False)
class _Request:
    prompt_ids: list[int]
    max_new_tokens: int
    temperature: float  # 0: greedy
    top_p: float
    stop: tuple[str, ...]
    loop: asyncio.AbstractEventLoop
    events: asyncio.Queue[_Event]
    cancelled: bool = False  # set on the event loop, read by the generate thread

    def post(self, event: _Event) -> bool:
        """Hand ``event`` to the waiting client, from any thread. False when its loop has gone."""
        try:
            self.loop.call_soon_threadsafe(self.events.put_nowait, event)
        except RuntimeError:  # the event loop is closed; nobody is listening any more
            return False
        return True


class LocalUpstream:
    """A causal LM from a local folder (transformers format), with dynamic batching and streaming.

    Construction loads the model and blocks for as long as that takes; build it in a worker thread
    (``await asyncio.to_thread(LocalUpstream, path)``) from the app's lifespan. Loading is offline:
    nothing is ever downloaded. Raises ``OSError`` when the folder is missing or incomplete.

    ``generate_calls`` counts the model's ``generate`` calls, each of which serves one batch.
    """

    def __init__(
        self,
        model_path: str | Path,
        *,
        max_batch_size: int = 8,
        batch_window_ms: float = 10,
        max_new_tokens_default: int = 256,
        device: str | None = None,
    ) -> None:
        if max_batch_size < 1:
            raise ValueError("max_batch_size must be at least 1")
        if batch_window_ms < 0:
            raise ValueError("batch_window_ms cannot be negative")
        if max_new_tokens_default < 1:
            raise ValueError("max_new_tokens_default must be at least 1")
        path = Path(model_path).expanduser()
        if not path.is_dir():
            raise FileNotFoundError(f"no model folder at {path}; the local upstream loads models offline only")
        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach for the hub at run time
        import torch  # heavy imports, kept off module import
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.model_name = path.name
        self.tokenizer: PreTrainedTokenizerBase = AutoTokenizer.from_pretrained(path, local_files_only=True)
        # On a GPU keep the checkpoint's own precision; on a CPU half precision is slow or unsupported.
        dtype: Any = "auto" if self.device.startswith("cuda") else torch.float32
        model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True, dtype=dtype)
        # transformers wraps ``to`` with ``functools.wraps(torch.nn.Module.to)``, which confuses mypy about ``self``.
        self.model: PreTrainedModel = model.to(self.device).eval()  # type: ignore[arg-type]

        self.max_batch_size = max_batch_size
        self.batch_window_s = batch_window_ms / 1000
        self.max_new_tokens_default = max_new_tokens_default
        self.context_tokens = _context_tokens(self.model, self.tokenizer)
        self.eos_token_ids = _eos_token_ids(self.model, self.tokenizer)
        pad = self.tokenizer.pad_token_id
        if pad is None:
            pad = self.eos_token_ids[0] if self.eos_token_ids else 0
        self.pad_token_id: int = int(pad)
        self.generate_calls = 0

        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="semcache-local-generate")
        self._arrivals: asyncio.Queue[_Request] | None = None
        self._waiting: deque[_Request] = deque()
        self._running: list[_Request] = []
        self._scheduler: asyncio.Task[None] | None = None
        self._closed = False

    # ------------------------------------------------------------------ the Upstream protocol

    async def complete(
        self, body: dict[str, Any], headers: dict[str, str], api: UpstreamApi = "chat"
    ) -> dict[str, Any]:
        _chat_only(api)
        params = _parse(body)
        request = await self._submit(params)
        parts: list[str] = []
        try:
            while not isinstance(event := await self._next_event(request), _Finish):
                parts.append(event.text)
        finally:
            request.cancelled = True  # a no-op once finished; stops the row if this task was cancelled
        answer = chat_completion(
            response_id=completion_id(),
            model=self.model_name,
            content="".join(parts),
            usage=_usage(request, event),
        )
        answer["choices"][0]["finish_reason"] = event.reason
        return answer

    async def stream(
        self, body: dict[str, Any], headers: dict[str, str], api: UpstreamApi = "chat"
    ) -> AsyncGenerator[dict[str, Any], None]:
        """Chunks as the model produces them: a role delta, content deltas, a finish chunk, and a usage
        chunk when ``stream_options.include_usage`` is set. Closing the generator cancels the request."""
        _chat_only(api)
        params = _parse(body)
        request = await self._submit(params)
        response_id, created = completion_id(), int(time.time())
        try:
            yield chat_chunk(
                response_id=response_id,
                model=self.model_name,
                created=created,
                delta={"role": "assistant", "content": ""},
            )
            while not isinstance(event := await self._next_event(request), _Finish):
                yield chat_chunk(
                    response_id=response_id, model=self.model_name, created=created, delta={"content": event.text}
                )
            yield chat_chunk(
                response_id=response_id, model=self.model_name, created=created, delta={}, finish_reason=event.reason
            )
            if params.include_usage:
                yield usage_chunk(
                    response_id=response_id, model=self.model_name, created=created, usage=_usage(request, event)
                )
        finally:
            request.cancelled = True

    async def list_models(self, headers: dict[str, str]) -> dict[str, Any]:
        return {"object": "list", "data": [{"id": self.model_name, "object": "model", "owned_by": "local"}]}

    async def embed(self, body: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
        raise NotFound("the local backend answers chat completions only, not /v1/embeddings", code="unknown_route")

    async def relay(self, request: RelayRequest, headers: dict[str, str]) -> Relayed:
        raise NotFound(f"the local backend answers chat completions only, not /v1{request.path}", code="unknown_route")

    async def close(self) -> None:
        """Stop taking requests, fail the ones not finished, and wait for the model thread to go idle."""
        self._closed = True
        unfinished = [*self._waiting, *self._running]
        if self._scheduler is not None:
            self._scheduler.cancel()
            await asyncio.gather(self._scheduler, return_exceptions=True)
            self._scheduler = None
        while self._arrivals is not None and not self._arrivals.empty():
            unfinished.append(self._arrivals.get_nowait())
        self._waiting.clear()
        for request in unfinished:
            request.cancelled = True  # a running batch stops at its next step
            request.events.put_nowait(_Failed(None))
        await asyncio.to_thread(self._executor.shutdown, wait=True)

    # ------------------------------------------------------------------ prompts

    def prompt_ids(self, messages: Sequence[dict[str, str]]) -> list[int]:
        """Token ids of the prompt for ``messages`` (text-only ``role``/``content`` dicts). Blocking."""
        if getattr(self.tokenizer, "chat_template", None):
            from jinja2 import TemplateError

            try:
                text = self.tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=True)
            except TemplateError as exc:
                raise InvalidRequest(f"the model's chat template rejects these messages: {exc}") from exc
            # The template writes any special tokens the model expects (a BOS, say) into the text itself.
            ids = self.tokenizer(str(text), add_special_tokens=False)["input_ids"]
        else:
            ids = self.tokenizer(transcript(messages))["input_ids"]
        return [int(token) for token in ids]

    # ------------------------------------------------------------------ scheduling, on the event loop

    async def _submit(self, params: _Params) -> _Request:
        if self._closed:
            raise UpstreamUnavailable("the local model has been shut down", status_code=503)
        prompt_ids = await asyncio.to_thread(self.prompt_ids, params.messages)
        if not prompt_ids:
            raise InvalidRequest("the prompt is empty")
        max_new_tokens = self._check_length(len(prompt_ids), params.max_new_tokens)
        loop = asyncio.get_running_loop()
        request = _Request(
            prompt_ids=prompt_ids,
            max_new_tokens=max_new_tokens,
            temperature=params.temperature,
            top_p=params.top_p if params.temperature > 0 else 1.0,
            stop=params.stop,
            loop=loop,
            events=asyncio.Queue(),
        )
        if self._scheduler is None:
            self._arrivals = asyncio.Queue()
            # A fresh context: the scheduler outlives the request that started it (and its log id).
            self._scheduler = loop.create_task(self._schedule(), name="semcache-local-scheduler", context=Context())
        assert self._arrivals is not None
        self._arrivals.put_nowait(request)
        return request

    def _check_length(self, prompt_tokens: int, asked: int | None) -> int:
        """How many tokens this request may generate; ``InvalidRequest`` when it cannot fit the context."""
        if self.context_tokens is None:
            return asked or self.max_new_tokens_default
        room = self.context_tokens - prompt_tokens
        if room <= 0:
            raise InvalidRequest(
                f"the prompt is {prompt_tokens} tokens, but this model's context holds {self.context_tokens}",
                code="context_length_exceeded",
            )
        if asked is None:
            return min(self.max_new_tokens_default, room)
        if asked > room:
            raise InvalidRequest(
                f"the prompt is {prompt_tokens} tokens and max_tokens asks for {asked} more, but this model's "
                f"context holds {self.context_tokens}",
                code="context_length_exceeded",
            )
        return asked

    async def _next_event(self, request: _Request) -> _Text | _Finish:
        event = await request.events.get()
        if isinstance(event, _Failed):
            if event.cause is None:
                raise UpstreamUnavailable("the local model was shut down during the request", status_code=503)
            import torch

            if isinstance(event.cause, torch.OutOfMemoryError):
                raise UpstreamUnavailable("the local model ran out of memory", status_code=503) from event.cause
            raise UpstreamError(
                f"the local model failed: {type(event.cause).__name__}", status_code=500
            ) from event.cause
        return event

    async def _schedule(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            batch = await self._next_batch()
            if not batch:
                continue
            self._running = batch
            try:
                await loop.run_in_executor(self._executor, self._generate, batch)
            finally:
                self._running = []

    async def _next_batch(self) -> list[_Request]:
        """Wait for a request, gather arrivals for the batch window, then pick a batch that fits."""
        assert self._arrivals is not None
        loop = asyncio.get_running_loop()
        if not self._waiting:
            self._waiting.append(await self._arrivals.get())
        deadline = loop.time() + self.batch_window_s
        while len(self._waiting) < self.max_batch_size:
            if not self._arrivals.empty():
                self._waiting.append(self._arrivals.get_nowait())
                continue
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            try:
                self._waiting.append(await asyncio.wait_for(self._arrivals.get(), remaining))
            except TimeoutError:
                break
        batch: list[_Request] = []
        later: deque[_Request] = deque()
        for request in self._waiting:
            if request.cancelled:
                continue  # its client has gone; nobody waits for the answer
            if len(batch) < self.max_batch_size and self._fits(batch, request):
                batch.append(request)
            else:
                later.append(request)
        self._waiting = later
        return batch

    def _fits(self, batch: list[_Request], request: _Request) -> bool:
        if not batch or self.context_tokens is None:
            return True
        members = [*batch, request]
        longest_prompt = max(len(member.prompt_ids) for member in members)
        return longest_prompt + max(member.max_new_tokens for member in members) <= self.context_tokens

    # ------------------------------------------------------------------ generation, in the model thread

    def _generate(self, batch: list[_Request]) -> None:
        import torch
        from transformers import LogitsProcessorList, StoppingCriteriaList

        dispatcher = _BatchDispatcher([_Row(request, self.tokenizer, self.eos_token_ids) for request in batch])
        try:
            width = max(len(request.prompt_ids) for request in batch)
            padding = [width - len(request.prompt_ids) for request in batch]
            input_ids = torch.tensor(
                [[self.pad_token_id] * pad + request.prompt_ids for pad, request in zip(padding, batch, strict=True)],
                dtype=torch.long,
                device=self.device,
            )
            attention_mask = torch.tensor(
                [[0] * pad + [1] * len(request.prompt_ids) for pad, request in zip(padding, batch, strict=True)],
                dtype=torch.long,
                device=self.device,
            )
            sampling: dict[str, Any] = {"do_sample": False}
            if any(request.temperature > 0 for request in batch):
                # Each row's own settings come from _RowSampling; generate's own warpers stand aside.
                sampling = {
                    "do_sample": True,
                    "temperature": 1.0,
                    "top_k": 0,
                    "top_p": 1.0,
                    "typical_p": 1.0,
                    "logits_processor": LogitsProcessorList([_RowSampling(batch, self.device)]),
                }
            self.generate_calls += 1
            with torch.inference_mode():
                self.model.generate(  # type: ignore[operator]  # nn.Module.__getattr__ hides the method
                    input_ids=input_ids,
                    attention_mask=attention_mask,
                    max_new_tokens=max(request.max_new_tokens for request in batch),
                    pad_token_id=self.pad_token_id,
                    eos_token_id=list(self.eos_token_ids) or None,
                    num_beams=1,
                    num_return_sequences=1,
                    stopping_criteria=StoppingCriteriaList([dispatcher]),
                    **sampling,
                )
        except Exception as exc:  # the thread's boundary: every waiting client learns what went wrong
            dispatcher.fail(exc)
        else:
            dispatcher.finish()


class _Row:
    """One request's place in a running batch: its decoded text so far and whether it is done.

    Text is decoded incrementally (a window of recent tokens, re-decoded each step), holding back a
    trailing partial UTF-8 character, and any tail that might be the start of a stop string.
    """

    def __init__(self, request: _Request, tokenizer: PreTrainedTokenizerBase, eos_token_ids: Sequence[int]) -> None:
        self.request = request
        self._tokenizer = tokenizer
        self._eos = frozenset(eos_token_ids)
        self._ids: list[int] = []
        self._prefix_offset = 0  # decoding starts here, so that spacing between tokens comes out right
        self._read_offset = 0  # text up to here has been taken
        self._held = ""  # decoded text not yet sent: it may begin a stop string
        self.completion_tokens = 0
        self.done = False

    def step(self, token: int) -> None:
        if self.done:
            return
        if self.request.cancelled:
            self.done = True  # stop dispatching; no one reads the queue any more
            return
        self.completion_tokens += 1
        if token in self._eos:
            self.finish("stop")
            return
        self._ids.append(token)
        self._take(self._decode(final=False))
        if not self.done and self.completion_tokens >= self.request.max_new_tokens:
            self.finish("length")

    def finish(self, reason: FinishReason) -> None:
        """Send what is held back, then the finish event (unless a stop string turns up on the way)."""
        if self.done:
            return
        self._take(self._decode(final=True))
        if not self.done:
            self._send(self._held)
            self._held = ""
            self._close(reason)

    def fail(self, exc: BaseException) -> None:
        if not self.done:
            self.done = True
            self.request.post(_Failed(exc))

    def _decode(self, *, final: bool) -> str:
        before = self._text(self._ids[self._prefix_offset : self._read_offset])
        after = self._text(self._ids[self._prefix_offset :])
        if len(after) <= len(before) or (after.endswith("\ufffd") and not final):
            return ""  # nothing new yet, or half a character: wait for the next token
        self._prefix_offset, self._read_offset = self._read_offset, len(self._ids)
        return after[len(before) :]

    def _text(self, ids: list[int]) -> str:
        return str(self._tokenizer.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False))

    def _take(self, text: str) -> None:
        held = self._held + text
        stops = self.request.stop
        if not stops:
            self._send(held)
            return
        found = [index for index in (held.find(stop) for stop in stops) if index >= 0]
        if found:
            self._send(held[: min(found)])
            self._held = ""
            self._close("stop")
            return
        keep = max((_overlap(held, stop) for stop in stops), default=0)
        self._send(held[: len(held) - keep])
        self._held = held[len(held) - keep :]

    def _send(self, text: str) -> None:
        if text and not self.request.post(_Text(text)):
            self.done = True

    def _close(self, reason: FinishReason) -> None:
        self.done = True
        self.request.post(_Finish(reason, self.completion_tokens))


class _BatchDispatcher:
    """Gets each step's new tokens for the whole batch, and says which rows are done.

    ``generate`` calls it as a stopping criterion, once per step, with the sequences so far.
    """

    def __init__(self, rows: list[_Row]) -> None:
        self.rows = rows

    def __call__(self, input_ids: torch.Tensor, scores: Any, **kwargs: Any) -> torch.Tensor:
        import torch

        for row, token in zip(self.rows, input_ids[:, -1].tolist(), strict=True):
            row.step(int(token))
        return torch.tensor([row.done for row in self.rows], dtype=torch.bool, device=input_ids.device)

    def finish(self) -> None:
        """``generate`` returned: any row still open ran out of steps."""
        for row in self.rows:
            row.finish("length")

    def fail(self, exc: BaseException) -> None:
        for row in self.rows:
            row.fail(exc)


class _RowSampling:
    """A logits processor giving each row of a batch its own temperature and top_p.

    A greedy row keeps only its likeliest token, so sampling it cannot but return the argmax.
    """

    def __init__(self, batch: Sequence[_Request], device: str) -> None:
        import torch

        self._greedy = torch.tensor([[request.temperature == 0] for request in batch], device=device)
        self._temperature = torch.tensor(
            [[request.temperature or 1.0] for request in batch], dtype=torch.float32, device=device
        )
        self._top_p = torch.tensor([[request.top_p] for request in batch], dtype=torch.float32, device=device)

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        import torch

        scores = scores / self._temperature
        # top_p: drop the least likely tokens while their total probability stays within 1 - top_p.
        ascending, order = torch.sort(scores, dim=-1)
        drop_sorted = ascending.softmax(dim=-1).cumsum(dim=-1) <= 1 - self._top_p
        drop_sorted[:, -1] = False  # the likeliest token always stays
        drop = drop_sorted.scatter(1, order, drop_sorted)
        only_best = torch.ones_like(drop).scatter(1, scores.argmax(dim=-1, keepdim=True), False)
        return scores.masked_fill(torch.where(self._greedy, only_best, drop), float("-inf"))


# ---------------------------------------------------------------------- helpers


def transcript(messages: Sequence[dict[str, str]]) -> str:
    """The prompt for a tokenizer without a chat template: one ``role: content`` line per message."""
    lines = [f"{message['role']}: {message['content']}" for message in messages]
    return "\n".join([*lines, "assistant:"])


def _overlap(text: str, stop: str) -> int:
    """Length of the longest tail of ``text`` that is a proper prefix of ``stop``."""
    for size in range(min(len(text), len(stop) - 1), 0, -1):
        if text.endswith(stop[:size]):
            return size
    return 0


def _usage(request: _Request, finish: _Finish) -> dict[str, int]:
    prompt = len(request.prompt_ids)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": finish.completion_tokens,
        "total_tokens": prompt + finish.completion_tokens,
    }


def _context_tokens(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> int | None:
    for name in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"):
        value = getattr(model.config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    limit = getattr(tokenizer, "model_max_length", None)
    return limit if isinstance(limit, int) and 0 < limit < 1_000_000_000 else None


def _eos_token_ids(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> tuple[int, ...]:
    found: list[int] = []
    configured = model.generation_config.eos_token_id if model.generation_config is not None else None
    for value in (configured, tokenizer.eos_token_id):
        for token in value if isinstance(value, list) else [value]:
            if isinstance(token, int) and token not in found:
                found.append(token)
    return tuple(found)


def _parse(body: dict[str, Any]) -> _Params:
    """Check what this backend can honour in an OpenAI chat request."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise InvalidRequest("messages must be a non-empty list")
    if body.get("n") not in (None, 1):
        raise InvalidRequest("the local model returns one choice per request; n must be 1", code="unsupported_value")
    if body.get("tools") or body.get("functions"):
        raise InvalidRequest("the local model does not call tools", code="unsupported_parameter")

    max_new_tokens = body.get("max_completion_tokens")
    if max_new_tokens is None:
        max_new_tokens = body.get("max_tokens")
    if max_new_tokens is not None and (not _is_int(max_new_tokens) or max_new_tokens < 1):
        raise InvalidRequest("max_tokens must be a positive integer")

    temperature = body.get("temperature")
    if temperature is None:
        temperature = 0.0
    if not _is_number(temperature) or not 0 <= temperature <= 2:
        raise InvalidRequest("temperature must be a number from 0 to 2")
    top_p = body.get("top_p")
    if top_p is None:
        top_p = 1.0
    if not _is_number(top_p) or not 0 <= top_p <= 1:
        raise InvalidRequest("top_p must be a number from 0 to 1")
    if top_p == 0:
        temperature = 0.0  # only the likeliest token may be drawn: that is greedy decoding

    stop = body.get("stop")
    stops = [stop] if isinstance(stop, str) else stop if stop is not None else []
    if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
        raise InvalidRequest("stop must be a string or a list of strings")
    if len(stops) > _MAX_STOP_STRINGS:
        raise InvalidRequest(f"stop takes at most {_MAX_STOP_STRINGS} strings")

    stream_options = body.get("stream_options")
    include_usage = isinstance(stream_options, dict) and bool(stream_options.get("include_usage"))
    return _Params(
        messages=[_text_message(message) for message in messages],
        max_new_tokens=max_new_tokens,
        temperature=float(temperature),
        top_p=float(top_p),
        stop=tuple(s for s in stops if s),
        include_usage=include_usage,
    )


def _text_message(message: Any) -> dict[str, str]:
    if not isinstance(message, dict) or not isinstance(message.get("role"), str):
        raise InvalidRequest("each message must be an object with a role")
    content = message.get("content")
    if content is None:
        text = ""
    elif isinstance(content, str):
        text = content
    elif isinstance(content, list):
        texts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise InvalidRequest("the local model reads text only; content parts must be of type 'text'")
            texts.append(part["text"])
        text = "\n".join(texts)
    else:
        raise InvalidRequest("message content must be a string or a list of text parts")
    return {"role": message["role"], "content": text}


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _chat_only(api: UpstreamApi) -> None:
    if api != "chat":
        raise NotFound(f"the local backend answers chat completions only, not the {api} API", code="unknown_route")
