"""Guards: cheap checks that veto a semantic candidate whose meaning differs in a way embeddings
miss. Each guard compares the incoming prompt with the cached prompt and is on or off in config.

- ``numbers``: the numbers differ ("2015" vs "2016", "3 months" vs "5 months", "three" vs "3" match).
- ``negation``: one side is negated and the other is not ("can" vs "can't").
- ``antonyms``: one side says "best" where the other says "worst" (a short curated list).
- ``entities``: a name, acronym or model code in one side is absent from the other
  ("Idaho" vs "Montana", "UK" vs "US", "Rockrider 340" vs "Rockrider 300").
- ``order``: the same two names or words in swapped roles ("Kobe ... LeBron" vs "LeBron ... Kobe").
- ``roles``: Chinese text whose two sides trade places around a verb of giving or moving
  ("男生送女生" vs "女生送男生", "银行卡转入支付宝" vs "支付宝转入银行卡").
- ``literals``: code, command-line flags, identifiers and math must match exactly, case and
  layout included ("ls -R" vs "ls -r", "6!" vs "6", "os.path" vs "os_path", indented code).
- ``template``: two prompts of several lines that begin with the same lines, which are most of
  their text (a few-shot template, instructions before a filled-in line), and differ after them
  ("...cheese => fromage\nplush giraffe =>" vs "...\napple =>"): the shared lines fill the
  embedding, and the lines that differ decide the answer.

``numbers`` also reads Chinese numerals in Chinese text ("十一月" is 11, "三百五十" is 350), and
superscripts as exponents ("2³" is 2 and 3, never 23).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from . import chinese

GUARD_NAMES = ("numbers", "negation", "antonyms", "entities", "order", "roles", "literals", "template")
# The ``template`` guard's line: shared lines of at least this share of the longer prompt's text.
_TEMPLATE_SHARE = 0.5

_NUMBER_WORDS = {
    "zero": "0", "one": "1", "two": "2", "three": "3", "four": "4", "five": "5", "six": "6", "seven": "7",
    "eight": "8", "nine": "9", "ten": "10", "eleven": "11", "twelve": "12", "twenty": "20", "hundred": "100",
    "thousand": "1000", "million": "1000000", "billion": "1000000000", "first": "1", "second": "2", "third": "3",
    "fourth": "4", "fifth": "5", "half": "0.5", "single": "1", "double": "2", "twice": "2",
}  # fmt: skip
_NEGATIONS = {"not", "no", "never", "none", "nobody", "nothing", "neither", "nor", "without", "cannot", "nowhere"}
_ANTONYM_PAIRS = [
    ("best", "worst"), ("good", "bad"), ("better", "worse"), ("most", "least"), ("pros", "cons"),
    ("advantages", "disadvantages"), ("advantage", "disadvantage"), ("buy", "sell"), ("increase", "decrease"),
    ("before", "after"), ("male", "female"), ("men", "women"), ("man", "woman"), ("boy", "girl"),
    ("boys", "girls"), ("husband", "wife"), ("cheap", "expensive"), ("cheapest", "expensive"), ("easy", "hard"),
    ("easiest", "hardest"), ("love", "hate"), ("like", "hate"), ("positive", "negative"), ("rich", "poor"),
    ("high", "low"), ("higher", "lower"), ("highest", "lowest"), ("fast", "slow"), ("start", "stop"),
    ("import", "export"), ("win", "lose"), ("true", "false"), ("legal", "illegal"), ("safe", "dangerous"),
    ("north", "south"), ("east", "west"), ("old", "new"), ("oldest", "newest"), ("upload", "download"),
    ("send", "receive"), ("input", "output"), ("maximum", "minimum"), ("max", "min"), ("open", "close"),
]  # fmt: skip
_ANTONYMS: dict[str, set[str]] = {}
for _left, _right in _ANTONYM_PAIRS:
    _ANTONYMS.setdefault(_left, set()).add(_right)
    _ANTONYMS.setdefault(_right, set()).add(_left)

_SCRIPT_CHARS = frozenset("⁰¹²³⁴⁵⁶⁷⁸⁹⁺⁻⁼⁽⁾ⁱⁿ₀₁₂₃₄₅₆₇₈₉₊₋₌₍₎ₐₑₒₓₕₖₗₘₙₚₛₜ")
_STOPWORDS = frozenset(
    (
        "a an the and or but if then so of to in on at by for with from into onto about as is are was were be "
        "been being am do does did doing have has had having i me my mine we us our you your he him his she "
        "her it its they them their what which who whom whose when where why how this that these those there "
        "here can could should would will shall may might must some any all each every more very much many "
        "such than too also just only own same other another get got getting make made one's someone "
        "something anyone anything up out over s t don't doesn't isn't aren't wasn't weren't "
    ).split()
)
_TOKEN = re.compile(r"[^\W_]+(?:[.,'’][^\W_]+)*", re.UNICODE)
_CONTRACTED_NOT = re.compile(r"n['’]t\b")
_SENTENCE_MARK = re.compile(r"[.?!:]")
# Superscripts and subscripts written out before NFKC, which would read "2³" as "23" and "H₂" as "H2".
_SCRIPT_FORMS = str.maketrans(
    {ch: "^" + unicodedata.normalize("NFKC", ch) for ch in "⁰¹²³⁴⁵⁶⁷⁸⁹⁺⁻⁼⁽⁾ⁱⁿ"}
    | {ch: "_" + unicodedata.normalize("NFKC", ch) for ch in "₀₁₂₃₄₅₆₇₈₉₊₋₌₍₎ₐₑₒₓₕₖₗₘₙₚₛₜ"}
)


@dataclass(frozen=True)
class GuardResult:
    guard: str
    passed: bool
    detail: str = ""


@dataclass(frozen=True)
class _Text:
    raw: str  # NFKC, superscripts written out
    tokens: list[str]  # lower-cased, in order
    cased: list[str]  # original case, in order
    original: str  # as sent: the ``literals`` guard reads case, layout and every mark
    # Per token: whether a sentence mark (".?!:") stands between it and the token before it.
    after_mark: list[bool]

    @classmethod
    def of(cls, text: str) -> _Text:
        normal = unicodedata.normalize("NFKC", text.translate(_SCRIPT_FORMS)).replace('""', '"')
        spelled = _CONTRACTED_NOT.sub(" not", normal)
        cased, after_mark, end = [], [], 0
        for match in _TOKEN.finditer(spelled):
            cased.append(match.group())
            after_mark.append(_SENTENCE_MARK.search(spelled, end, match.start()) is not None)
            end = match.end()
        return cls(normal, [t.lower() for t in cased], cased, text, after_mark)


def _numbers(text: _Text) -> set[str]:
    found = set(chinese.numbers(text.raw)) if chinese.has_han(text.raw) else set()
    for token in text.tokens:
        if token.isalpha():  # most tokens: a word, which holds no digit (no letter is a digit)
            if token in _NUMBER_WORDS:
                found.add(_NUMBER_WORDS[token])
        elif any(ch.isdigit() for ch in token) and not any(ch.isalpha() for ch in token):
            found.add(token.replace(",", "").rstrip("."))
        elif token in _NUMBER_WORDS:
            found.add(_NUMBER_WORDS[token])
    return found


def numbers(query: _Text, cached: _Text) -> GuardResult:
    left, right = _numbers(query), _numbers(cached)
    if left == right:
        return GuardResult("numbers", True)
    return GuardResult("numbers", False, f"{sorted(left)} vs {sorted(right)}")


def negation(query: _Text, cached: _Text) -> GuardResult:
    left = sum(map(_NEGATIONS.__contains__, query.tokens)) % 2
    right = sum(map(_NEGATIONS.__contains__, cached.tokens)) % 2
    return GuardResult("negation", left == right, "" if left == right else "negated on one side only")


def antonyms(query: _Text, cached: _Text) -> GuardResult:
    left, right = set(query.tokens), set(cached.tokens)
    for word in left - right:
        opposite = _ANTONYMS.get(word, set()) & (right - left)
        if opposite:
            return GuardResult("antonyms", False, f"{word!r} vs {sorted(opposite)[0]!r}")
    return GuardResult("antonyms", True)


def _entities(text: _Text) -> list[str]:
    """Names, acronyms and codes: capitalised words past the first, all-caps words, letter-digit mixes."""
    found = []
    for position, word in enumerate(text.cased):
        lower = word.lower()
        if lower in _STOPWORDS or lower in _NUMBER_WORDS:
            continue
        mixed = any(c.isdigit() for c in word) and any(c.isalpha() for c in word)
        acronym = len(word) >= 2 and word.isupper()
        capitalised = position > 0 and word[:1].isupper() and not text.after_mark[position]
        if mixed or acronym or capitalised:
            found.append(lower)
    return found


def named_entities(text: str) -> list[str]:
    """Names, acronyms and codes in ``text``, lower-cased."""
    return _entities(_Text.of(text))


def entities(query: _Text, cached: _Text) -> GuardResult:
    for mine, other in ((query, cached), (cached, query)):
        vocabulary = set(other.tokens)
        missing = [e for e in _entities(mine) if e not in vocabulary and _stem(e) not in map(_stem, vocabulary)]
        if missing:
            return GuardResult("entities", False, f"{missing[0]!r} only on one side")
    return GuardResult("entities", True)


def order(query: _Text, cached: _Text) -> GuardResult:
    """Swapped roles: two words shared by both sides appear in opposite order."""
    left = _content_positions(query)
    right = _content_positions(cached)
    shared = [w for w in left if w in right]  # in the query's order
    if set(left) != set(right):  # only names count: the other words may have moved with the wording
        names = set(_entities(query)) | set(_entities(cached))
        shared = [w for w in shared if w in names]
    swapped = _first_swap([right[w] for w in shared])
    if swapped is None:
        return GuardResult("order", True)
    first, second = swapped
    return GuardResult("order", False, f"{shared[first]!r} and {shared[second]!r} swap places")


def _first_swap(positions: list[int]) -> tuple[int, int] | None:
    """The first ``i`` (then the first ``j`` after it) whose position is greater than a later
    one's, or None when they ascend: one pass from the end and one scan, never every pair."""
    lowest_after: list[int] = [0] * len(positions)
    lowest = None
    for i in range(len(positions) - 1, -1, -1):
        lowest_after[i] = lowest if lowest is not None else positions[i]
        lowest = positions[i] if lowest is None else min(lowest, positions[i])
    for i, position in enumerate(positions[:-1]):
        if lowest_after[i] < position:
            return i, next(j for j in range(i + 1, len(positions)) if positions[j] < position)
    return None


def _content_positions(text: _Text) -> dict[str, int]:
    positions: dict[str, int] = {}
    counts: dict[str, int] = {}
    for position, token in enumerate(text.tokens):
        if token in _STOPWORDS or token in _NEGATIONS or len(token) < 2:
            continue
        stem = _stem(token)
        counts[stem] = counts.get(stem, 0) + 1
        positions.setdefault(stem, position)
    return {word: at for word, at in positions.items() if counts[word] == 1}


def roles(query: _Text, cached: _Text) -> GuardResult:
    """Swapped roles or direction in Chinese text; Latin text always passes (see ``order``)."""
    swapped = chinese.swapped_roles(query.raw, cached.raw)
    if swapped is None:
        return GuardResult("roles", True)
    first, second, marker = swapped
    return GuardResult("roles", False, f"{first!r} and {second!r} swap sides of {marker!r}")


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


def _literal_words(text: str) -> list[str]:
    """The words of ``text`` that are code or math, as written: flags ("-R"), identifiers with
    marks ("os.path", "snake_case", "C++"), and math ("6!", "2³", "x^2", "-5"). A word that opens a
    sentence has its first letter lower-cased, so that sentence case alone changes nothing."""
    found = []
    sentence_start = True
    for word in text.split():
        core = word.lstrip(_OPENING).rstrip(_CLOSING)
        if core.endswith("!") and core[:-1][-1:].isalpha():
            core = core.rstrip("!")  # an exclamation, not a factorial
        if core and (
            _CODE_MARKS.search(core) or _OPERATOR_WORD.fullmatch(core) or any(ch in _SCRIPT_CHARS for ch in core)
        ):
            sentence_case = sentence_start and not core[1:2].isupper()  # "Node.js", not "LOAD_HU"
            found.append(core[0].lower() + core[1:] if sentence_case else core)
        sentence_start = word.rstrip("\"')]}”’»")[-1:] in (".", "?", "!", ":")
    return found


def _code_layout(text: str) -> list[str]:
    """Code whose every character counts: fenced blocks, and, in text with indented lines, every
    line that is not a question about it, with its indentation; then inline spans, in any order."""
    blocks, prose = _fenced_blocks(text)
    code = [line.rstrip() for block in blocks for line in block.splitlines() if line.strip()]
    lines = [line.rstrip() for line in prose.splitlines() if line.strip()]
    if len(lines) > 1 and any(line[:1] in (" ", "\t") for line in lines):
        code += [line for line in lines if not line.endswith("?")]
    return code + sorted(_INLINE_CODE.findall(prose))


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


def literals(query: _Text, cached: _Text) -> GuardResult:
    """Code, flags, identifiers and math match exactly, or the candidate is vetoed; prose around
    them may differ. An embedding reads "ls -R" and "ls -r" alike, and two programs that differ only
    in indentation alike; their answers differ."""
    left, right = _code_layout(query.original), _code_layout(cached.original)
    if left != right:
        return GuardResult("literals", False, "the code differs")
    words, other = sorted(_literal_words(query.original)), sorted(_literal_words(cached.original))
    if words != other:
        only = sorted(set(words) ^ set(other)) or words
        return GuardResult("literals", False, f"{only[0]!r} only on one side")
    return GuardResult("literals", True)


def template(query: _Text, cached: _Text) -> GuardResult:
    """Vetoes prompts that begin with the same lines and differ after them, when the shared lines
    (leading and trailing) are most of the text: their cosine is mostly the shared part's, and says
    nothing of what differs. A question worded two ways before the same pasted code or text (no
    shared first line) is left to the other guards: ``literals`` holds the code to every character."""
    left, right = _lines(query.original), _lines(cached.original)
    if len(left) < 2 or len(right) < 2 or left == right:
        return GuardResult("template", True)
    head = 0
    while head < min(len(left), len(right)) and left[head] == right[head]:
        head += 1
    tail = 0
    while tail < min(len(left), len(right)) - head and left[-1 - tail] == right[-1 - tail]:
        tail += 1
    shared = sum(len(line) for line in left[:head] + left[len(left) - tail :])
    longer = max(sum(map(len, left)), sum(map(len, right)))
    if head and shared >= _TEMPLATE_SHARE * longer:
        return GuardResult("template", False, f"{head + tail} shared lines, the others differ")
    return GuardResult("template", True)


def _lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip()]


def _stem(word: str) -> str:
    for suffix in ("ies", "es", "s"):
        if len(word) > len(suffix) + 2 and word.endswith(suffix):
            return word[: -len(suffix)] + ("y" if suffix == "ies" else "")
    return word


_GUARDS: dict[str, Callable[[_Text, _Text], GuardResult]] = {
    "numbers": numbers,
    "negation": negation,
    "antonyms": antonyms,
    "entities": entities,
    "order": order,
    "roles": roles,
    "literals": literals,
    "template": template,
}


def check(query: str, cached: str, enabled: Iterable[str]) -> list[GuardResult]:
    """Run the enabled guards; a candidate may be served only if every result passed."""
    left, right = _Text.of(query), _Text.of(cached)
    return [_GUARDS[name](left, right) for name in enabled]


def validate(names: Iterable[str]) -> list[str]:
    unknown = sorted(set(names) - set(GUARD_NAMES))
    if unknown:
        raise ValueError(f"unknown guards {unknown}; choose from {list(GUARD_NAMES)}")
    return list(dict.fromkeys(names))
