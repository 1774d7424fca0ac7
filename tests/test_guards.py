"""Guards veto candidates whose meaning differs in ways embeddings miss."""

from __future__ import annotations

import pytest

from semcache.decision import guards

LOOP = "for i in range(3):\n    print(i)"


def verdicts(query: str, cached: str) -> dict[str, bool]:
    return {r.guard: r.passed for r in guards.check(query, cached, guards.GUARD_NAMES)}


@pytest.mark.parametrize(
    ("query", "cached", "guard"),
    [
        ("After 3 months, can I re-enter the US?", "After 5 months, can I re-enter the US?", "numbers"),
        ("What kind of economy does Ukraine have in 2014?", "What kind of economy does Ukraine have?", "numbers"),
        ("Why can't I sleep at night?", "Why can I sleep at night?", "negation"),
        ("What are the worst dating sites?", "What are the best dating sites?", "antonyms"),
        ("Where can I buy Guinness in the UK?", "Where can I buy Guinness in the US?", "entities"),
        ("Are towns in Idaho nice for hikers?", "Are towns in Montana nice for hikers?", "entities"),
        ("Where does Dane live now?", "Where does Dan live now?", "entities"),
        ("Is it hard to learn CSS?", "Is it hard to learn CS?", "entities"),  # a short name as it is
        ("Which is the 2nd largest city in Spain?", "Which are the 2 largest cities in Spain?", "entities"),
        ("¿Vale la pena comprar el Pixel 7a?", "¿Vale la pena comprar el Pixel 7?", "entities"),
        ("Did Kobe ever beat LeBron in a playoff series?", "Has LeBron ever beaten Kobe in the playoffs?", "order"),
        ("Did Apple buy shares of Google?", "Has Google bought shares in Apple?", "order"),
        ("What does LeBron James think of Kobe Bryant?", "What does Kobe Bryant think of LeBron James?", "order"),
        ("Are cats afraid of tigers?", "Are tigers afraid of cats?", "order"),
        ("Can type A blood be given to type B?", "Can type B blood be given to type A?", "order"),
        ("Can someone with type A blood donate to type B?", "Can type B donors give to type A people?", "order"),
        ("What causes vitamin D deficiency?", "What does vitamin D deficiency cause?", "order"),
        ("Do tumors cause headaches?", "Does a headache cause tumors?", "order"),
        ("What is 2³?", "What is 23?", "numbers"),
        ("Can I return shoes after one week?", "Can I return shoes after two weeks?", "numbers"),
        ("Who was the first king of Spain?", "Who was the king of Spain?", "numbers"),
        ("What if I miss one birth control pill?", "What if I miss several birth control pills?", "numbers"),
        ("Is one glass of wine safe in pregnancy?", "Is wine safe in pregnancy?", "numbers"),
        ("Should I buy one or two monitors?", "Should I buy two monitors?", "numbers"),
        ("How can one lose 5 kg in a month?", "How can I lose 10 kg in a month?", "numbers"),
        ("Is 1 coffee a day bad for you?", "Is a coffee a day bad for you?", "numbers"),
        ("Why isnt my printer working?", "Why is my printer working?", "negation"),
        ("Do cats dream?", "Dont cats dream?", "negation"),
        ("Why do I sleep more in winter?", "Why do I sleep less in winter?", "antonyms"),
        ("Is the pharmacy open at 8 am?", "Is the pharmacy open at 8 pm?", "numbers"),
        ("Is the pharmacy open at 8 a.m.?", "Is the pharmacy open at 8 p.m.?", "numbers"),
        ("Is the pharmacy open at 8a.m.?", "Is the pharmacy open at 8p.m.?", "numbers"),
        ("Open at 8am.What about Sunday?", "Open at 9am.What about Sunday?", "numbers"),
        ("What is 2³?", "What is 23?", "literals"),
        ("What does `ls -R` do?", "What does `ls -r` do?", "literals"),
        ("What does ls -R do?", "What does ls -r do?", "literals"),
        ("What is 6!?", "What is 6?", "literals"),
        ("Is -5 squared 25?", "Is 5 squared 25?", "literals"),
        ("What is C++ used for?", "What is C used for?", "literals"),
        ("What does os.path do?", "What does os_path do?", "literals"),
        ("In Python, what does 7 / 3 evaluate to?", "In Python, what does 7 - 3 evaluate to?", "literals"),
        ("What does ls –R do?", "What does ls –r do?", "literals"),  # an en dash, as word processors type it
        ("What does LIKE 'abc%' match?", "What does LIKE '%abc' match?", "literals"),
        ("Is print x valid Python 3 syntax?", "Is print(x) valid Python 3 syntax?", "literals"),
        ("What does echo $HOME print?", "What does echo HOME print?", "literals"),
        ("What does s/a/b/g do in sed?", "What does s/a/b/ do in sed?", "literals"),
        ("What does rm -rf /tmp/x do?", "What does rm -rf /tmp/y do?", "literals"),
        ("Fix this:\n```\nif x:\n    y()\n```", "Fix this:\n```\nif x:\ny()\n```", "literals"),
        (
            "What does this print?\nfor i in range(3):\n    print(i)\nprint('done')",
            "What does this print?\nfor i in range(3):\n    print(i)\n    print('done')",
            "literals",
        ),
    ],
)
def test_a_guard_vetoes_each_kind_of_wrong_match(query: str, cached: str, guard: str) -> None:
    assert verdicts(query, cached)[guard] is False
    assert verdicts(cached, query)[guard] is False


@pytest.mark.parametrize(
    ("query", "cached"),
    [
        ("How do I learn Python quickly?", "How can I learn python fast?"),
        ("What are the top three qualities of a leader?", "What are the top 3 qualities of a leader?"),
        ("How are satellites launched into orbit?", "How is a satellite launched into orbit?"),
        ("Why doesn't my code compile?", "Why does my code not compile?"),
        ("What is Yorker in cricket? Explain.", "What is a yorker in cricket?"),
        ("what is the capital of france", "What is the capital of France?"),  # sentence case, no "?"
        ("Hello! How do I use `git rebase -i`?", "hello, how can I use `git rebase -i`"),
        ("Node.js vs Deno: which is faster?", "node.js vs Deno, which is faster?"),
        ("What painting/drawing describes you?", "What painting or drawing describes you?"),  # prose's slash
        ("Which song(s) do you play on loop?", "Which songs do you play on loop?"),
        ("How can one learn to juggle?", "How do I learn to juggle?"),  # "one" as a pronoun
        ("Why does no one answer my emails?", "Why does nobody answer my emails?"),
        ("Which one is better for pasta, olive oil or butter?", "Is olive oil or butter better for pasta?"),
        ("Can I return shoes after one week?", "Can I return shoes after 1 week?"),
        ("Why isnt my printer working?", "Why isn't my printer working?"),  # no apostrophe
        ("What causes headaches?", "What are the causes of a headache?"),  # one stem for cause and causes
        ("Do phones cause headaches?", "Can a phone cause a headache?"),
        ("Is the pharmacy open at 8 a.m.?", "Is the pharmacy open at 8 am?"),
        ("Is the pharmacy open at 8 a.m.?", "Is the pharmacy open at 8am?"),  # a time, not a name
        ("Is the pharmacy open at 8pm?", "Is the pharmacy open at 8 PM?"),
        ("Should I take 100mg of ibuprofen?", "Should I take 100 mg of ibuprofen?"),
        ("Are Toyotas reliable cars?", "Is a Toyota a reliable car?"),
        ("Is hiking in the Rockies safe in winter?", "Is hiking in the Rocky mountains safe in winter?"),
        ("What does this print?\n" + LOOP, "What is the output?\n" + LOOP),  # the question around code
    ],
)
def test_true_paraphrases_pass_every_guard(query: str, cached: str) -> None:
    assert all(verdicts(query, cached).values()), verdicts(query, cached)


@pytest.mark.parametrize(
    ("query", "cached"),
    [
        ("Is the pharmacy open at 8a.m.?", "Is the pharmacy open at 8 am?"),
        ("Open at 8am.What about Sunday?", "Open at 8am.And on Sunday?"),  # no space after the stop
        ("Why the 1960s.Why then?", "Why the 1960s.How come?"),
    ],
)
def test_numbers_reads_a_unit_however_it_is_typed(query: str, cached: str) -> None:
    assert verdicts(query, cached)["numbers"] is True


def test_results_explain_the_veto() -> None:
    [result] = guards.check("Is 2015 a leap year?", "Is 2016 a leap year?", ["numbers"])
    assert not result.passed and "2015" in result.detail and "2016" in result.detail


def test_unknown_guard_names_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown guards"):
        guards.validate(["numbers", "astrology"])


def test_literals_may_come_in_any_order() -> None:
    [result] = guards.check("What does `fs.ls` list, given `fs`?", "Given `fs`, what does `fs.ls` list?", ["literals"])
    assert result.passed


FEW_SHOT = "Translate English to French:\nsea otter => loutre de mer\npeppermint => menthe poivrée\ncheese => fromage\n"


@pytest.mark.parametrize(
    ("query", "cached"),
    [
        (FEW_SHOT + "plush giraffe =>", FEW_SHOT + "apple =>"),
        (FEW_SHOT + "The weather in Paris today is", FEW_SHOT + "The weather in London today is"),
        (
            "You are a careful translator.\nTranslate: good morning\nInto: French",
            "You are a careful translator.\nTranslate: good night\nInto: French",
        ),
    ],
)
def test_template_vetoes_another_fill_of_mostly_shared_lines(query: str, cached: str) -> None:
    (result,) = guards.check(query, cached, ["template"])
    assert not result.passed and "shared lines" in result.detail


@pytest.mark.parametrize(
    ("query", "cached"),
    [
        ("How do I learn Python quickly?", "How can I learn Python fast?"),  # one line each
        (FEW_SHOT + "apple =>", FEW_SHOT + "apple =>"),  # the same text
        ("Hi.\nWhat is the best way to learn Python as a complete beginner?",
         "Hi.\nHow should a complete beginner start learning the Python language?"),  # little shared
    ],
)  # fmt: skip
def test_template_passes_prompts_that_are_not_one_template_filled_differently(query: str, cached: str) -> None:
    (result,) = guards.check(query, cached, ["template"])
    assert result.passed


@pytest.mark.parametrize(
    ("query", "cached", "guard"),
    [
        ("Is 100g of sugar a day too much?", "Is 200g of sugar a day too much?", "numbers"),
        ("Is 400mg of ibuprofen safe?", "Is 400g of ibuprofen safe?", "numbers"),
        ("Is a 3 month warranty enough?", "Is a 3 year warranty enough?", "numbers"),
        ("Who won the 2nd prize?", "Who won the 3rd prize?", "numbers"),
        ("Who won the second prize?", "Who won the 3rd prize?", "numbers"),
        ("Wie koche ich Reis für zwei Personen?", "Wie koche ich Reis für drei Personen?", "numbers"),
        ("Qui a gagné le deuxième prix ?", "Qui a gagné le troisième prix ?", "numbers"),
        ("Is it cold in Oslo in May?", "Is it cold in Oslo in June?", "dates"),
        ("Quel temps fait-il en mars ?", "Quel temps fait-il en avril ?", "dates"),
        ("Is the museum open on Monday?", "Is the museum open on Tuesday?", "dates"),
        ("How do I convert Celsius to Fahrenheit?", "How do I convert Fahrenheit to Celsius?", "direction"),
        ("Trains from Paris to Berlin?", "Trains from Berlin to Paris?", "direction"),
        ("Wie rechne ich Euro in Dollar um?", "Wie rechne ich Dollar in Euro um?", "direction"),
        ("How do I enable dark mode?", "How do I disable dark mode?", "antonyms"),
        ("How do I raise the volume?", "How do I lower the volume?", "antonyms"),
        ("¿Cómo enciendo el wifi?", "¿Cómo apago el wifi?", "antonyms"),
        ("¿Cómo activo el modo avión?", "¿Cómo desactivo el modo avión?", "antonyms"),
        ("Warum bellt mein Hund?", "Warum bellt mein Hund nicht?", "negation"),
        ("Pourquoi mon chat dort-il ?", "Pourquoi mon chat ne dort-il pas ?", "negation"),
        ("¿Por qué llueve?", "¿Por qué no llueve nada?", "negation"),  # "no ... nada" is one negation
        ("为什么猫喜欢鱼", "为什么猫不喜欢鱼", "negation"),
        ("每天吃100毫克维生素C", "每天吃100克维生素C", "numbers"),
        ("怎么增加音量", "怎么减少音量", "antonyms"),
    ],
)
def test_the_guards_read_every_language(query: str, cached: str, guard: str) -> None:
    assert verdicts(query, cached)[guard] is False
    assert verdicts(cached, query)[guard] is False


@pytest.mark.parametrize(
    ("query", "cached"),
    [
        ("Is 100g of sugar too much?", "Is 100 grams of sugar too much?"),
        ("Who won the 2nd prize?", "Who won the second prize?"),
        ("What about twenty two people?", "What about 22 people?"),
        ("Can I visit in May?", "Can I visit in May, please?"),
        ("How do I treat a cold?", "May I know how to treat a cold?"),  # "May" the verb is no month
        ("Trains from Paris to Berlin?", "Trains to Berlin from Paris?"),
        ("How to convert PDF to Word?", "How can I convert PDF to Word?"),
        ("Wie koche ich Reis für zwei Personen?", "Wie koche ich bitte Reis für zwei Personen?"),
        ("Il fait combien en mars ?", "En mars, il fait combien ?"),
        ("¿Por qué no llueve nada?", "¿Por qué nunca llueve?"),  # negated both sides
        ("这个手机非常好用吗", "这个手机好用吗"),  # 非常 is "very"
        ("能不能取消借款", "可以取消借款吗"),  # an A-not-A question asks, it negates nothing
        ("你是否喜欢猫", "你喜欢猫吗"),
        ("Why does my cat eat grass once a day?", "Why does my cat eat grass daily?"),  # "once" is no Spanish 11 here
    ],
)
def test_rewordings_in_every_language_pass_every_guard(query: str, cached: str) -> None:
    failed = {name: ok for name, ok in verdicts(query, cached).items() if not ok and name not in ("entities", "order")}
    assert not failed, failed


@pytest.mark.parametrize(
    ("query", "cached"),
    [
        ("Can type A blood be given to type B?", "Can someone of type A give blood to type B?"),
        ("Should I take vitamin D daily?", "Is it good to take vitamin D every day?"),
        ("A dog bit me, what should I do?", "What should I do, a dog bit me?"),  # an article, not a label
        ("Can I get a refund?", "May I get a refund?"),  # the pronoun, not a label
    ],
)
def test_a_letter_naming_a_kind_keeps_its_place_in_a_rewording(query: str, cached: str) -> None:
    assert verdicts(query, cached)["order"] is True
    assert verdicts(cached, query)["order"] is True


def test_a_number_of_thousands_of_digits_is_compared_as_written() -> None:
    digits = "7" * 25_000  # past Python's limit on converting digits to an int
    assert all(verdicts(f"Is {digits} prime?", f"Is {digits} prime?").values())
    assert not verdicts(f"Is {digits} prime?", f"Is {digits[:-1]}8 prime?")["numbers"]


def test_a_prompt_read_before_gives_the_same_verdicts_and_long_ones_are_not_kept() -> None:
    """Readings are kept between checks (a stored prompt is checked again and again, a query against
    each of its candidates); a reading kept gives the verdicts a fresh one gives, on either side."""
    stored = "How many calories are in 100g of rice?"
    queries = ["How many calories are in 200g of rice?", "How many calories in 100 g of rice?", "Wie viele Kalorien?"]
    fresh = [[r.passed for r in guards.check(query, stored, guards.GUARD_NAMES)] for query in queries]
    kept = [[r.passed for r in guards.check(query, stored, guards.GUARD_NAMES)] for query in queries]
    assert fresh == kept and fresh[0] != fresh[1]
    swapped = [[r.passed for r in guards.check(stored, query, guards.GUARD_NAMES)] for query in queries]
    assert swapped == fresh  # each query's kept reading, now on the stored side
    assert guards._kept_or_read(stored) is guards._kept_or_read(stored)
    long = "Why? " * 300
    assert guards._kept_or_read(long) is not guards._kept_or_read(long)


def test_a_kept_reading_of_a_stored_prompt_is_by_the_languages_it_is_read_in() -> None:
    """A stored prompt is read in the languages of both sides: "zwei" is no number beside an
    English query and 2 beside a German one, however often and in whatever order it is checked."""
    stored = "Is a table for zwei free tonight?"
    english, german = "Is a table for two free tonight?", "Ist ein Tisch für zwei heute frei?"
    for query, passes in [(english, False), (german, True), (english, False), (german, True)]:
        assert verdicts(query, stored)["numbers"] is passes, query
