"""The ``template`` guard: two prompts of several lines that begin with the same lines, which are
most of their text (a few-shot template, instructions before a filled-in line), and differ after
them ("...cheese => fromage\nplush giraffe =>" vs "...\napple =>"): the shared lines fill the
embedding, and the lines that differ decide the answer."""

from __future__ import annotations

from .reading import GuardResult, Prompt

# The line: shared lines of at least this share of the longer prompt's text.
_TEMPLATE_SHARE = 0.5


def template(query: Prompt, cached: Prompt) -> GuardResult:
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
