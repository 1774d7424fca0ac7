"""How the replays' stand-in upstream words its answers: as differently as a model words two answers
to one question, and as alike as a model's answers to look-alike questions read.

A model never says one answer twice in the same words, and an answer judge that compares answers'
embeddings errs most where questions look alike. So an answer here is built from sentences drawn
anew on every call:

- a restatement of the question, in one of several forms (the prompt as asked, the cluster's first
  question, or its key words);
- sentences that say a few of the cluster's facts, each time another subset in other connectives,
  around the question's key words. A cluster's facts follow from its first question's key words,
  so questions that share words share facts, as a model's answers to look-alike questions say some
  of the same things;
- sentences common to every topic (caveats, suggestions, courtesies), ``common_share`` of them.
  Near 1, answers share most of their sentences across topics, as a support bot's templated
  answers do: one stock slot names two of the topic's facts.

``tests/test_evaluation_trace.py`` holds the hardness this gives with the shipped embedding model,
and ``python -m benchmarks.standin_wording`` prints it on the labelled traces.
"""

from __future__ import annotations

import random
import re
import zlib

from ..decision.guards.reading import STOPWORDS

# A cluster's facts are ordinary words, drawn from these: per key word of its first question, and
# by a seed of the cluster's name.
VOCABULARY = """apple anchor arrow badge basket beacon bridge bucket butter cabin camera candle canyon carpet
castle cedar chalk cherry chimney circle clover coffee comet copper cotton crystal desert diamond dolphin dragon
drum eagle engine falcon feather fence fiddle forest fossil fountain garden garlic glacier glove granite harbor
hammer helmet honey horizon island ivory jacket jungle kettle kingdom ladder lantern lemon library lizard magnet
maple marble meadow mirror monkey mountain needle oasis ocean olive orchard oyster paddle palace panther parrot
pebble pepper piano pillow pirate planet pocket pony puzzle quartz rabbit radio raven ribbon river rocket saddle
salmon satellite scarf shadow shell silver sketch sparrow spider spoon statue stone sugar summit teapot temple
thunder tiger timber tomato tower tractor trumpet tunnel turtle umbrella valley velvet violin volcano wagon
walnut whale whistle willow window winter wizard wolf yacht zebra acorn bamboo barrel biscuit blanket bottle
breeze cactus canvas cargo cello cobalt compass coral cricket cushion daisy dune ember fabric ferry fig flute
galaxy gravel guitar hazel hedge igloo ink jasmine jelly kayak kiwi lagoon lava lilac lobster mango meteor mint
mosaic moss nectar nickel noodle nutmeg onion opal orbit owl paprika peach pearl pine plum prism pumpkin quill
raisin reef saffron sapphire scroll sequoia shovel slate sponge spruce tulip tundra vanilla vase walrus wheat
yarn zinc almond basil beetle bison cabbage cinnamon cocoa dahlia denim elm fern glider goose harp heron iris
juniper lemur lotus mackerel marsh mustard nylon obsidian pecan poplar quince radish rattan ruby sage sesame
sorrel thyme topaz truffle velcro wasp yeast zucchini""".split()
FACTS = 8  # a cluster's facts
FACTS_PER_KEY_WORD = 3  # facts that follow from each key word of its first question, before its own
KEY_WORDS_SAID = 3  # key words of the question in a sentence of facts
SENTENCES = (5, 7)  # an answer's sentences, its opening and closing aside
DEFAULT_COMMON_SHARE = 0.3
_WORD = re.compile(r"[A-Za-z][A-Za-z'-]*")

# Sentences said whatever the question. An answer's share of them is drawn from the first few, so
# that answers repeat them, as a model's habits and a support bot's stock sentences are repeated.
COMMON = (
    "The exact details can depend on your account, your version and the settings you have chosen.",
    "If anything here does not match what you see on your screen, please check the official help pages.",
    "Keep in mind that policies and features change over time, so what worked last year may differ now.",
    "If the problem continues after following these steps, contacting support is the quickest next step.",
    "Many people find it useful to try these steps once on something unimportant before relying on them.",
    "Thanks for reaching out, this is a question we hear often and it is worth getting right.",
    "We hope this helps, and feel free to ask a follow-up question if something is still unclear.",
    "Reading a few different sources and reviews will give you a more balanced picture.",
    "Your own experience may differ, depending on your country, your device and the service you use.",
    "It is worth double-checking anything that costs money or cannot be undone.",
)
OPENINGS = ("", "", "Good question.", "Sure.", "Short answer first, then the details.", "Here is what I would say.")
CLOSINGS = ("", "", "Hope that helps.", "Good luck with it.", "That is the gist of it.", "Let me know how it goes.")
RESTATEMENTS = ('You asked: "{prompt}"', 'On "{topic}":', "About {keys}.", "So: {prompt}")
# Sentences of one fact ({a}) or two ({a}, {b}), with key words of the question ({k}).
ONE_FACT = (
    "The {a} is what matters most for {k}.",
    "Most of {k} comes down to the {a}.",
    "People often overlook the {a} when it comes to {k}.",
    "A good {a} makes {k} much easier.",
    "Think of the {a} as the key to {k}.",
    "Without the {a}, {k} rarely works out.",
)
TWO_FACTS = (
    "For {k}, start with the {a}, then look at the {b}.",
    "Both the {a} and the {b} play a part in {k}.",
    "Compare the {a} with the {b} before you decide on {k}.",
    "For {k}, the {a} and the {b} are worth checking first.",
)
# The one topical sentence of an answer with room for no other: a template's slot.
SLOT = "The key points are {a} and {b}."


def key_words(text: str) -> list[str]:
    """The words of ``text`` that say what it is about: no function words, in order, once each."""
    words = [w.lower() for w in _WORD.findall(text)]
    return list(dict.fromkeys(w for w in words if w not in STOPWORDS and len(w) > 2)) or ["this"]


def cluster_facts(cluster: str, topic: str) -> list[str]:
    """The facts every answer about ``cluster`` (first asked as ``topic``) draws on, the same on
    every call: those of its topic's key words first, then its own."""
    shared = [fact for word in key_words(topic)
              for fact in random.Random(zlib.crc32(word.encode())).sample(VOCABULARY, FACTS_PER_KEY_WORD)]  # fmt: skip
    own = random.Random(zlib.crc32(cluster.encode())).sample(VOCABULARY, FACTS)
    return list(dict.fromkeys(shared + own))[:FACTS]


class AnswerWording:
    """Words answers about a cluster's topic, deterministic given ``seed`` and the order of calls.
    ``common_share`` is the share of an answer's sentences common to every topic."""

    def __init__(self, seed: int, common_share: float = DEFAULT_COMMON_SHARE) -> None:
        if not 0.0 <= common_share < 1.0:
            raise ValueError("common_share is a share from 0 up to, not including, 1")
        self._rng = random.Random(seed)
        self.common_share = common_share

    def answer(self, prompt: str, topic: str, cluster: str, number: int) -> str:
        """An answer to ``prompt`` about ``cluster``; ``number`` makes it unique."""
        rng = self._rng
        sentences = rng.randint(*SENTENCES)
        common = min(round(sentences * self.common_share), sentences - 1, len(COMMON))
        topical = sentences - common
        facts = cluster_facts(cluster, topic)
        rng.shuffle(facts)
        if topical == 1:
            body = [SLOT.format(a=facts[0], b=facts[1])]
        else:  # a restatement, then sentences of facts
            keys = list(dict.fromkeys(key_words(topic) + key_words(prompt)))
            body = [self._facts_sentence(facts, keys) for _ in range(topical - 1)]
        body += rng.sample(COMMON[: common + 1], common)
        rng.shuffle(body)
        if topical > 1:
            form = rng.choice(RESTATEMENTS)
            body.insert(0, form.format(prompt=prompt.strip(), topic=topic, keys=" ".join(key_words(prompt)[:5])))
        parts = [rng.choice(OPENINGS), *body, f"(Answer {number}.)", rng.choice(CLOSINGS)]
        return " ".join(part for part in parts if part)

    def _facts_sentence(self, facts: list[str], keys: list[str]) -> str:
        """A sentence of the next one or two ``facts`` (taken from the front, then put at the back:
        a long answer says some again) and a few key words."""
        rng = self._rng
        two = rng.random() < 0.5
        template = rng.choice(TWO_FACTS if two else ONE_FACT)
        said = [facts.pop(0) for _ in range(1 + two)]
        facts.extend(said)
        return template.format(a=said[0], b=said[-1], k=" ".join(rng.sample(keys, min(KEY_WORDS_SAID, len(keys)))))
