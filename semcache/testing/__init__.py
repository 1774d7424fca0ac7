"""Test and benchmark helpers for semcache (stand-in upstream servers, etc.)."""
