"""semcache: a semantic cache that stands in front of OpenAI-compatible LLM APIs."""

from .errors import SemcacheError
from .keys import normalize
from .settings import Settings

__version__ = "0.1.0"

__all__ = ["SemcacheError", "Settings", "__version__", "create_app", "normalize"]


def __getattr__(name: str) -> object:
    # The web layer imports FastAPI; load it only when asked for.
    if name == "create_app":
        from .server import create_app

        return create_app
    raise AttributeError(name)
