"""semcache as LangChain's LLM cache, for any model LangChain calls, whoever serves it::

    from langchain_core.globals import set_llm_cache
    from semcache_client.langchain import SemcacheCache

    set_llm_cache(SemcacheCache("http://127.0.0.1:8080", api_key="team-a-key"))

Needs ``pip install './clients/python[langchain]'`` (langchain-core). Each lookup goes through semcache's
tiers, guards and decision line (``POST /v1/semcache/lookup``), keyed by the prompt and LangChain's
``llm_string`` (the model and its parameters) as the scope, so two models never share answers.
Only plain text is cached: a generation that calls tools, or carries anything but text, is not
stored. When semcache cannot be reached, a lookup is a miss and an update is skipped (logged): the
cache never stops the application.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Sequence
from typing import Any

from langchain_core.caches import RETURN_VAL_TYPE, BaseCache
from langchain_core.messages import AIMessage
from langchain_core.outputs import ChatGeneration, Generation

from .client import Client, SemcacheClientError

log = logging.getLogger("semcache_client.langchain")

_FORMAT = "langchain-generations-1"


class SemcacheCache(BaseCache):
    def __init__(
        self,
        url: str,
        api_key: str | None = None,
        *,
        namespace: str | None = None,
        client: Client | None = None,
    ) -> None:
        self.client = client or Client(url, api_key, namespace=namespace)

    def lookup(self, prompt: str, llm_string: str) -> RETURN_VAL_TYPE | None:
        question, scope = _keys(prompt, llm_string)
        try:
            found = self.client.lookup(question, scope=scope)
        except SemcacheClientError as exc:
            log.warning("semcache lookup failed, asking the model: %s", exc)
            return None
        return _generations(found.answer) if found.hit else None

    def update(self, prompt: str, llm_string: str, return_val: RETURN_VAL_TYPE) -> None:
        answer = _answer(return_val)
        if answer is None:
            return
        question, scope = _keys(prompt, llm_string)
        try:
            self.client.store(question, answer, scope=scope)
        except SemcacheClientError as exc:
            log.warning("semcache did not store the answer: %s", exc)

    async def alookup(self, prompt: str, llm_string: str) -> RETURN_VAL_TYPE | None:
        question, scope = _keys(prompt, llm_string)
        try:
            found = await self.client.alookup(question, scope=scope)
        except SemcacheClientError as exc:
            log.warning("semcache lookup failed, asking the model: %s", exc)
            return None
        return _generations(found.answer) if found.hit else None

    async def aupdate(self, prompt: str, llm_string: str, return_val: RETURN_VAL_TYPE) -> None:
        answer = _answer(return_val)
        if answer is None:
            return
        question, scope = _keys(prompt, llm_string)
        try:
            await self.client.astore(question, answer, scope=scope)
        except SemcacheClientError as exc:
            log.warning("semcache did not store the answer: %s", exc)

    def close(self) -> None:
        """Close the connections (the synchronous ones; ``aclose`` for both)."""
        self.client.close()

    async def aclose(self) -> None:
        self.client.close()
        await self.client.aclose()

    def clear(self, **kwargs: Any) -> None:
        raise NotImplementedError(
            "clearing semcache is an operator's job (POST /admin/entries/delete or /admin/flush with the "
            "admin key, docs/operations.md), not a client's"
        )


def _keys(prompt: str, llm_string: str) -> tuple[str, dict[str, Any]]:
    """What semcache embeds, and the scope: for a chat model, whose ``prompt`` is its serialised
    messages, the last human message's text is the question, and the messages before it (the
    system prompt, earlier turns) join the scope, as in a chat request. Were they embedded with the
    question, a long system prompt would fill the model's window and hide the question from it."""
    scope: dict[str, Any] = {"langchain": llm_string, "format": _FORMAT}
    messages = _messages(prompt)
    if messages is None:
        return prompt, scope
    *earlier, last = messages
    if earlier:
        scope["context"] = hashlib.sha256(json.dumps(earlier, sort_keys=True).encode()).hexdigest()
    return last, scope


def _messages(prompt: str) -> list[Any] | None:
    """A chat model's serialised messages ending in a human message of plain text, with the last
    one as its text; None for anything else (a text model's prompt)."""
    try:
        data = json.loads(prompt)
    except ValueError:
        return None
    if not isinstance(data, list) or not data or not all(isinstance(m, dict) for m in data):
        return None
    last = data[-1]
    kwargs = last.get("kwargs")
    if last.get("lc") != 1 or not isinstance(kwargs, dict) or kwargs.get("type") != "human":
        return None
    content = kwargs.get("content")
    if not isinstance(content, str) or not content.strip():
        return None
    return [*data[:-1], content]


def _answer(generations: Sequence[Generation]) -> str | None:
    """The generations as stored text, or None when one of them is more than plain text."""
    stored = []
    for generation in generations:
        if isinstance(generation, ChatGeneration):
            message = generation.message
            if not isinstance(message, AIMessage) or message.tool_calls or not isinstance(message.content, str):
                return None
            stored.append({"kind": "chat", "text": message.content})
        else:
            stored.append({"kind": "text", "text": generation.text})
    return json.dumps({"format": _FORMAT, "generations": stored}) if stored else None


def _generations(answer: str | None) -> list[Generation] | None:
    """Stored text back into generations; None (a miss) for anything this format did not write."""
    try:
        data = json.loads(answer or "")
        items = data["generations"] if data.get("format") == _FORMAT else None
        if not isinstance(items, list) or not items:
            return None
        out: list[Generation] = []
        for item in items:
            text, kind = item["text"], item["kind"]
            if not isinstance(text, str):
                return None
            if kind == "chat":
                out.append(ChatGeneration(message=AIMessage(content=text)))
            elif kind == "text":
                out.append(Generation(text=text))
            else:
                return None
        return out
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
