"""The hit decision: scorer, guards, judge, verifier, budget."""
