"""The load and soak test: ``python -m benchmarks.load`` (see ``__main__`` for what it checks)."""
