"""The ``literals`` guard: code, command-line flags, identifiers and math must match exactly,
case and layout included ("ls -R" vs "ls -r", "6!" vs "6", "os.path" vs "os_path", indented code)."""

from __future__ import annotations

import re

from .reading import GuardResult, Prompt

_SCRIPT_CHARS = frozenset("⁰¹²³⁴⁵⁶⁷⁸⁹⁺⁻⁼⁽⁾ⁱⁿ₀₁₂₃₄₅₆₇₈₉₊₋₌₍₎ₐₑₒₓₕₖₗₘₙₚₛₜ")
# An inline code span.
_INLINE_CODE = re.compile(r"`([^`\n]+)`")
# Marks that make a word code or math rather than prose: "C++", "x^2", "a_b", "!=", "<div>".
_CODE_MARKS = re.compile(
    r"[_#+=*^<>|\\~@{}\[\]`]|!(?=.)|(?<=[0-9])!"  # operators, brackets, "!=" and factorials
    r"|[A-Za-z]\.[a-z]{2,}"  # dotted names: os.path, file.txt
    r"|^[-\u2013\u2014\u2212]+[0-9A-Za-z]"  # flags and negative numbers, with any dash a word processor types
    r"|^[./~]*/[A-Za-z0-9]|/[^/\s]*/|[0-9]/[0-9]"  # paths, s/a/b/g, 7/3 (not prose's "and/or")
    r"|[A-Za-z0-9_]\((?!s$)"  # calls: print(x), but not a plural's "song(s)"
    r"|\$[A-Za-z_{(]|[A-Za-z]%|%[A-Za-z]"  # $HOME, ${x}, LIKE 'abc%', %s
)
# A word made only of operators ("7 / 3", "x - y"): the math is in it.
_OPERATOR_WORD = re.compile(r"[-+*/%^=<>\u2212]{1,3}")
# What wraps a word in prose; stripped before a word is judged.
_OPENING = "\"'([{“‘«"
_CLOSING = "\"')]}”’».,;:?"


def _literal_words(prompt: Prompt) -> tuple[str, ...]:
    """The words of the prompt as sent that are code or math, as written: flags ("-R"), identifiers with
    marks ("os.path", "snake_case", "C++"), and math ("6!", "2³", "x^2", "-5"). A word that opens a
    sentence has its first letter lower-cased, so that sentence case alone changes nothing. Sorted:
    where they stand in the prose does not count."""
    found = []
    sentence_start = True
    for word in prompt.original.split():
        core = word.lstrip(_OPENING).rstrip(_CLOSING)
        if core.endswith("!") and core[:-1][-1:].isalpha():
            core = core.rstrip("!")  # an exclamation, not a factorial
        if core and (
            _CODE_MARKS.search(core) or _OPERATOR_WORD.fullmatch(core) or any(ch in _SCRIPT_CHARS for ch in core)
        ):
            sentence_case = sentence_start and not core[1:2].isupper()  # "Node.js", not "LOAD_HU"
            found.append(core[0].lower() + core[1:] if sentence_case else core)
        sentence_start = word.rstrip("\"')]}”’»")[-1:] in (".", "?", "!", ":")
    return tuple(sorted(found))


def _code_layout(prompt: Prompt) -> tuple[str, ...]:
    """Code whose every character counts: fenced blocks, and, in text with indented lines, every
    line that is not a question about it, with its indentation; then inline spans, in any order."""
    blocks, prose = _fenced_blocks(prompt.original)
    code = [line.rstrip() for block in blocks for line in block.splitlines() if line.strip()]
    lines = [line.rstrip() for line in prose.splitlines() if line.strip()]
    if len(lines) > 1 and any(line[:1] in (" ", "\t") for line in lines):
        code += [line for line in lines if not line.endswith("?")]
    return tuple(code + sorted(_INLINE_CODE.findall(prose)))


def _fenced_blocks(text: str) -> tuple[list[str], str]:
    """The fenced code blocks of ``text`` (what follows a line that opens with three backticks, up
    to the next three or the end) and the text around them. Read in one pass: a line of backticks
    with no line break after them is prose, found once and not again from each of its backticks."""
    blocks, prose, at = [], [], 0
    while (fence := text.find("```", at)) >= 0:
        line_end = text.find("\n", fence + 3)
        if line_end < 0:
            break  # no line break after this fence, nor after any later one: no more blocks
        close = text.find("```", line_end + 1)
        end = len(text) if close < 0 else close
        blocks.append(text[line_end + 1 : end])
        prose.append(text[at:fence])
        at = len(text) if close < 0 else close + 3
    prose.append(text[at:])
    return blocks, "".join(prose)


def literals(query: Prompt, cached: Prompt) -> GuardResult:
    """Code, flags, identifiers and math match exactly, or the candidate is vetoed; prose around
    them may differ. An embedding reads "ls -R" and "ls -r" alike, and two programs that differ only
    in indentation alike; their answers differ."""
    if query.read(_code_layout) != cached.read(_code_layout):
        return GuardResult("literals", False, "the code differs")
    words, other = query.read(_literal_words), cached.read(_literal_words)
    if words != other:
        only = sorted(set(words) ^ set(other)) or words
        return GuardResult("literals", False, f"{only[0]!r} only on one side")
    return GuardResult("literals", True)
