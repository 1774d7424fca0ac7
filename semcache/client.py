"""The cache API's Python client: ``semcache_client`` (clients/python in this repository), which
an application installs on its own without the service. Re-exported here, so that code written
against ``semcache.client`` keeps working where semcache is installed."""

from semcache_client.client import Client, Found, SemcacheClientError

__all__ = ["Client", "Found", "SemcacheClientError"]
