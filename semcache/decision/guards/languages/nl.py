"""Dutch (Nederlands): the words the guards read. Plain data; see ``languages/__init__.py``."""

FUNCTION_WORDS = """
de het een en of maar als dan is zijn was waren ben bent heb hebt heeft hebben wordt worden werd kan kun
kunnen kon moet moeten mag ik jij je hij zij ze wij we jullie mij me mijn jouw zijn haar ons onze hun dit dat
deze die wat wie welke hoe waarom waar wanneer hoeveel met van voor op aan bij uit over onder door naar om
ook nog al heel veel er
"""
NEGATIONS = "niet geen nooit niets niks niemand nergens zonder noch"
NEGATIVE_CONCORD = False
NUMBERS = {
    "nul": 0, "twee": 2, "drie": 3, "vier": 4, "vijf": 5, "zes": 6, "zeven": 7, "acht": 8, "negen": 9,
    "tien": 10, "elf": 11, "twaalf": 12, "dertien": 13, "veertien": 14, "vijftien": 15, "twintig": 20,
    "dertig": 30, "veertig": 40, "vijftig": 50, "zestig": 60, "zeventig": 70, "tachtig": 80, "negentig": 90,
    "honderd": 100, "duizend": 1000, "miljoen": 1000000, "miljard": 1000000000,
}  # fmt: skip
NUMBER_LIKE = {"half": 0.5, "halve": 0.5, "dubbel": 2, "dubbele": 2, "dozijn": 12}
ORDINALS = {
    "eerste": 1, "tweede": 2, "derde": 3, "vierde": 4, "vijfde": 5, "zesde": 6, "zevende": 7, "achtste": 8,
    "negende": 9, "tiende": 10, "twintigste": 20, "honderdste": 100,
}  # fmt: skip
ORDINAL_SUFFIXES = "e de ste"
ONE_AS_PRONOUN: list[str] = []  # none listed: its word for one always counts
UNITS = {
    "gram": "g", "kilogram": "kg", "kilo": "kg", "milligram": "mg", "liter": "l", "milliliter": "ml",
    "meter": "m", "kilometer": "km", "centimeter": "cm", "seconde": "s", "seconden": "s", "minuut": "min",
    "minuten": "min", "uur": "h", "uren": "h", "dag": "day", "dagen": "day", "week": "week", "weken": "week",
    "maand": "month", "maanden": "month", "jaar": "year", "jaren": "year", "procent": "%", "graden": "°",
    "calorieën": "kcal",
}  # fmt: skip
MONTHS = {
    "januari": 1, "februari": 2, "maart": 3, "april": 4, "mei": 5, "juni": 6, "juli": 7, "augustus": 8,
    "september": 9, "oktober": 10, "november": 11, "december": 12,
}  # fmt: skip
WEEKDAYS = {
    "maandag": 1, "dinsdag": 2, "woensdag": 3, "donderdag": 4, "vrijdag": 5, "zaterdag": 6, "zondag": 7,
}  # fmt: skip
AMBIGUOUS_DATES = ""
DATE_WORDS = ""
OPPOSITES = [
    ("beste", "slechtste"), ("goed goede", "slecht slechte"), ("beter", "slechter"), ("voordelen", "nadelen"),
    ("kopen", "verkopen"), ("verhogen verhoogt", "verlagen verlaagt"), ("stijgen stijgt", "dalen daalt"),
    ("inschakelen", "uitschakelen"), ("aanzetten", "uitzetten"), ("activeren", "deactiveren"),
    ("groot grote", "klein kleine"), ("groter", "kleiner"), ("grootste", "kleinste"), ("meer", "minder"),
    ("voordat", "nadat"), ("eerder", "later"), ("importeren", "exporteren"),
    ("versleutelen", "ontsleutelen"), ("uploaden", "downloaden"), ("minimum", "maximum"),
    ("goedkoop goedkope", "duur dure"), ("snel snelle", "langzaam langzame"), ("warm", "koud"),
    ("heet", "koud"), ("hoog hoge", "laag lage"), ("hoger", "lager"), ("openen", "sluiten"),
    ("aanmelden", "afmelden"), ("inloggen", "uitloggen"), ("installeren", "verwijderen"),
    ("toevoegen", "verwijderen"), ("begin", "einde"), ("eerste", "laatste"), ("links", "rechts"),
    ("boven", "onder"), ("lang lange", "kort korte"), ("mannen", "vrouwen"), ("man", "vrouw"),
    ("jongen jongens", "meisje meisjes"), ("winnen", "verliezen"), ("makkelijk", "moeilijk"),
    ("rijk", "arm"),
]  # fmt: skip
FROM = "van vanaf uit"
TO = "naar tot in"
ELISIONS = ""
