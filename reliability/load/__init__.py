"""The load and soak test: ``python -m reliability.load`` (see ``__main__`` for what it checks)."""
