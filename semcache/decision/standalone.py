"""Whether a follow-up reads on its own: then it is looked up without its conversation, so that
it may hit answers to the same question asked in any conversation."""

from __future__ import annotations

import re
import unicodedata

from . import guards

_REFERS_BACK = frozenset(
    (
        "he she it they him her them his hers its their theirs himself herself itself themselves this that "
        "these those there then such same above below former latter previous earlier again also too another "
        "other others more else instead one ones example examples why so and but or continue elaborate expand "
        "explain shorter longer simpler simplify rephrase rewrite translate summarize summarise summary "
        "it's that's he's she's they're there's"
    ).split()
)
_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)?")
_MIN_STANDALONE_WORDS = 4


def reads_standalone(prompt: str) -> bool:
    """True when the prompt names what it is about and carries no word that points back.

    Deliberately strict: "How old is he?", "Why?", "And in French?" or "Make it shorter" depend on
    earlier turns, and "How much does a ticket cost?" names nothing, so all stay in their conversation;
    "What is the capital of France?" does not.
    """
    words = [w.lower().replace("’", "'") for w in _WORD.findall(unicodedata.normalize("NFKC", prompt))]
    if len(words) < _MIN_STANDALONE_WORDS or any(w in _REFERS_BACK for w in words):
        return False
    return bool(guards.named_entities(prompt))
