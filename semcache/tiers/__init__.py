"""The lookup tiers, cheapest first: exact, template, semantic. Each returns a ``Hit`` or None."""

from .base import Hit
from .exact import ExactTier
from .semantic import SemanticTier
from .template import Template, TemplateTier, load_templates, parse_templates

__all__ = ["ExactTier", "Hit", "SemanticTier", "Template", "TemplateTier", "load_templates", "parse_templates"]
