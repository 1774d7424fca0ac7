"""semcache as LangChain's LLM cache: ``semcache_client.langchain`` (clients/python in this
repository), re-exported here. Needs langchain-core: ``pip install 'semcache[langchain]'``."""

from semcache_client.langchain import SemcacheCache

__all__ = ["SemcacheCache"]
