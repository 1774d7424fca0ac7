"""Italian (italiano): the words the guards read. Plain data; see ``languages/__init__.py``."""

FUNCTION_WORDS = """
il lo la i gli le l un una uno e o ma se è sono era essere ho hai ha abbiamo avete hanno io tu lui lei noi voi
loro mi ti si ci vi mio mia miei tuo tua suo sua nostro questo questa questi quello quella che chi cosa quale
quali come perché dove quando quanto quanta quanti quante con per tra fra su del della dei delle al alla ai
dal dalla nel nella di da in a molto anche posso può devo deve c fa
"""
NEGATIONS = "non niente nulla nessuno nessuna né senza neanche nemmeno"
NEGATIVE_CONCORD = True
NUMBERS = {
    "zero": 0, "due": 2, "tre": 3, "quattro": 4, "cinque": 5, "sei": 6, "sette": 7, "otto": 8, "nove": 9,
    "dieci": 10, "undici": 11, "dodici": 12, "tredici": 13, "quattordici": 14, "quindici": 15, "venti": 20,
    "trenta": 30, "quaranta": 40, "cinquanta": 50, "sessanta": 60, "settanta": 70, "ottanta": 80,
    "novanta": 90, "cento": 100, "mille": 1000, "mila": 1000, "milione": 1000000, "milioni": 1000000,
}  # fmt: skip
NUMBER_LIKE = {"mezzo": 0.5, "mezza": 0.5, "metà": 0.5, "doppio": 2, "triplo": 3, "dozzina": 12}
# "secondo" is also "according to": left out, "seconda" and the rest read.
ORDINALS = {
    "primo": 1, "prima": 1, "primi": 1, "prime": 1, "seconda": 2, "secondi": 2, "seconde": 2, "terzo": 3,
    "terza": 3, "quarto": 4, "quarta": 4, "quinto": 5, "quinta": 5, "sesto": 6, "sesta": 6, "settimo": 7,
    "settima": 7, "ottavo": 8, "ottava": 8, "nono": 9, "nona": 9, "decimo": 10, "decima": 10,
}  # fmt: skip
ORDINAL_SUFFIXES = "º ª o a"
ONE_AS_PRONOUN: list[str] = []  # none listed: its word for one always counts
UNITS = {
    "grammo": "g", "grammi": "g", "chilogrammo": "kg", "chilogrammi": "kg", "chilo": "kg", "chili": "kg",
    "milligrammo": "mg", "milligrammi": "mg", "litro": "l", "litri": "l", "millilitro": "ml", "millilitri": "ml",
    "metro": "m", "metri": "m", "chilometro": "km", "chilometri": "km", "centimetro": "cm", "centimetri": "cm",
    "secondo": "s", "secondi": "s", "minuto": "min", "minuti": "min", "ora": "h", "ore": "h",
    "giorno": "day", "giorni": "day", "settimana": "week", "settimane": "week", "mese": "month",
    "mesi": "month", "anno": "year", "anni": "year", "gradi": "°", "calorie": "kcal",
}  # fmt: skip
MONTHS = {
    "gennaio": 1, "febbraio": 2, "marzo": 3, "aprile": 4, "maggio": 5, "giugno": 6, "luglio": 7, "agosto": 8,
    "settembre": 9, "ottobre": 10, "novembre": 11, "dicembre": 12,
}  # fmt: skip
WEEKDAYS = {
    "lunedì": 1, "martedì": 2, "mercoledì": 3, "giovedì": 4, "venerdì": 5, "sabato": 6, "domenica": 7,
}  # fmt: skip
AMBIGUOUS_DATES = ""
DATE_WORDS = ""
OPPOSITES = [
    ("migliore migliori", "peggiore peggiori"), ("buono buona buoni", "cattivo cattiva cattivi"),
    ("vantaggi", "svantaggi"), ("comprare", "vendere"), ("aumentare aumenta", "diminuire diminuisce ridurre"),
    ("alzare alza", "abbassare abbassa"), ("attivare attiva attivato", "disattivare disattiva disattivato"),
    ("accendere accende", "spegnere spegne"), ("grande grandi", "piccolo piccola piccoli"),
    ("maggiore", "minore"), ("più", "meno"), ("prima", "dopo"), ("importare", "esportare"),
    ("cifrare cifrato", "decifrare decifrato"), ("crittografare", "decrittografare"), ("caricare", "scaricare"),
    ("minimo", "massimo"), ("caro cara", "economico economica"), ("veloce", "lento lenta"),
    ("caldo calda", "freddo fredda"), ("aprire", "chiudere"), ("collegare", "scollegare"),
    ("installare", "disinstallare"), ("aggiungere", "rimuovere"), ("primo", "ultimo"),
    ("sinistra", "destra"), ("entrata", "uscita"), ("uomini", "donne"), ("uomo", "donna"),
    ("ragazzo ragazzi", "ragazza ragazze"), ("lungo", "corto"), ("vincere", "perdere"), ("facile", "difficile"),
    ("ricco", "povero"), ("vero", "falso"),
]  # fmt: skip
FROM = "da dal dalla dallo dai dalle"
TO = "a al alla allo ai alle verso in"
ELISIONS = "l dell all dall nell sull un c d quest quell"
