"""Second-stage verifiers: given a query and cached prompts, how likely one answer fits both."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .protocols import Verifier

if TYPE_CHECKING:
    from .settings import Settings


def load_verifier(settings: Settings) -> Verifier | None:
    if settings.verifier == "none":
        return None
    raise ValueError(f"unknown verifier {settings.verifier!r}; use 'none'")
