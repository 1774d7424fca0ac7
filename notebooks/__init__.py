"""The tuning notebook, its shipped sample, and ``python -m notebooks.run`` (``make notebook``)."""
