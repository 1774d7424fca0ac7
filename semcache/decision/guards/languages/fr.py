"""French (français): the words the guards read. Plain data; see ``languages/__init__.py``."""

FUNCTION_WORDS = """
le la les l un une des du de d et ou mais si donc est sont était être ai as avons avez ont je tu il elle nous
vous ils elles me te se moi toi mon ma mes ton ta tes son sa ses notre votre leur leurs ce cet cette ces qui
que qu quoi quel quelle quels quelles comment pourquoi où quand combien avec pour par sur dans sans chez vers
au aux en y c s j n est-ce peut faut très aussi bien
"""
# "ne ... pas" is one negation: French counts a negation word at all, not how many.
NEGATIONS = "ne n pas jamais rien aucun aucune ni sans non guère"
NEGATIVE_CONCORD = True
NUMBERS = {
    "zéro": 0, "deux": 2, "trois": 3, "quatre": 4, "cinq": 5, "six": 6, "sept": 7, "huit": 8, "neuf": 9,
    "dix": 10, "onze": 11, "douze": 12, "treize": 13, "quatorze": 14, "quinze": 15, "seize": 16, "vingt": 20,
    "trente": 30, "quarante": 40, "cinquante": 50, "soixante": 60, "cent": 100, "cents": 100, "mille": 1000,
    "million": 1000000, "millions": 1000000, "milliard": 1000000000,
}  # fmt: skip
NUMBER_LIKE = {"demi": 0.5, "demie": 0.5, "moitié": 0.5, "double": 2, "triple": 3, "douzaine": 12}
ORDINALS = {
    "premier": 1, "première": 1, "premiers": 1, "premières": 1, "deuxième": 2, "second": 2, "seconde": 2,
    "troisième": 3, "quatrième": 4, "cinquième": 5, "sixième": 6, "septième": 7, "huitième": 8,
    "neuvième": 9, "dixième": 10, "onzième": 11, "douzième": 12, "vingtième": 20, "centième": 100,
}  # fmt: skip
ORDINAL_SUFFIXES = "er re ère e ème eme"
ONE_AS_PRONOUN: list[str] = []  # none listed: its word for one always counts
UNITS = {
    "gramme": "g", "grammes": "g", "kilogramme": "kg", "kilogrammes": "kg", "milligramme": "mg",
    "milligrammes": "mg", "litre": "l", "litres": "l", "millilitre": "ml", "millilitres": "ml", "mètre": "m",
    "mètres": "m", "kilomètre": "km", "kilomètres": "km", "centimètre": "cm", "centimètres": "cm",
    "seconde": "s", "secondes": "s", "minute": "min", "minutes": "min", "heure": "h", "heures": "h",
    "jour": "day", "jours": "day", "semaine": "week", "semaines": "week", "mois": "month", "an": "year",
    "ans": "year", "année": "year", "années": "year", "degrés": "°", "calories": "kcal",
}  # fmt: skip
MONTHS = {
    "janvier": 1, "février": 2, "mars": 3, "avril": 4, "mai": 5, "juin": 6, "juillet": 7, "août": 8,
    "septembre": 9, "octobre": 10, "novembre": 11, "décembre": 12,
}  # fmt: skip
WEEKDAYS = {"lundi": 1, "mardi": 2, "mercredi": 3, "jeudi": 4, "vendredi": 5, "samedi": 6, "dimanche": 7}
AMBIGUOUS_DATES = ""
DATE_WORDS = ""
OPPOSITES = [
    ("meilleur meilleure meilleurs", "pire pires"), ("bon bonne bons", "mauvais mauvaise"),
    ("avantages", "inconvénients"), ("acheter", "vendre"),
    ("augmenter augmente augmentation", "diminuer diminue baisser baisse diminution"),
    ("hausser monter", "baisser descendre"), ("activer active activé", "désactiver désactive désactivé"),
    ("allumer", "éteindre"), ("grand grande grands", "petit petite petits"), ("plus", "moins"),
    ("avant", "après"), ("importer", "exporter"), ("chiffrer chiffré", "déchiffrer déchiffré"),
    ("crypter crypté", "décrypter décrypté"), ("téléverser", "télécharger"), ("minimum", "maximum"),
    ("cher chère", "bon marché"), ("rapide rapides", "lent lente lents"), ("chaud", "froid"),
    ("ouvrir", "fermer"), ("connecter", "déconnecter"), ("installer", "désinstaller"),
    ("ajouter", "supprimer"), ("début", "fin"), ("premier première", "dernier dernière"),
    ("gauche", "droite"), ("haut", "bas"), ("entrée", "sortie"), ("hommes", "femmes"), ("homme", "femme"),
    ("garçon garçons", "fille filles"), ("long longue", "court courte"), ("gagner", "perdre"),
    ("facile", "difficile"), ("riche", "pauvre"), ("vrai", "faux"),
]  # fmt: skip
FROM = "de du des d depuis"
TO = "à au aux vers en jusqu"
ELISIONS = "l d j m n s t c qu jusqu lorsqu puisqu"
