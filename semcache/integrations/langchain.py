"""semcache as LangChain's LLM cache, for any model LangChain calls, whoever serves it::

    from langchain_core.globals import set_llm_cache
    from semcache.integrations.langchain import SemcacheCache

    set_llm_cache(SemcacheCache("http://127.0.0.1:8080", api_key="team-a-key"))

Needs ``pip install 'semcache[langchain]'`` (langchain-core). Each lookup goes through semcache's
tiers, guards and decision line (``POST /v1/semcache/lookup``), keyed by the prompt and LangChain's
``llm_string`` (the model and its parameters) as the scope, so two models never share answers.
Only plain text is cached: a generation that calls tools, or carries anything but text, is not
stored. When semcache cannot be reached, a lookup is a miss and an update is skipped (logged): the
cache never stops the application.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

from langchain_core.caches import RETURN_VAL_TYPE, BaseCache
from langchain_core.messages import AIMessage
from langchain_core.outputs import ChatGeneration, Generation

from ..client import Client, SemcacheClientError

log = logging.getLogger("semcache.integrations.langchain")

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
        try:
            found = self.client.lookup(prompt, scope=_scope(llm_string))
        except SemcacheClientError as exc:
            log.warning("semcache lookup failed, asking the model: %s", exc)
            return None
        return _generations(found.answer) if found.hit else None

    def update(self, prompt: str, llm_string: str, return_val: RETURN_VAL_TYPE) -> None:
        answer = _answer(return_val)
        if answer is None:
            return
        try:
            self.client.store(prompt, answer, scope=_scope(llm_string))
        except SemcacheClientError as exc:
            log.warning("semcache did not store the answer: %s", exc)

    async def alookup(self, prompt: str, llm_string: str) -> RETURN_VAL_TYPE | None:
        try:
            found = await self.client.alookup(prompt, scope=_scope(llm_string))
        except SemcacheClientError as exc:
            log.warning("semcache lookup failed, asking the model: %s", exc)
            return None
        return _generations(found.answer) if found.hit else None

    async def aupdate(self, prompt: str, llm_string: str, return_val: RETURN_VAL_TYPE) -> None:
        answer = _answer(return_val)
        if answer is None:
            return
        try:
            await self.client.astore(prompt, answer, scope=_scope(llm_string))
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


def _scope(llm_string: str) -> dict[str, Any]:
    return {"langchain": llm_string, "format": _FORMAT}


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
