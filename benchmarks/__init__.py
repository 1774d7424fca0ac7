"""Benchmarks for semcache. ``python -m benchmarks run`` runs them all and writes JSON and a markdown
summary; each module also runs alone with ``python -m benchmarks.<name>`` and prints JSON."""
