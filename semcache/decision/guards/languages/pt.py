"""Portuguese (português): the words the guards read. Plain data; see ``languages/__init__.py``."""

FUNCTION_WORDS = """
o a os as um uma uns umas e ou mas se é são está estão era ser estar tem têm há eu tu ele ela nós vocês
eles elas me te se nos meu minha meus seu sua seus nosso nossa este esta isto esse essa isso que quem qual
quais como porque por quê onde quando quanto quanta quantos quantas com para sem sobre entre do da dos das
no na nos nas ao de em muito também posso pode devo deve você
"""
NEGATIONS = "não nunca jamais nada ninguém nenhum nenhuma nem sem tampouco"
NEGATIVE_CONCORD = True
NUMBERS = {
    "zero": 0, "dois": 2, "duas": 2, "três": 3, "quatro": 4, "cinco": 5, "seis": 6, "sete": 7, "oito": 8,
    "nove": 9, "dez": 10, "onze": 11, "doze": 12, "treze": 13, "catorze": 14, "quatorze": 14, "quinze": 15,
    "vinte": 20, "trinta": 30, "quarenta": 40, "cinquenta": 50, "sessenta": 60, "setenta": 70, "oitenta": 80,
    "noventa": 90, "cem": 100, "cento": 100, "mil": 1000, "milhão": 1000000, "milhões": 1000000,
}  # fmt: skip
NUMBER_LIKE = {"meio": 0.5, "meia": 0.5, "metade": 0.5, "dobro": 2, "triplo": 3, "dúzia": 12}
ORDINALS = {
    f"{stem}{ending}": value
    for stem, value in {
        "primeir": 1, "segund": 2, "terceir": 3, "quart": 4, "quint": 5, "sext": 6, "sétim": 7, "oitav": 8,
        "non": 9, "décim": 10,
    }.items()
    for ending in ("o", "a", "os", "as")
}  # fmt: skip
ORDINAL_SUFFIXES = "º ª o a"
ONE_AS_PRONOUN: list[str] = []  # none listed: its word for one always counts
UNITS = {
    "grama": "g", "gramas": "g", "quilograma": "kg", "quilogramas": "kg", "quilo": "kg", "quilos": "kg",
    "miligrama": "mg", "miligramas": "mg", "litro": "l", "litros": "l", "mililitro": "ml", "mililitros": "ml",
    "metro": "m", "metros": "m", "quilômetro": "km", "quilômetros": "km", "centímetro": "cm",
    "centímetros": "cm", "segundo": "s", "segundos": "s", "minuto": "min", "minutos": "min", "hora": "h",
    "horas": "h", "dia": "day", "dias": "day", "semana": "week", "semanas": "week", "mês": "month",
    "meses": "month", "ano": "year", "anos": "year", "graus": "°", "calorias": "kcal",
}  # fmt: skip
MONTHS = {
    "janeiro": 1, "fevereiro": 2, "março": 3, "abril": 4, "maio": 5, "junho": 6, "julho": 7, "agosto": 8,
    "setembro": 9, "outubro": 10, "novembro": 11, "dezembro": 12,
}  # fmt: skip
# "segunda-feira" and the other weekdays named by number are read as ordinals already.
WEEKDAYS = {"sábado": 6, "domingo": 7}
AMBIGUOUS_DATES = ""
DATE_WORDS = ""
OPPOSITES = [
    ("melhor melhores", "pior piores"), ("bom boa bons", "mau má ruim"), ("vantagens", "desvantagens"),
    ("comprar", "vender"), ("aumentar aumenta", "diminuir diminui reduzir reduz"), ("subir sobe", "descer desce"),
    ("ativar ativa ativado", "desativar desativa desativado"), ("ligar liga", "desligar desliga"),
    ("grande grandes", "pequeno pequena pequenos"), ("maior", "menor"), ("mais", "menos"),
    ("antes", "depois"), ("importar", "exportar"), ("criptografar", "descriptografar"),
    ("carregar enviar", "baixar"), ("mínimo", "máximo"), ("caro cara", "barato barata"),
    ("rápido rápida", "lento lenta"), ("quente", "frio fria"), ("abrir", "fechar"),
    ("conectar", "desconectar"), ("instalar", "desinstalar"), ("adicionar", "remover"),
    ("primeiro primeira", "último última"), ("esquerda", "direita"), ("entrada", "saída"),
    ("homens", "mulheres"), ("homem", "mulher"), ("menino meninos", "menina meninas"), ("longo", "curto"),
    ("ganhar", "perder"), ("fácil", "difícil"), ("rico", "pobre"), ("verdadeiro", "falso"),
]  # fmt: skip
FROM = "de do da dos das desde"
TO = "a ao à aos para até em"
ELISIONS = ""
