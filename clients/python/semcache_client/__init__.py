"""The Python client of semcache's cache API, installable without the service::

    pip install ./clients/python                # httpx only
    pip install './clients/python[langchain]'   # and langchain-core, for semcache_client.langchain

``Client`` stores and looks up answers (``semcache_client.client``); ``SemcacheCache`` is
semcache as LangChain's LLM cache (``semcache_client.langchain``).
"""

from .client import Client, Found, SemcacheClientError

__all__ = ["Client", "Found", "SemcacheClientError"]
