"""Probes for the guards in every language semcache serves: pairs whose meaning one change turns
(each must be vetoed) and harmless rewordings in the same language (most must still be served).
Written for these tests; none comes from the labelled data the guards were measured on."""

from __future__ import annotations

# language -> kind of change -> (stored question, changed question)
CHANGED: dict[str, dict[str, list[tuple[str, str]]]] = {
    "en": {
        "negation": [("Why does my cat eat grass?", "Why doesn't my cat eat grass?")],
        "number": [("What is the 2nd largest city in Brazil?", "What is the 3rd largest city in Brazil?")],
        "unit": [("Is 400mg of ibuprofen safe for an adult?", "Is 400g of ibuprofen safe for an adult?")],
        "date": [("What is the weather like in Lisbon in April?", "What is the weather like in Lisbon in October?")],
        "direction": [("How do I convert Celsius to Fahrenheit?", "How do I convert Fahrenheit to Celsius?")],
        "opposite": [("How do I enable dark mode on my phone?", "How do I disable dark mode on my phone?")],
    },
    "de": {
        "negation": [("Warum schläft mein Hund nachts?", "Warum schläft mein Hund nachts nicht?")],
        "number": [("Wie koche ich Reis für zwei Personen?", "Wie koche ich Reis für drei Personen?")],
        "unit": [("Sind 500mg Paracetamol für Kinder sicher?", "Sind 500g Paracetamol für Kinder sicher?")],
        "date": [("Wie ist das Wetter in Wien im Januar?", "Wie ist das Wetter in Wien im Juli?")],
        "direction": [("Wie rechne ich Euro in Dollar um?", "Wie rechne ich Dollar in Euro um?")],
        "opposite": [("Wie kann ich die Helligkeit erhöhen?", "Wie kann ich die Helligkeit senken?")],
    },
    "fr": {
        "negation": [("Pourquoi mon chat mange-t-il de l'herbe ?", "Pourquoi mon chat ne mange-t-il pas d'herbe ?")],
        "number": [("Comment cuire des pâtes pour deux personnes ?", "Comment cuire des pâtes pour huit personnes ?")],
        "unit": [("Un verre de 200ml suffit-il pour la recette ?", "Un verre de 200cl suffit-il pour la recette ?")],
        "date": [("Quel temps fait-il à Nice en mars ?", "Quel temps fait-il à Nice en novembre ?")],
        "direction": [("Comment traduire de l'anglais au français ?", "Comment traduire du français à l'anglais ?")],
        "opposite": [("Comment activer le mode sombre ?", "Comment désactiver le mode sombre ?")],
    },
    "es": {
        "negation": [("¿Por qué mi perro come hierba?", "¿Por qué mi perro nunca come hierba?")],
        "number": [("¿Cómo preparo una paella para cuatro personas?", "¿Cómo preparo una paella para diez personas?")],
        "unit": [("¿Es seguro tomar 250mg de vitamina C?", "¿Es seguro tomar 250g de vitamina C?")],
        "date": [("¿Qué tiempo hace en Sevilla en agosto?", "¿Qué tiempo hace en Sevilla en diciembre?")],
        "direction": [("¿Cómo convertir pesos a dólares?", "¿Cómo convertir dólares a pesos?")],
        "opposite": [("¿Cómo puedo subir el volumen del televisor?", "¿Cómo puedo bajar el volumen del televisor?")],
    },
    "it": {
        "negation": [("Perché il mio gatto dorme tanto?", "Perché il mio gatto non dorme tanto?")],
        "number": [("Come cucinare la pasta per tre persone?", "Come cucinare la pasta per sette persone?")],
        "unit": [("Quanto costano 100g di parmigiano?", "Quanto costano 100kg di parmigiano?")],
        "date": [("Che tempo fa a Roma a febbraio?", "Che tempo fa a Roma a settembre?")],
        "direction": [("Come convertire euro in dollari?", "Come convertire dollari in euro?")],
        "opposite": [("Come posso accendere il Bluetooth?", "Come posso spegnere il Bluetooth?")],
    },
    "pt": {
        "negation": [("Por que meu cachorro come grama?", "Por que meu cachorro não come grama?")],
        "number": [("Como fazer um bolo para cinco pessoas?", "Como fazer um bolo para doze pessoas?")],
        "unit": [("Posso tomar 500mg de dipirona?", "Posso tomar 500g de dipirona?")],
        "date": [("Como é o clima em Lisboa em janeiro?", "Como é o clima em Lisboa em julho?")],
        "direction": [("Como converter reais para euros?", "Como converter euros para reais?")],
        "opposite": [("Como ativar o modo escuro no celular?", "Como desativar o modo escuro no celular?")],
    },
    "nl": {
        "negation": [("Waarom eet mijn kat gras?", "Waarom eet mijn kat geen gras?")],
        "number": [("Hoe kook ik rijst voor twee personen?", "Hoe kook ik rijst voor vijf personen?")],
        "unit": [("Is 300mg cafeïne per dag veilig?", "Is 300g cafeïne per dag veilig?")],
        "date": [("Hoe is het weer in Amsterdam in mei?", "Hoe is het weer in Amsterdam in oktober?")],
        "direction": [("Hoe reken ik euro om naar dollar?", "Hoe reken ik dollar om naar euro?")],
        "opposite": [("Hoe kan ik de helderheid verhogen?", "Hoe kan ik de helderheid verlagen?")],
    },
    "zh": {
        "negation": [("为什么我的猫喜欢吃草？", "为什么我的猫不喜欢吃草？")],
        "number": [("三个人做饭需要多少米？", "五个人做饭需要多少米？")],
        "unit": [("每天吃100毫克维生素C安全吗？", "每天吃100克维生素C安全吗？")],
        "date": [("北京三月的天气怎么样？", "北京十月的天气怎么样？")],
        "direction": [("从北京到上海的高铁要多久？", "从上海到北京的高铁要多久？")],
        "opposite": [("怎么提高手机屏幕的亮度？", "怎么降低手机屏幕的亮度？")],
    },
}

# language -> (stored question, the same question reworded)
REWORDED: dict[str, list[tuple[str, str]]] = {
    "en": [
        ("How do I convert Celsius to Fahrenheit?", "How can I convert Celsius to Fahrenheit?"),
        ("Why does my cat eat grass?", "Why does my cat eat grass, please?"),
        ("What is the 2nd largest city in Brazil?", "Which is the 2nd largest city in Brazil?"),
        ("What is the weather like in Lisbon in April?", "What's the weather like in Lisbon in April?"),
    ],
    "de": [
        ("Wie rechne ich Euro in Dollar um?", "Wie kann ich Euro in Dollar umrechnen?"),
        ("Warum schläft mein Hund nachts?", "Warum schläft mein Hund in der Nacht?"),
        ("Wie koche ich Reis für zwei Personen?", "Wie koche ich bitte Reis für zwei Personen?"),
        ("Wie ist das Wetter in Wien im Januar?", "Wie ist im Januar das Wetter in Wien?"),
    ],
    "fr": [
        ("Comment activer le mode sombre ?", "Comment puis-je activer le mode sombre ?"),
        ("Pourquoi mon chat mange-t-il de l'herbe ?", "Pourquoi est-ce que mon chat mange de l'herbe ?"),
        ("Comment cuire des pâtes pour deux personnes ?", "Comment faire cuire des pâtes pour deux personnes ?"),
        ("Quel temps fait-il à Nice en mars ?", "Quel temps fait-il en mars à Nice ?"),
    ],
    "es": [
        ("¿Cómo convertir pesos a dólares?", "¿Cómo puedo convertir pesos a dólares?"),
        ("¿Por qué mi perro come hierba?", "¿Por qué mi perro come pasto?"),
        ("¿Cómo preparo una paella para cuatro personas?", "¿Cómo hago una paella para cuatro personas?"),
        ("¿Qué tiempo hace en Sevilla en agosto?", "¿Qué tiempo hace en agosto en Sevilla?"),
    ],
    "it": [
        ("Come convertire euro in dollari?", "Come posso convertire euro in dollari?"),
        ("Perché il mio gatto dorme tanto?", "Perché il mio gatto dorme così tanto?"),
        ("Come cucinare la pasta per tre persone?", "Come si cucina la pasta per tre persone?"),
        ("Che tempo fa a Roma a febbraio?", "Che tempo fa a febbraio a Roma?"),
    ],
    "pt": [
        ("Como converter reais para euros?", "Como posso converter reais para euros?"),
        ("Por que meu cachorro come grama?", "Por que o meu cachorro come grama?"),
        ("Como fazer um bolo para cinco pessoas?", "Como preparar um bolo para cinco pessoas?"),
        ("Como é o clima em Lisboa em janeiro?", "Como é o clima em janeiro em Lisboa?"),
    ],
    "nl": [
        ("Hoe reken ik euro om naar dollar?", "Hoe kan ik euro omrekenen naar dollar?"),
        ("Waarom eet mijn kat gras?", "Waarom eet mijn kat toch gras?"),
        ("Hoe kook ik rijst voor twee personen?", "Hoe moet ik rijst koken voor twee personen?"),
        ("Hoe is het weer in Amsterdam in mei?", "Hoe is het weer in mei in Amsterdam?"),
    ],
    "zh": [
        ("为什么我的猫喜欢吃草？", "我的猫为什么喜欢吃草？"),
        ("怎么提高手机屏幕的亮度？", "如何提高手机屏幕的亮度？"),
        ("北京三月的天气怎么样？", "三月北京的天气怎么样？"),
        ("从北京到上海的高铁要多久？", "从北京到上海坐高铁要多久？"),
    ],
}

LANGUAGES = tuple(CHANGED)
KINDS = ("negation", "number", "unit", "date", "direction", "opposite")
