"""``python -m benchmarks.text_scans``: how long each text scan on the request path takes on long
hostile texts, at growing sizes, so that a scan whose time grows faster than its input shows.

Each scan runs once per shape and size; a scan that takes longer than ``--give-up-s`` at one size is
not run at the larger ones (its row shows "-"). The ratio column is the time at the largest size
over the time at the smallest, scaled to their size ratio: about 1 for a linear scan, the size ratio
for a quadratic one.

    python -m benchmarks.text_scans                       # 100 KB, 200 KB and 500 KB
    python -m benchmarks.text_scans --sizes 25000 50000   # quicker
"""

from __future__ import annotations

import argparse
import itertools
import string
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from semcache import instructions, keys, language
from semcache.decision import guards, standalone
from semcache.decision.guards import chinese
from semcache.dialects.completions import CompletionsDialect
from semcache.limits import fit_context
from semcache.tokens import TokenCounter
from semcache.wire import ChatCompletionRequest


def _unique_words(count: int, capital: bool) -> str:
    """``count`` distinct words of letters only ("Qab", "Qac", ...): no word repeats."""
    letters = string.ascii_lowercase
    words = ("q" + "".join(t) for n in itertools.count(2) for t in itertools.product(letters, repeat=n))
    taken = itertools.islice(words, count)
    return " ".join(w.capitalize() if capital else w for w in taken)


def _shape(name: str, size: int) -> str:
    def repeat(unit: str) -> str:
        return (unit * (size // len(unit) + 1))[:size]

    shapes: dict[str, Callable[[], str]] = {
        "one char": lambda: repeat("a"),
        "words": lambda: repeat("the cat sat on the mat "),
        "unique words": lambda: _unique_words(size // 6, capital=False)[:size],
        "Capitalised unique": lambda: _unique_words(size // 6, capital=True)[:size],
        "digits": lambda: repeat("1234567890"),
        "newlines": lambda: repeat("\n"),
        "spaces": lambda: "a" + " " * (size - 2) + "a",
        "backticks": lambda: repeat("`"),
        "fences": lambda: repeat("```x"),
        "punctuation": lambda: repeat("!?.,;:"),
        "CJK": lambda: repeat("你好世界我们的朋友"),
        "CJK numerals": lambda: repeat("一二三四五六七八九十百千万"),
        "CJK spaced": lambda: repeat("你 好 "),
        "not": lambda: repeat("not "),
        "say that": lambda: repeat("say that "),
        "ignore all of": lambda: repeat("ignore all of "),
        "answer:": lambda: repeat("answer: "),
        "full width": lambda: repeat("ＡＢＣ１２３"),
        "mixed scripts": lambda: repeat("aé你ب"),
        "indented": lambda: repeat("    x = 1\n"),
    }
    return shapes[name]()


SHAPES = [
    "one char", "words", "unique words", "Capitalised unique", "digits", "newlines", "spaces", "backticks",
    "fences", "punctuation", "CJK", "CJK numerals", "CJK spaced", "not", "say that", "ignore all of", "answer:",
    "full width", "mixed scripts", "indented",
]  # fmt: skip


def _scans(tokens: TokenCounter) -> dict[str, Callable[[str], object]]:
    def trimmed(text: str) -> object:
        # Turns of a 40-character question each, the text spread over them, under a limit that
        # keeps only the last few: trimming drops nearly all of them.
        turns = max(2, len(text) // 200)
        messages = [{"role": ("user", "assistant")[n % 2], "content": text[n * 200 : n * 200 + 200] or "x"}
                    for n in range(turns)] + [{"role": "user", "content": "What now?"}]  # fmt: skip
        return fit_context(ChatCompletionRequest.model_validate({"model": "gpt-4o", "messages": messages}),
                           tokens, 2000, True)  # fmt: skip

    def completions_view(text: str) -> object:
        return CompletionsDialect({"model": "m", "prompt": text}).chat_view()

    return {
        "keys.normalize": keys.normalize,
        "standalone.reads_standalone": standalone.reads_standalone,
        "language.detect_script": language.detect_script,
        "chinese.numbers": chinese.numbers,
        "guards.check (vs itself + x)": lambda text: guards.check(text, text + " x", guards.GUARD_NAMES),
        "instructions.find": instructions.find_answer_instruction,
        "tokens.count_text": lambda text: tokens.count_text(text, "gpt-4o"),
        "limits.fit_context (trim)": trimmed,
        "completions.chat_view": completions_view,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 200_000, 500_000])
    parser.add_argument("--give-up-s", type=float, default=5.0)
    parser.add_argument("--scan", nargs="*", help="only these scans (names as printed)")
    parser.add_argument("--shape", nargs="*", help="only these shapes")
    options = parser.parse_args()
    sizes = sorted(options.sizes)
    with tempfile.TemporaryDirectory() as folder:
        tokens = TokenCounter(Path(folder))
        scans = _scans(tokens)
        header = f"| scan | shape | {' | '.join(f'{s // 1000} K s' for s in sizes)} | growth / size growth |"
        print(header)
        print("|" + "---|" * (len(sizes) + 3))
        worst: list[tuple[float, str]] = []
        for scan_name, scan in scans.items():
            if options.scan and scan_name not in options.scan:
                continue
            for shape in SHAPES:
                if options.shape and shape not in options.shape:
                    continue
                seconds: list[float | None] = []
                for size in sizes:
                    if seconds and (seconds[-1] is None or seconds[-1] > options.give_up_s):
                        seconds.append(None)
                        continue
                    text = _shape(shape, size)
                    started = time.perf_counter()
                    try:
                        scan(text)
                    except Exception as exc:  # a failure is a finding too: printed, and the size skipped
                        print(f"| {scan_name} | {shape} | {type(exc).__name__} at {size}: {str(exc)[:60]} |")
                        seconds.append(None)
                        continue
                    seconds.append(time.perf_counter() - started)
                cells = " | ".join("-" if s is None else f"{s:.3f}" for s in seconds)
                measured = [(size, s) for size, s in zip(sizes, seconds, strict=True) if s is not None]
                ratio = ""
                if len(measured) > 1 and measured[0][1] > 0.002:
                    (small, first), (large, last) = measured[0], measured[-1]
                    ratio = f"{(last / first) / (large / small):.1f}"
                print(f"| {scan_name} | {shape} | {cells} | {ratio} |", flush=True)
                if measured:
                    worst.append((max(s for _, s in measured), f"{scan_name} on {shape}"))
        print()
        for seconds_taken, what in sorted(worst, reverse=True)[:10]:
            print(f"{seconds_taken:8.3f} s  {what}")


if __name__ == "__main__":
    main()
