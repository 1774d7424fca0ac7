"""English: the words the guards read. Plain data; see ``languages/__init__.py`` for each name."""

FUNCTION_WORDS = """
a an the and or but if then so of to in on at by for with from into about as is are was were be been being am
do does did have has had i me my we our you your he his she her it its they them their what which who whom
whose when where why how this that these those there here can could should would will shall may might must
some any all each every very much many than too also just only
"""
# With the contractions written without their apostrophe, as people type them ("isnt", "dont").
NEGATIONS = """
not no never none nobody nothing neither nor without cannot nowhere isnt arent wasnt werent dont doesnt didnt
hasnt havent hadnt cant couldnt wouldnt shouldnt wont mustnt neednt aint
"""
NEGATIVE_CONCORD = False
NUMBERS = {
    "zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
    "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14, "fifteen": 15,
    "sixteen": 16, "seventeen": 17, "eighteen": 18, "nineteen": 19, "twenty": 20, "thirty": 30, "forty": 40,
    "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80, "ninety": 90, "hundred": 100, "thousand": 1000,
    "million": 1000000, "billion": 1000000000,
}  # fmt: skip
# Words for a number that are not counting words: never joined into "twenty two".
NUMBER_LIKE = {"half": 0.5, "single": 1, "double": 2, "twice": 2, "triple": 3, "dozen": 12}
ORDINALS = {
    "first": 1, "second": 2, "third": 3, "fourth": 4, "fifth": 5, "sixth": 6, "seventh": 7, "eighth": 8,
    "ninth": 9, "tenth": 10, "eleventh": 11, "twelfth": 12, "twentieth": 20, "hundredth": 100,
}  # fmt: skip
ORDINAL_SUFFIXES = "st nd rd th"
# Phrases in which "one" stands for a person or a thing, or for "several", and is no number
# ("How can one learn ...", "which one", "more than one"); a "one" that ends a prompt is one too.
ONE_AS_PRONOUN = [
    "how can one", "how does one", "how do one", "how should one", "how would one", "how could one", "how will one",
    "what can one", "what does one", "what should one", "what would one", "where can one", "where does one",
    "where should one", "why would one", "why does one", "why should one", "when does one", "when should one",
    "which one", "this one", "that one", "no one", "some one", "any one", "every one", "each one", "another one",
    "other one", "new one", "right one", "best one", "better one", "particular one", "same one", "more than one",
    "one by one", "one another",
]  # fmt: skip
UNITS = {
    "g": "g", "gram": "g", "grams": "g", "gramme": "g", "grammes": "g", "kg": "kg", "kilo": "kg", "kilos": "kg",
    "kilogram": "kg", "kilograms": "kg", "mg": "mg", "milligram": "mg", "milligrams": "mg", "mcg": "µg",
    "µg": "µg", "ug": "µg", "microgram": "µg", "micrograms": "µg", "lb": "lb", "lbs": "lb", "pound": "lb",
    "pounds": "lb", "oz": "oz", "ounce": "oz", "ounces": "oz", "ml": "ml", "milliliter": "ml",
    "milliliters": "ml", "millilitre": "ml", "millilitres": "ml", "l": "l", "liter": "l", "liters": "l",
    "litre": "l", "litres": "l", "cl": "cl", "dl": "dl", "km": "km", "kilometer": "km", "kilometers": "km",
    "kilometre": "km", "kilometres": "km", "m": "m", "meter": "m", "meters": "m", "metre": "m", "metres": "m",
    "cm": "cm", "centimeter": "cm", "centimeters": "cm", "centimetre": "cm", "centimetres": "cm", "mm": "mm",
    "millimeter": "mm", "millimeters": "mm", "mi": "mi", "mile": "mi", "miles": "mi", "ft": "ft", "foot": "ft",
    "feet": "ft", "inch": "in", "inches": "in", "yd": "yd", "yard": "yd", "yards": "yd", "s": "s", "sec": "s",
    "secs": "s", "seconds": "s", "ms": "ms", "millisecond": "ms", "milliseconds": "ms", "h": "h", "hr": "h",
    "hrs": "h", "hour": "h", "hours": "h", "min": "min", "mins": "min", "minute": "min", "minutes": "min",
    "day": "day", "days": "day", "week": "week", "weeks": "week", "month": "month", "months": "month",
    "year": "year", "years": "year", "yr": "year", "yrs": "year", "kb": "kb", "mb": "mb", "gb": "gb", "tb": "tb",
    "byte": "byte", "bytes": "byte", "bit": "bit", "bits": "bit", "kbps": "kbps", "mbps": "mbps",
    "gbps": "gbps", "hz": "hz", "khz": "khz", "mhz": "mhz", "ghz": "ghz", "w": "w", "watt": "w", "watts": "w",
    "kw": "kw", "kwh": "kwh", "v": "v", "volt": "v", "volts": "v", "mah": "mah", "percent": "%",
    "cal": "kcal", "kcal": "kcal", "calorie": "kcal", "calories": "kcal", "degree": "°", "degrees": "°",
    "am": "am", "pm": "pm", "a.m": "am", "p.m": "pm",
}  # fmt: skip
MONTHS = {
    "january": 1, "jan": 1, "february": 2, "feb": 2, "march": 3, "april": 4, "apr": 4, "may": 5, "june": 6,
    "jun": 6, "july": 7, "jul": 7, "august": 8, "aug": 8, "september": 9, "sep": 9, "sept": 9, "october": 10,
    "oct": 10, "november": 11, "nov": 11, "december": 12, "dec": 12,
}  # fmt: skip
WEEKDAYS = {
    "monday": 1, "tuesday": 2, "wednesday": 3, "thursday": 4, "friday": 5, "saturday": 6, "sunday": 7,
}  # fmt: skip
# Names of months or days that are common words too: read only beside a number ("May 5") or
# after one of DATE_WORDS ("in May").
AMBIGUOUS_DATES = "may march august"
DATE_WORDS = "in on since until till by before after during early late mid next last this of from to"
# Each pair: the forms of one word, then the forms of its opposite.
OPPOSITES = [
    ("best", "worst"), ("good", "bad"), ("better", "worse"), ("most", "least"), ("pros", "cons"),
    ("advantage advantages", "disadvantage disadvantages"), ("buy buying", "sell selling"),
    ("increase increased increases increasing", "decrease decreased decreases decreasing"),
    ("before", "after"), ("male", "female"), ("men", "women"), ("man", "woman"), ("boy boys", "girl girls"),
    ("husband", "wife"), ("cheap cheapest", "expensive"), ("easy easiest", "hard hardest"), ("love", "hate"),
    ("like", "hate"), ("positive", "negative"), ("rich", "poor"), ("high", "low"), ("higher", "lower"),
    ("highest", "lowest"), ("fast faster fastest", "slow slower slowest"), ("start", "stop"),
    ("import importing", "export exporting"), ("win", "lose"), ("true", "false"), ("legal", "illegal"),
    ("safe", "dangerous"), ("north", "south"), ("east", "west"), ("old", "new"), ("oldest", "newest"),
    ("upload uploading", "download downloading"), ("send", "receive"), ("input", "output"),
    ("maximum max", "minimum min"), ("open", "close"),
    ("enable enabled enables enabling", "disable disabled disables disabling"),
    ("raise raised raising", "lower lowered lowering"), ("big bigger biggest", "small smaller smallest"),
    ("large larger largest", "small smaller smallest"), ("long longer longest", "short shorter shortest"),
    ("encrypt encrypted encrypting encryption", "decrypt decrypted decrypting decryption"),
    ("encode encoded encoding", "decode decoded decoding"), ("compress compressing", "decompress decompressing"),
    ("zip", "unzip"), ("install installing", "uninstall uninstalling"), ("lock", "unlock"),
    ("connect", "disconnect"), ("mount", "unmount"), ("subscribe", "unsubscribe"), ("follow", "unfollow"),
    ("show", "hide"), ("allow", "deny"), ("accept", "reject"), ("include", "exclude"),
    ("maximize", "minimize"), ("ascending asc", "descending desc"), ("upgrade", "downgrade"),
    ("uppercase", "lowercase"), ("first", "last"), ("left", "right"), ("top", "bottom"), ("above", "below"),
    ("inside", "outside"), ("add", "remove"), ("add", "subtract"), ("multiply", "divide"), ("plus", "minus"),
    ("hot", "cold"), ("warm", "cold"), ("push", "pull"), ("arrival", "departure"),
    ("incoming", "outgoing"), ("inbound", "outbound"), ("overweight", "underweight"), ("borrow", "lend"),
    ("join", "leave"), ("heavy heavier", "light lighter"),
    ("strong stronger", "weak weaker"), ("early earlier", "late later"), ("gain", "lose"),
    ("more", "less fewer"),
]  # fmt: skip
# Direction: "from X to Y", "X to Y", "X into Y".
FROM = "from"
TO = "to into"
ELISIONS = ""
