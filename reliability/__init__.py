"""The reliability suites: ``python -m reliability.faults`` (faults under load) and
``python -m reliability.load`` (load and soak with Locust). ``make test`` runs both short;
``make reliability`` runs them in full. Their results go to ``benchmarks/results/``."""
