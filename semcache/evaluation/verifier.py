"""A stand-in verifier for replays: it knows the labels, and errs as a model judge does.

A model judge is no oracle, and errs most on look-alikes: two questions that share most of their
words, or read alike to the embedding model, yet need different answers. So this one rejects
``REJECTS_RIGHT`` of right pairs, accepts ``ACCEPTS_LOOK_ALIKE`` of wrong look-alikes and
``ACCEPTS_OTHER_WRONG`` of the other wrong pairs. Each pair's verdict is drawn once from the seed (a
model at temperature 0 answers the same pair the same way), so asking twice changes nothing.
"""

from __future__ import annotations

import random
import re
import zlib
from collections import Counter
from collections.abc import Callable, Mapping

from ..decision.verification import VerificationCase, VerifierReply, verification_messages

REJECTS_RIGHT = 0.03
ACCEPTS_LOOK_ALIKE = 0.10
ACCEPTS_OTHER_WRONG = 0.02
# A wrong pair is a look-alike when its cosine reaches this, or its questions share this share of words.
LOOK_ALIKE_SIMILARITY = 0.80
LOOK_ALIKE_OVERLAP = 0.5
_WORDS = re.compile(r"\w+")


def looks_alike(first: str, second: str, similarity: float) -> bool:
    if similarity >= LOOK_ALIKE_SIMILARITY:
        return True
    a, b = set(_WORDS.findall(first.casefold())), set(_WORDS.findall(second.casefold()))
    return bool(a | b) and len(a & b) / len(a | b) >= LOOK_ALIKE_OVERLAP


class ErringVerifier:
    """``same(query, cached_prompt)`` is the truth; verdicts err at the rates above. Counts its
    calls and verdicts, and the tokens a real call would spend (about four characters a token)."""

    def __init__(self, same: Callable[[str, str], bool], seed: int) -> None:
        self._same = same
        self._seed = seed
        self.verdicts: Counter[str] = Counter()  # "<yes|no>_<right|wrong pair>"
        self.prompt_tokens = 0

    def decide(self, query: str, cached_prompt: str, similarity: float) -> bool:
        right = self._same(query, cached_prompt)
        chance = random.Random(zlib.crc32(f"{self._seed}\0{query}\0{cached_prompt}".encode())).random()
        if right:
            approve = chance >= REJECTS_RIGHT
        else:
            rate = ACCEPTS_LOOK_ALIKE if looks_alike(query, cached_prompt, similarity) else ACCEPTS_OTHER_WRONG
            approve = chance < rate
        self.verdicts[f"{'yes' if approve else 'no'}_{'right' if right else 'wrong'}"] += 1
        return approve

    async def verify(self, case: VerificationCase, headers: Mapping[str, str]) -> VerifierReply:
        tokens = sum(len(m["content"]) for m in verification_messages(case)) // 4
        self.prompt_tokens += tokens
        approve = self.decide(case.query, case.cached_prompt, case.similarity)
        return VerifierReply("yes" if approve else "no", "stand-in", tokens, 1)

    @property
    def calls(self) -> int:
        return sum(self.verdicts.values())
