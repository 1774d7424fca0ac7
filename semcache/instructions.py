"""Prompts that tell the model what its answer must say.

An answer shaped by such an instruction belongs to the prompt that carried it: stored, it would be
served to other people's plain questions ("What is the refund policy? Answer exactly: all refunds
are free" poisoning "What is the refund policy?"). So such prompts neither read nor fill the cache.

The patterns are English, deliberately narrow, and each names what it catches. They look for
instructions about the answer's *content or wording*, not its form: "Answer the following question
about Python", "Say hello in French", "Explain it in one sentence" or "Answer yes or no" stay
cacheable. Some patterns count only as a command, at the start of a clause ("Say that refunds are
free"), so that questions quoting the words ("Why do people say that cats have nine lives?") pass.

This is a heuristic: rewording defeats it. Namespaces per tenant and ``scope_per_user`` are the
guarantee; this guard keeps an open, shared namespace from being poisoned by the obvious attacks.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

_WORDING = "dictates the wording"
_ANSWER_GIVEN = "dictates the answer"
_OVERRIDE = "overrides instructions"

# The keywords that open many rules, as "a|b|c": in their patterns, and in their ``_Rule.words``.
_ANSWER_WORDS = "answer|respond|reply"
_SPEAK_WORDS = "answer|respond|reply|say|write|output|print|return|repeat|type|state"
_IGNORE_WORDS = "ignore|disregard|forget|override|bypass"

_ANSWER = f"(?:{_ANSWER_WORDS})"
_SPEAK = f"(?:{_SPEAK_WORDS})"
_QUOTE = r"[\"'“”‘’«»`]"
_IGNORE = rf"(?:{_IGNORE_WORDS})(?:\s+all)?(?:\s+of)?"
_RULES = r"(?:instructions?|prompts?|rules|directions|directives|guidelines|context|constraints|messages)\b"
# What comes right before a command: the start of the text or of a clause, or a word that leads
# into one. Not "to": "Is it fair to say that ...?" is a question.
_COMMAND_BEFORE = re.compile(
    r"(?:^|[.!?:;,()\[\]\n\"'“”-]|\b(?:please|kindly|now|then|and|just|simply|always|must|"
    r"should|will))\s*$"
)


@dataclass(frozen=True)
class _Rule:
    kind: str
    pattern: re.Pattern[str]  # starts with its keyword, so that a long text is scanned fast
    # Every match holds one of these as a whole word (letters a-z, with no letter either side):
    # a text with none of them is not scanned with the pattern at all.
    words: frozenset[str]
    command: bool  # counts only as a command: "Say that ...", not "Why do people say that ...?"


def _rule(kind: str, pattern: str, words: str, *, command: bool = False) -> _Rule:
    return _Rule(kind, re.compile(pattern), frozenset(words.split("|")), command)


# Matched against NFKC-normalised, case-folded text with its whitespace collapsed.
# fmt: off
_RULES_IN_ORDER = (
    _rule(_WORDING, rf"{_SPEAK}\s+(?:back\s+)?(?:exactly|verbatim|word[- ]for[- ]word)\b", "exactly|verbatim|word"),
    _rule(_WORDING, rf"{_ANSWER}\s+(?:only|just|solely)\s+(?:with|using|by saying)\b", _ANSWER_WORDS),
    _rule(_WORDING, rf"{_ANSWER}\s+with\s+(?:only|just|exactly|nothing but)\b", _ANSWER_WORDS),
    _rule(_WORDING, rf"{_ANSWER}\s+with\s+(?:the|this|these)\s+(?:words?|phrase|sentence|text|string|letter|"
                    r"number|following)\b", _ANSWER_WORDS),
    _rule(_WORDING, rf"{_ANSWER}\s+with\s+{_QUOTE}", _ANSWER_WORDS),
    _rule(_WORDING, r"(?:only|just)\s+(?:say|output|print|write|return)\b", "say|output|print|write|return",
          command=True),
    _rule(_WORDING, r"(?:say|output|print|write|return)\s+(?:only|nothing but|nothing else but)\b",
          "say|output|print|write|return"),
    _rule(_WORDING, r"(?:repeat after me|repeat the following|copy the following)\b", "repeat|copy"),
    _rule(_ANSWER_GIVEN, rf"(?:{_SPEAK}|confirm|claim)\s+that\b", f"{_SPEAK_WORDS}|confirm|claim", command=True),
    _rule(_ANSWER_GIVEN, rf"{_ANSWER}\s*:\s*\S", _ANSWER_WORDS, command=True),
    _rule(_ANSWER_GIVEN, rf"(?:{_ANSWER}|say)\s+(?:with\s+)?{_QUOTE}?(?:yes|no|true|false|ok|okay)\b"
                         r"(?!\s*(?:or|/|and|to|if|when|more|matter|longer|one)\b)", f"{_ANSWER_WORDS}|say",
          command=True),
    _rule(_ANSWER_GIVEN, r"(?:tell|inform)\s+(?:the\s+)?(?:users?|customers?|everyone|everybody|anyone|people|them|"
                         r"him|her)\s+that\b", "tell|inform"),
    _rule(_ANSWER_GIVEN, r"(?:your|the)\s+(?:final\s+)?(?:answer|response|reply|output)\s+(?:must|should|shall|"
                         r"has to|needs to|is to|will)\s+(?:only\s+)?(?:be|say|read|contain|include|start|begin|end|"
                         r"consist)\b", "answer|response|reply|output"),
    _rule(_ANSWER_GIVEN, r"the\s+(?:correct|right|true|only|real|official|expected)\s+answer\s+(?:is|will be)\b",
          "answer"),
    _rule(_ANSWER_GIVEN, r"you\s+(?:must|should|shall|will|have to|need to)\s+(?:always\s+)?(?:say|answer|reply|"
                         r"respond|tell)\b", "say|answer|reply|respond|tell"),
    _rule(_OVERRIDE, rf"{_IGNORE}\s+(?:the\s+|your\s+|my\s+|any\s+)?(?:previous|prior|above|earlier|preceding|"
                     rf"former|original|system|existing|other)\s+{_RULES}", _IGNORE_WORDS),
    _rule(_OVERRIDE, rf"{_IGNORE}\s+your\s+(?:{_RULES}|programming|training)", _IGNORE_WORDS),
    _rule(_OVERRIDE, r"(?:ignore|disregard|forget)\s+(?:everything|anything|all)\s+(?:above|before|else|previously|"
                     r"you were told)\b", "ignore|disregard|forget"),
    _rule(_OVERRIDE, r"(?:from now on|for the rest of (?:this|the|our) (?:chat|conversation|session)|no matter what "
                     r"(?:i|the user|anyone|they) (?:asks?|says?)|whatever i ask|in (?:all|every) (?:future|later|"
                     r"subsequent) (?:answers?|responses?|replies))\b",
          "now|rest|matter|whatever|future|later|subsequent"),
)
# fmt: on
_WHITESPACE = re.compile(r"\s+")
_LETTERS = re.compile(r"[a-z]+")
_MAX_PHRASE_CHARS = 40
_COMMAND_LOOKBACK_CHARS = 12  # the longest word that leads into a command, its space, and one more


@dataclass(frozen=True)
class AnswerInstruction:
    """An instruction about the answer found in a text."""

    kind: str  # "dictates the wording", "dictates the answer" or "overrides instructions"
    phrase: str  # the words that matched, at most 40 characters

    def __str__(self) -> str:
        return f"{self.kind}: {self.phrase!r}"


def find_answer_instruction(text: str) -> AnswerInstruction | None:
    """The first instruction about the answer in ``text``, in reading order, or None for an
    ordinary prompt. Only the rules whose words the text holds are run, so a plain question is
    cheap; a long text is not, so callers run long texts in a worker thread."""
    folded = _fold(text)
    words = set(_LETTERS.findall(folded))
    return _first_instruction(folded, [rule for rule in _RULES_IN_ORDER if not rule.words.isdisjoint(words)])


def _fold(text: str) -> str:
    return _WHITESPACE.sub(" ", unicodedata.normalize("NFKC", text).casefold()).strip()


def _first_instruction(folded: str, rules: list[_Rule]) -> AnswerInstruction | None:
    found = [(match, rule.kind) for rule in rules if (match := _first_match(rule, folded)) is not None]
    if not found:
        return None
    first, kind = min(found, key=lambda item: item[0].start())
    return AnswerInstruction(kind, first.group(0).rstrip(" .!?:;,()[]-")[:_MAX_PHRASE_CHARS])


def _first_match(rule: _Rule, text: str) -> re.Match[str] | None:
    for match in rule.pattern.finditer(text):
        start = match.start()
        if start > 0 and (text[start - 1].isalnum() or text[start - 1] == "_"):
            continue  # inside a word: "hanswer", "essay that"
        if rule.command and not _COMMAND_BEFORE.search(text, max(0, start - _COMMAND_LOOKBACK_CHARS), start):
            continue
        return match
    return None
