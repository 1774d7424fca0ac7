"""Texts that set the activation scales of the int8 embedding model when it is exported.

Static quantization fixes the range each activation is quantized over once, from the values these
texts reach in the fp32 model, so that no scale depends on the batch a text is embedded in. They
were written for this: questions on many topics and of many lengths, requests to an assistant, long
prompts and a conversation, code and logs, numbers, Chinese and other languages, typos and emoji.
Changing them changes the export (its fingerprint covers them) and its vectors: change
``QUANTIZED_SUFFIX`` in onnx.py with them, so that stores re-embed rather than mix vectors.
"""

from __future__ import annotations

# One text a line.
_ONE_LINERS = """
hi
ok
thanks!
help
What time is it?
Is it going to rain tomorrow?
Who won the game last night?
Define entropy.
weather paris
cheap flights to tokyo
best pizza near me
How old is the universe?
Why is the sky blue?
What does HTTP 404 mean?
translate hello to spanish
Can dogs eat grapes?
How many ounces in a cup?
Is coffee bad for you?
reset my password
Where is my order?
Cancel my subscription please.
What's the difference between a virus and a bacterium?
How do I boil an egg so the yolk stays soft?
What is the best way to store fresh basil?
Why does bread go stale faster in the fridge?
How long should I rest a steak after grilling it?
Can I substitute baking soda for baking powder in pancakes?
What temperature should chicken thighs reach to be safe to eat?
How do I keep rice from sticking to the bottom of the pot?
Is it safe to eat raw cookie dough made with flour?
How can I make my sourdough starter more active?
What wine goes well with grilled salmon?
How do I reverse a linked list in Python?
What is the difference between a process and a thread?
Why does my Docker container exit immediately after starting?
How do I undo the last git commit without losing my changes?
What is a race condition and how do I avoid one?
How can I speed up a slow SQL query with many joins?
What does the error "connection refused" mean when I call my API?
Should I use PostgreSQL or MongoDB for a small web application?
How do I read a large CSV file in pandas without running out of memory?
What is the time complexity of binary search?
How do I center a div horizontally and vertically with CSS?
Why is my React component rendering twice?
How do I set environment variables in a Kubernetes deployment?
What is the difference between TCP and UDP?
How do I write a unit test for a function that calls an external API?
What are the symptoms of vitamin D deficiency?
How much water should an adult drink every day?
Is it normal to feel dizzy after standing up quickly?
What can I take for a headache if I am pregnant?
How long does a cold usually last?
What is a normal resting heart rate for a 40-year-old man?
Can I take ibuprofen and acetaminophen together?
Why do my knees hurt when I climb stairs?
How do I know if a cut needs stitches?
What are the early signs of type 2 diabetes?
Is it bad to sleep with wet hair?
How many hours of sleep does a teenager need?
What is the cheapest way to travel across Europe by train?
Do I need a visa to visit Japan with a Canadian passport?
What should I pack for a week-long hiking trip in the Alps?
Is it safe to drink tap water in Mexico City?
How early should I arrive at the airport for an international flight?
What are the best things to do in Lisbon in three days?
Can I bring a power bank in my checked luggage?
How do I get from the airport to the city centre in Rome?
What is the best time of year to see the northern lights in Iceland?
How do I open a savings account for my child?
What is the difference between a Roth IRA and a traditional IRA?
Should I pay off my student loans or invest the money?
How is compound interest calculated?
What happens to my pension if I change jobs?
How do I improve my credit score quickly?
Is it better to lease or buy a car?
What are index funds and why do people recommend them?
How much should I save for an emergency fund?
Can my landlord keep my security deposit for normal wear and tear?
What do I need to write a valid will?
How do I dispute a parking ticket?
Is it legal to record a phone call without telling the other person?
What is the difference between a patent and a trademark?
Why do objects fall at the same speed in a vacuum?
How does photosynthesis turn sunlight into sugar?
What is the speed of light in kilometres per second?
How do vaccines train the immune system?
Why is Pluto no longer considered a planet?
What causes the seasons on Earth?
How do black holes form?
What is the difference between weather and climate?
How does a nuclear reactor generate electricity?
Who built the pyramids of Giza and how long did it take?
What caused the fall of the Roman Empire?
When did the Berlin Wall come down?
Why did the First World War start?
Who was the first woman to win a Nobel Prize?
What was the Silk Road used for?
How many players are on a soccer team?
What is the offside rule in football?
How do I improve my 5k running time?
Who has won the most Grand Slam titles in tennis?
How long is a marathon in miles?
What muscles does a deadlift work?
How do I tune a guitar without a tuner?
What is the difference between a major and a minor chord?
Who composed the Four Seasons?
What are some good songs to learn on the piano as a beginner?
How do I get my toddler to sleep through the night?
When do babies usually start walking?
How much screen time is healthy for a six-year-old?
What should I do if my teenager refuses to go to school?
Why is my check engine light on?
How often should I change the oil in my car?
What does it mean when my brakes squeal?
How do I jump-start a car with a dead battery?
How do I fix a leaking kitchen faucet?
What is the best way to paint over dark walls?
Why does my circuit breaker keep tripping?
How do I get rid of mold in the bathroom?
When is the best time to plant tomatoes?
Why are the leaves on my lemon tree turning yellow?
How often should I water succulents?
How do I stop my cat from scratching the sofa?
What human foods are toxic to dogs?
How often should I take my puppy outside to pee?
Why does my parrot pull out its feathers?
How do I write a good cover letter?
What should I say when asked about my biggest weakness in an interview?
How do I ask my boss for a raise?
Is it worth getting a master's degree in computer science?
How do I switch careers at 35?
What is the derivative of x squared times sine of x?
How do I solve a quadratic equation?
What is the probability of rolling two sixes with two dice?
Can you explain Bayes' theorem with a simple example?
What is the integral of one over x?
My laptop will not turn on, what should I check first?
How do I free up space on my iPhone?
Why is my Wi-Fi so slow at night?
How do I connect my printer to a new router?
What is the best strategy for the final boss in Elden Ring?
How do I build a redstone door in Minecraft?
Are mechanical keyboards better for gaming?
What size television should I buy for a small living room?
Is it worth buying an extended warranty for a washing machine?
How do I return an item I bought online?
What is the fastest way to learn Spanish vocabulary?
Is German harder to learn than French for English speakers?
How many characters do I need to know to read a Chinese newspaper?
Write a polite email to my landlord asking to fix the heating before the weekend.
Summarize the following paragraph in two sentences.
Give me five ideas for a birthday party for a ten-year-old who loves dinosaurs.
Rewrite this sentence so it sounds more formal: we gotta push the meeting to next week.
Explain quantum computing to me like I am five years old.
Draft a short product description for a stainless steel water bottle that keeps drinks cold for 24 hours.
List the pros and cons of working from home.
Act as a travel agent and plan a two-week itinerary for Vietnam on a budget.
Translate the following into German: the train to Munich leaves at half past nine.
Can you check this paragraph for grammar mistakes?
Write a haiku about autumn rain.
Generate a SQL query that returns the ten customers with the highest total order value in 2023.
Create a weekly meal plan for a vegetarian who wants to eat 120 grams of protein a day.
What are three good questions to ask at the end of a job interview?
Tell me a joke about programmers.
Help me name my new bakery; it sells mostly sourdough and French pastries.
Compare the iPhone 15 and the Pixel 8 camera in a short table.
Write a Python function that checks whether a string is a palindrome, ignoring spaces and case.
Explain the difference between "affect" and "effect" with examples.
Outline a 10-minute presentation on renewable energy for high school students.
What is 17 times 23?
Convert 72 degrees Fahrenheit to Celsius.
How many seconds are there in a leap year?
Is 1,000,003 a prime number?
What is 15% of 2,480?
My order number is 4839-2201-7765 and it has not arrived since 12/03/2024.
Call me at +1 (415) 555-0132 after 6:30 pm.
The meeting is on 2025-01-14 at 09:00 UTC in room B-204.
Flight LH 1234 departs Frankfurt at 14:35 and lands in Madrid at 17:05.
Price: $1,299.99 (was $1,599.00) - save 19%!
Version 3.11.7 fails but 3.10.12 works fine.
What is the square root of 144 divided by 0.5?
Calculate the monthly payment on a 250000 loan at 6.5% over 30 years.
1 2 3 4 5 6 7 8 9 10
The temperature dropped from 23.5°C to -4.2°C overnight.
0xDEADBEEF
192.168.1.254
https://example.com/docs/api/v2/users?id=42&sort=desc
user@example.org
ERROR 2024-06-01T12:00:03Z worker-7 timeout after 30000 ms (retry 3/5)
如何通过语音助手接通电话？
红烧肉怎么做才好吃？
北京今天天气怎么样？
我的电脑开不了机怎么办？
学习英语有什么好方法？
从上海到杭州坐高铁要多长时间？
这个月的电费为什么这么高？
感冒了应该吃什么药？
怎么申请信用卡？
孩子不爱吃饭怎么办？
推荐几本适合初学者的编程书。
请帮我写一封请假邮件，明天因为发烧不能上班。
如何提高睡眠质量？
手机充电很慢是什么原因？
苹果和香蕉哪个热量更高？
Python 里列表和元组有什么区别？
为什么天空是蓝色的？
我想去成都旅游五天，请帮我安排行程，预算大概五千元，喜欢吃辣，也想看大熊猫。
Comment puis-je améliorer mon français rapidement ?
Quel est le meilleur moment pour visiter Paris ?
Pourquoi mon pain ne lève-t-il pas ?
Wie kann ich mein Passwort zurücksetzen?
Was ist der Unterschied zwischen Wetter und Klima?
Wann fährt der nächste Zug nach Berlin?
¿Cómo puedo aprender a programar desde cero?
¿Qué documentos necesito para viajar a Estados Unidos?
¿Por qué me duele la cabeza por las mañanas?
Como faço para abrir uma conta bancária em Portugal?
Qual é a capital da Austrália?
Come si prepara una vera carbonara?
Dove posso trovare un buon ristorante a Napoli?
Как быстро выучить английский язык?
Почему небо голубое?
Сколько стоит билет на поезд из Москвы в Санкт-Петербург?
日本語を勉強するのに一番いい方法は何ですか？
東京から大阪まで新幹線で何時間かかりますか？
한국어를 배우는 가장 좋은 방법은 무엇인가요?
서울에서 부산까지 기차로 얼마나 걸리나요?
كيف يمكنني تعلم اللغة الإنجليزية بسرعة؟
ما هي عاصمة كندا؟
मैं हिंदी कैसे सीख सकता हूँ?
Hoe laat gaat de winkel dicht?
Jak mogę zmienić hasło do konta?
Nasıl daha iyi uyuyabilirim?
Làm thế nào để nấu phở bò?
Bagaimana cara membuat akun email baru?
Kuinka kauan pasta keitetään?
what is teh best way to lern javascript fast??
HOW DO I GET A REFUND
pls help my phone screen is cracked n idk what to do
wat r the side effects of aspirin
is it ok 2 eat eggs every day
🙂 can you recommend a good movie for tonight? 🍿
I love this!!! ❤️❤️❤️
Why?!?!
???
... and then what happened next?
"To be, or not to be, that is the question."
The quick brown fox jumps over the lazy dog.
Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt ut labore.
Q: What is the capital of Italy? A: Rome. Q: What is the capital of Spain? A:
[system] You are a helpful assistant. [user] What is the boiling point of water at sea level?
Yes.
No, that is not what I meant.
Can you make it shorter?
Try again, but more casual this time.
Same question as before, but for Canada instead of the US.
"""

_LONGER = (
    (
        "I have been feeling tired all the time for the past three weeks, even though I sleep eight hours a "
        "night and eat fairly well. I also get short of breath when I walk up the stairs to my apartment on "
        "the third floor. I am 34, I do not smoke, and I am not on any medication. Should I be worried, and "
        "what tests should I ask my doctor for?"
    ),
    (
        "We are a team of six engineers building a mobile app for booking fitness classes. Our backend is a "
        "Django monolith with a PostgreSQL database, and we are starting to see slow response times during "
        "the evening peak when thousands of users try to book the same popular classes. What are our options "
        "for handling this load without rewriting everything, and which would you try first?"
    ),
    (
        "My grandmother left me a small apartment in the city, and my siblings and I cannot agree on whether "
        "to sell it or rent it out. The mortgage is paid off, but the building needs a new roof in the next "
        "few years and the property taxes keep going up. How should we think about this decision, and what "
        "costs should we include when we compare the two options?"
    ),
    (
        "I am planning a road trip from San Francisco to Seattle in early October with my partner and our "
        "dog. We have about eight days and would like to spend time on the coast, see some redwoods, and "
        "avoid driving more than four hours on any single day. Can you suggest a route with overnight stops "
        "that are dog friendly?"
    ),
    (
        "The customer says the invoice they received last month charged them twice for the same shipment, "
        "once on the 3rd and again on the 17th, and they want a refund for the duplicate charge. They also "
        "mention that the delivery arrived damaged and they have photos. Draft a reply that apologizes, "
        "explains the next steps, and asks for the order number and the photos."
    ),
    (
        "In the novel, the narrator slowly realizes that the house he inherited from his uncle is not as "
        "empty as it seemed: doors that he locked at night are open in the morning, and the piano in the "
        "parlour has been moved a few inches toward the window. Write the next paragraph of the story, "
        "keeping the same quiet, unsettling tone."
    ),
    (
        "Our quarterly revenue grew 12 percent year over year to 4.3 million dollars, driven mainly by new "
        "enterprise contracts in Europe, while operating costs rose 18 percent because we hired twenty new "
        "people in sales and support. Gross margin fell from 71 to 67 percent. Write a short summary of these"
        " results for the board, highlighting the risks."
    ),
    (
        "The study followed 2,400 adults aged 50 to 75 for ten years and found that those who walked at least"
        " 7,000 steps a day had a 40 percent lower risk of dying from any cause than those who walked fewer "
        "than 4,000 steps, after adjusting for age, smoking, body weight and chronic disease. What are the "
        "limitations of a study like this?"
    ),
    (
        "I run a small online shop that sells handmade ceramic mugs, bowls and plates. Most of my customers "
        "find me through Instagram, and until now I have shipped everything myself from my garage, wrapping "
        "each piece in bubble wrap and packing peanuts. Over the last six months orders have tripled, and "
        "about one in twenty packages arrives broken, which costs me the piece, the shipping and often the "
        "customer. I have looked at fulfilment companies, but they are expensive for fragile items and I "
        "worry about losing the personal touch, like the handwritten note I put in every box. I have also "
        "thought about switching to double boxing, moulded pulp inserts or custom foam, but I do not know "
        "which is worth the extra cost and weight. What would you recommend, how should I test the options "
        "before committing, and how do I handle the breakages I already have without losing money on every "
        "replacement?"
    ),
    (
        "The history of the bicycle begins in the early nineteenth century with the draisine, a two-wheeled "
        "wooden frame that riders pushed along with their feet. Pedals attached directly to the front wheel "
        "came decades later, which led to the high-wheeler, whose enormous front wheel let a rider travel "
        "farther with each turn of the pedals but made falls dangerous. The safety bicycle of the 1880s, with"
        " two wheels of similar size and a chain driving the rear wheel, changed everything: together with "
        "the pneumatic tyre it made cycling comfortable, affordable and popular, and it gave many people, "
        "especially women, a new kind of independence. Since then frames have moved from steel to aluminium, "
        "titanium and carbon fibre, gears have multiplied, and electric assistance has brought cycling to "
        "people who would never have ridden up a steep hill before. Write a short quiz of five questions "
        "about this passage, with the answers."
    ),
    (
        "User: I want to bake bread at home but I have never done it before.\nAssistant: Great! A simple "
        "no-knead loaf is a good start. You need flour, water, salt and a little yeast.\nUser: How much of "
        "each, and do I need a special pan?\nAssistant: About 500 g of bread flour, 375 g of water, 10 g of "
        "salt and 2 g of instant yeast. A heavy pot with a lid, like a Dutch oven, works best.\nUser: I only "
        "have a normal baking tray. Will that work, and how long do I leave the dough to rise overnight in a "
        "cold kitchen?"
    ),
    (
        "Dear hiring committee, I am writing to apply for the position of data analyst at your company. Over "
        "the past four years I have worked at a regional hospital network, where I built dashboards that "
        "track patient waiting times across eleven clinics, automated the monthly reporting that used to take"
        " two people a full week, and worked with nurses and administrators to understand which numbers "
        "actually changed their decisions. I am comfortable with SQL, Python and Tableau, and I enjoy "
        "explaining results to people who do not work with data every day. I am especially interested in your"
        " work on public transport planning, because I believe that good data can make everyday services "
        "fairer and more reliable. Please improve this letter, keep it under 250 words, and make it sound "
        "confident without being arrogant."
    ),
    (
        "Terms and conditions: by using this service you agree that your account may be suspended if you "
        "violate these terms, that payments are non-refundable except where required by law, that we may "
        "update these terms at any time with thirty days' notice by email, and that any disputes will be "
        "resolved by binding arbitration in the state of Delaware. You retain ownership of the content you "
        "upload, but you grant us a worldwide, royalty-free licence to host, copy and display it for the "
        "purpose of operating the service. Can you explain in plain language what I am agreeing to here, and "
        "which parts I should be careful about?"
    ),
    (
        "气候变化是当今世界面临的最严峻挑战之一。过去一百年里，全球平均气温上升了大约一点一摄氏度，极端天气事件变得更加频繁，海平面持续上升，许多物种的栖息地受到威胁。减少温室气体排放需要各国政府、企业和个人共同努力，例如发展可再生能源、提高能源效率、保护森林以及改变日常的消费习惯。请用三句话总结这段文字的主要观点，并提出一个普通人可以做到的具体行动。"
    ),
    (
        "Je voudrais organiser un voyage de dix jours en Bretagne au mois de mai avec mes parents, qui ont "
        "plus de soixante-dix ans et qui ne peuvent pas marcher très longtemps. Nous aimerions voir la mer, "
        "visiter quelques villages typiques, manger des crêpes et des fruits de mer, et éviter les longues "
        "journées en voiture. Pouvez-vous proposer un itinéraire avec des hôtels accessibles ?"
    ),
)

_CODE = (
    """\
def fibonacci(n):
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a

Why is this slow for large n?""",
    """\
SELECT c.name, SUM(o.total) AS spent
FROM customers c JOIN orders o ON o.customer_id = c.id
WHERE o.created_at >= '2023-01-01'
GROUP BY c.name ORDER BY spent DESC LIMIT 10;""",
    """\
const res = await fetch(`/api/items/${id}`);
if (!res.ok) throw new Error(res.statusText);
const data = await res.json();""",
    """\
Traceback (most recent call last):
  File "app.py", line 12, in <module>
    main()
  File "app.py", line 8, in main
    print(config["port"])
KeyError: 'port'""",
    """\
#include <stdio.h>
int main(void) {
    int x[3] = {1, 2, 3};
    printf("%d", x[3]);
    return 0;
}
why does this print garbage?""",
    """\
fn main() {
    let v = vec![1, 2, 3];
    let first = &v[0];
    v.push(4);
    println!("{}", first);
}
error[E0502]: cannot borrow `v` as mutable""",
    """\
git rebase -i HEAD~3
# pick 1a2b3c4 fix typo
# squash 5d6e7f8 add tests""",
    """\
docker run -d -p 8080:80 --name web -v $(pwd)/html:/usr/share/nginx/html nginx:1.25""",
    """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: 3
  template:
    spec:
      containers:
        - name: web
          image: nginx:1.25""",
    """\
{"user": {"id": 42, "name": "Ada", "roles": ["admin", "dev"]}, "active": true, "quota": 1.5e9}""",
    """\
for i in range(10):
    if i % 2 == 0:
        continue
    print(i ** 2)""",
    """\
public class Main {
    public static void main(String[] args) {
        System.out.println("Hello, world!");
    }
}""",
    """\
import numpy as np
x = np.random.rand(1000, 384).astype(np.float32)
x /= np.linalg.norm(x, axis=1, keepdims=True)
print(x @ x.T)""",
    """\
$ npm install
npm ERR! code ERESOLVE
npm ERR! ERESOLVE unable to resolve dependency tree""",
    """\
SELECT * FROM users WHERE email LIKE '%@gmail.com';""",
    """\
ls -la | grep .py | wc -l""",
    """\
x = [i * i for i in range(100) if i % 3 == 0]""",
    """\
<div class="card"><h2>{{ title }}</h2><p>{{ body }}</p></div>""",
    """\
CREATE INDEX idx_orders_customer ON orders (customer_id, created_at DESC);""",
    """\
TypeError: Cannot read properties of undefined (reading 'map') at App.js:23:18""",
)

CALIBRATION_TEXTS: tuple[str, ...] = (*(line for line in _ONE_LINERS.splitlines() if line), *_LONGER, *_CODE)
