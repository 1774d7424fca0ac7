"""semcache as the cache of other frameworks: ``semcache.integrations.langchain``."""
