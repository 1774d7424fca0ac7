"""Measuring hit quality on labelled data: ``semcache eval pairs`` and ``semcache eval trace``."""

from .pairs import PairsReport, evaluate_pairs
from .parts import load_evaluation_parts
from .trace import TraceReport, evaluate_trace

__all__ = ["PairsReport", "TraceReport", "evaluate_pairs", "evaluate_trace", "load_evaluation_parts"]
