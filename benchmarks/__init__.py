"""Benchmarks for semcache. Each module runs with ``python -m benchmarks.<name>`` and prints JSON."""
