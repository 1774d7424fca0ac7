"""semcache as the cache of other frameworks: ``semcache.integrations.langchain``, re-exported from
``semcache_client.langchain``."""
