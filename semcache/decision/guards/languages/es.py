"""Spanish (español): the words the guards read. Plain data; see ``languages/__init__.py``."""

FUNCTION_WORDS = """
el la los las lo un una unos unas y o pero si es son está están era ser estar he ha han hay yo tú él ella
nosotros vosotros ellos ellas me te se nos mi mis tu tus su sus nuestro nuestra este esta estos estas ese esa
eso que qué quién quiénes cuál cuáles cómo por porqué dónde cuándo cuánto cuánta cuántos cuántas con para
sin sobre entre del al de en muy también puedo puede debo debe
"""
NEGATIONS = "no nunca jamás nada nadie ninguno ninguna ningún ni tampoco sin"
NEGATIVE_CONCORD = True
NUMBERS = {
    "cero": 0, "uno": 1, "dos": 2, "tres": 3, "cuatro": 4, "cinco": 5, "seis": 6, "siete": 7, "ocho": 8,
    "nueve": 9, "diez": 10, "once": 11, "doce": 12, "trece": 13, "catorce": 14, "quince": 15, "veinte": 20,
    "treinta": 30, "cuarenta": 40, "cincuenta": 50, "sesenta": 60, "setenta": 70, "ochenta": 80,
    "noventa": 90, "cien": 100, "ciento": 100, "doscientos": 200, "quinientos": 500, "mil": 1000,
    "millón": 1000000, "millones": 1000000,
}  # fmt: skip
NUMBER_LIKE = {"medio": 0.5, "media": 0.5, "mitad": 0.5, "doble": 2, "triple": 3, "docena": 12}
ORDINALS = {
    f"{stem}{ending}": value
    for stem, value in {
        "primer": 1, "segund": 2, "tercer": 3, "cuart": 4, "quint": 5, "sext": 6, "séptim": 7, "octav": 8,
        "noven": 9, "décim": 10,
    }.items()
    for ending in ("o", "a", "os", "as")
} | {"primer": 1, "tercer": 3}  # fmt: skip
ORDINAL_SUFFIXES = "º ª o a er"
ONE_AS_PRONOUN: list[str] = []  # none listed: its word for one always counts
UNITS = {
    "gramo": "g", "gramos": "g", "kilogramo": "kg", "kilogramos": "kg", "kilo": "kg", "kilos": "kg",
    "miligramo": "mg", "miligramos": "mg", "litro": "l", "litros": "l", "mililitro": "ml", "mililitros": "ml",
    "metro": "m", "metros": "m", "kilómetro": "km", "kilómetros": "km", "centímetro": "cm", "centímetros": "cm",
    "segundo": "s", "segundos": "s", "minuto": "min", "minutos": "min", "hora": "h", "horas": "h",
    "día": "day", "días": "day", "semana": "week", "semanas": "week", "mes": "month", "meses": "month",
    "año": "year", "años": "year", "grados": "°", "calorías": "kcal",
}  # fmt: skip
MONTHS = {
    "enero": 1, "febrero": 2, "marzo": 3, "abril": 4, "mayo": 5, "junio": 6, "julio": 7, "agosto": 8,
    "septiembre": 9, "setiembre": 9, "octubre": 10, "noviembre": 11, "diciembre": 12,
}  # fmt: skip
WEEKDAYS = {"lunes": 1, "martes": 2, "miércoles": 3, "jueves": 4, "viernes": 5, "sábado": 6, "domingo": 7}
AMBIGUOUS_DATES = ""
DATE_WORDS = ""
OPPOSITES = [
    ("mejor mejores", "peor peores"), ("bueno buena buenos", "malo mala malos"),
    ("ventajas", "desventajas"), ("comprar", "vender"),
    ("aumentar aumenta aumento", "disminuir disminuye reducir reduce disminución"), ("subir sube", "bajar baja"),
    ("activar activa activo activado", "desactivar desactiva desactivo desactivado"),
    ("encender enciende enciendo", "apagar apaga apago"),
    ("grande grandes", "pequeño pequeña pequeños"), ("mayor", "menor"), ("más", "menos"),
    ("antes", "después"), ("importar", "exportar"), ("cifrar cifrado", "descifrar descifrado"),
    ("encriptar encriptado", "desencriptar desencriptado"), ("mínimo", "máximo"), ("caro cara", "barato barata"),
    ("rápido rápida", "lento lenta"), ("caliente", "frío fría"), ("abrir", "cerrar"),
    ("conectar", "desconectar"), ("instalar", "desinstalar"), ("añadir agregar", "eliminar quitar"),
    ("primero primera", "último última"), ("izquierda", "derecha"), ("entrada", "salida"),
    ("hombres", "mujeres"), ("hombre", "mujer"), ("niño niños", "niña niñas"), ("largo", "corto"),
    ("ganar", "perder"), ("fácil", "difícil"), ("rico", "pobre"), ("verdadero", "falso"),
]  # fmt: skip
FROM = "de desde del"
TO = "a al hacia hasta en"
ELISIONS = ""
