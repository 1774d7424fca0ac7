"""German (Deutsch): the words the guards read. Plain data; see ``languages/__init__.py``."""

FUNCTION_WORDS = """
der die das den dem des ein eine einen einem einer eines und oder aber wenn dann ist sind war waren bin bist
hat haben hatte wird werden wurde kann können könnte soll sollte muss müssen darf ich du er sie es wir ihr
mich mir dich dir sich uns euch mein meine dein deine sein seine unser wie was wer wo wann warum wieso welche
welcher welches mit von zu für auf im am um über unter bei nach aus durch gegen ohne auch noch schon nur sehr
viel viele man gibt es mehr
"""
NEGATIONS = "nicht kein keine keinen keinem keiner keines nie niemals nichts niemand nirgends nirgendwo ohne weder"
NEGATIVE_CONCORD = False
NUMBERS = {
    "null": 0, "eins": 1, "zwei": 2, "drei": 3, "vier": 4, "fünf": 5, "sechs": 6, "sieben": 7, "acht": 8,
    "neun": 9, "zehn": 10, "elf": 11, "zwölf": 12, "dreizehn": 13, "vierzehn": 14, "fünfzehn": 15,
    "sechzehn": 16, "siebzehn": 17, "achtzehn": 18, "neunzehn": 19, "zwanzig": 20, "dreißig": 30,
    "vierzig": 40, "fünfzig": 50, "sechzig": 60, "siebzig": 70, "achtzig": 80, "neunzig": 90, "hundert": 100,
    "tausend": 1000, "million": 1000000, "millionen": 1000000, "milliarde": 1000000000,
}  # fmt: skip
NUMBER_LIKE = {"halb": 0.5, "halbe": 0.5, "halben": 0.5, "doppelt": 2, "doppelte": 2, "dutzend": 12}
ORDINALS = {
    f"{stem}{ending}": value
    for stem, value in {
        "erst": 1, "zweit": 2, "dritt": 3, "viert": 4, "fünft": 5, "sechst": 6, "siebt": 7, "acht": 8,
        "neunt": 9, "zehnt": 10, "elft": 11, "zwölft": 12, "zwanzigst": 20, "hundertst": 100,
    }.items()
    for ending in ("e", "en", "er", "es", "em")
}  # fmt: skip
ORDINAL_SUFFIXES = ""  # German writes "1." for "first": the digit alone
ONE_AS_PRONOUN: list[str] = []  # none listed: its word for one always counts
UNITS = {
    "gramm": "g", "kilogramm": "kg", "kilo": "kg", "milligramm": "mg", "pfund": "lb", "liter": "l",
    "milliliter": "ml", "meter": "m", "kilometer": "km", "zentimeter": "cm", "millimeter": "mm",
    "sekunde": "s", "sekunden": "s", "minute": "min", "minuten": "min", "stunde": "h", "stunden": "h",
    "std": "h", "tag": "day", "tage": "day", "tagen": "day", "woche": "week", "wochen": "week",
    "monat": "month", "monate": "month", "monaten": "month", "jahr": "year", "jahre": "year", "jahren": "year",
    "prozent": "%", "grad": "°", "kalorien": "kcal",
}  # fmt: skip
MONTHS = {
    "januar": 1, "jänner": 1, "februar": 2, "märz": 3, "april": 4, "mai": 5, "juni": 6, "juli": 7,
    "august": 8, "september": 9, "oktober": 10, "november": 11, "dezember": 12,
}  # fmt: skip
WEEKDAYS = {
    "montag": 1, "dienstag": 2, "mittwoch": 3, "donnerstag": 4, "freitag": 5, "samstag": 6, "sonnabend": 6,
    "sonntag": 7,
}  # fmt: skip
AMBIGUOUS_DATES = ""
DATE_WORDS = ""
OPPOSITES = [
    ("beste besten", "schlechteste schlechtesten"), ("gut gute guten", "schlecht schlechte schlechten"),
    ("besser", "schlechter"), ("vorteile", "nachteile"), ("kaufen", "verkaufen"),
    ("erhöhen erhöht", "senken senkt verringern verringert"), ("steigen steigt", "sinken sinkt fallen fällt"),
    ("aktivieren aktiviert", "deaktivieren deaktiviert"), ("einschalten", "ausschalten"),
    ("anschalten", "ausschalten"), ("groß große großen", "klein kleine kleinen"), ("größer", "kleiner"),
    ("größte größten", "kleinste kleinsten"), ("mehr", "weniger"), ("meisten", "wenigsten"),
    ("vor", "nach"), ("vorher", "nachher"), ("früher", "später"), ("importieren", "exportieren"),
    ("import", "export"), ("verschlüsseln verschlüsselt", "entschlüsseln entschlüsselt"),
    ("hochladen", "herunterladen"), ("minimum", "maximum"), ("billig billiger", "teuer teurer"),
    ("schnell schneller", "langsam langsamer"), ("heiß", "kalt"), ("warm", "kalt"), ("hoch", "niedrig"),
    ("höher", "niedriger"), ("öffnen", "schließen"), ("anmelden", "abmelden"), ("einloggen", "ausloggen"),
    ("installieren", "deinstallieren"), ("hinzufügen", "entfernen"), ("anfang", "ende"),
    ("erste ersten", "letzte letzten"), ("links", "rechts"), ("oben", "unten"), ("lang länger", "kurz kürzer"),
    ("männer", "frauen"), ("mann", "frau"), ("junge", "mädchen"), ("an", "aus"),
    ("einfuhr", "ausfuhr"), ("plus", "minus"), ("leicht", "schwer"), ("gewinnen", "verlieren"),
]  # fmt: skip
FROM = "von vom aus"
TO = "nach zu zum zur in ins"
ELISIONS = ""
