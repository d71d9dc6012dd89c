"""Synthetic chat clash pairs for the NLI model, made by perturbing first-person statements.

The public NLI sets the model trains on are captions (SNLI), genre text (MultiNLI), debates
(ProSeCCo) and spoken dialogue (DNLI); none of them looks like a user telling an assistant
about themselves. A clash detector sees (earlier turn, newer turn) of one speaker, usually
chatty turns in which the fact sits between a greeting and a request. This module writes such
pairs from small hand-made lexicons and templates:

* contradictions: a value swapped (age, city, count, money, date, time, weekday, name, job,
  language), a statement negated, an antonym, an existence flip ("I have a dog" / "I don't have
  any pets") and profile facts broken by a later remark (a vegetarian eating steak, an allergy
  and the food, an abstention and the habit, a family size, a residence, an occupation);
* hard negatives, which share the words and the topic but do not contradict: an announced
  update ("we moved to Lyon last month"), the same claim about another person, hypotheticals,
  time-qualified statements ("I used to ..."), restatements and paraphrases, consistent
  elaborations, questions, a different item of the same kind, and unrelated facts of the same
  speaker (most pairs a clash detector scores are unrelated).

It also perturbs sentences from the shippable NLI data (DNLI hypotheses, MIT; SNLI sentences,
CC BY-SA 4.0): an auxiliary negated or un-negated gives a contradiction, while attributing the
negated sentence to someone else, or to the past, gives a hard negative.

Premise = the earlier statement, hypothesis = the newer one. Everything is deterministic for
a seed. Labels: contradiction allows {contradiction}; restatements allow {entailment}; every
other negative allows {entailment, neutral} (see ``nli_data``).
"""

from __future__ import annotations

import json
import random
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from agentmem.train.nli_data import CONTRADICTION, NOT_CONTRADICTION, Example

ENTAILMENT: frozenset[int] = frozenset({1})

# ---------------------------------------------------------------------------- lexicons

NAMES = ["Maya", "Tom", "Priya", "Daniel", "Sofia", "Liam", "Aisha", "Noah", "Elena", "Marcus",
         "Chloe", "Ravi", "Hannah", "Diego", "Yuki", "Omar", "Grace", "Felix", "Nadia", "Owen",
         "Lucia", "Kenji", "Zoe", "Samuel", "Ingrid", "Mateo", "Leila", "Ben", "Rosa", "Ethan",
         "Amara", "Jonas", "Carmen", "Theo", "Mei", "Patrick", "Fatima", "Hugo", "Sara", "Kofi"]
PET_NAMES = ["Biscuit", "Clover", "Luna", "Pepper", "Max", "Nala", "Oscar", "Willow", "Rocky",
             "Daisy", "Ziggy", "Mochi", "Bean", "Coco", "Juniper", "Toby"]
# (species, plural)
PETS = [("dog", "dogs"), ("cat", "cats"), ("rabbit", "rabbits"), ("parrot", "parrots"),
        ("hamster", "hamsters"), ("tortoise", "tortoises"), ("guinea pig", "guinea pigs")]
# (city, country)
CITIES = [("Denver", "the US"), ("Phoenix", "the US"), ("Chicago", "the US"), ("Seattle", "the US"),
          ("Boston", "the US"), ("Austin", "the US"), ("Toronto", "Canada"), ("Vancouver", "Canada"),
          ("Montreal", "Canada"), ("Berlin", "Germany"), ("Munich", "Germany"), ("Paris", "France"),
          ("Lyon", "France"), ("Madrid", "Spain"), ("Barcelona", "Spain"), ("Rome", "Italy"),
          ("Milan", "Italy"), ("Lisbon", "Portugal"), ("Dublin", "Ireland"),
          ("Manchester", "the UK"), ("Edinburgh", "the UK"), ("Leeds", "the UK"),
          ("Amsterdam", "the Netherlands"), ("Stockholm", "Sweden"), ("Oslo", "Norway"),
          ("Warsaw", "Poland"), ("Prague", "the Czech Republic"), ("Vienna", "Austria"),
          ("Zurich", "Switzerland"), ("Tokyo", "Japan"), ("Osaka", "Japan"), ("Seoul", "South Korea"),
          ("Mumbai", "India"), ("Bangalore", "India"), ("Sydney", "Australia"),
          ("Melbourne", "Australia"), ("Auckland", "New Zealand"), ("Mexico City", "Mexico"),
          ("Buenos Aires", "Argentina"), ("São Paulo", "Brazil"), ("Cape Town", "South Africa"),
          ("Nairobi", "Kenya"), ("Istanbul", "Turkey"), ("Singapore", "Singapore"),
          ("Bangkok", "Thailand"), ("Hanoi", "Vietnam")]
# (job with article, field)
JOBS = [("a nurse", "health care"), ("a teacher", "education"), ("a software engineer", "tech"),
        ("an accountant", "finance"), ("a chef", "restaurants"), ("a lawyer", "law"),
        ("an electrician", "construction"), ("a pharmacist", "pharmacy"),
        ("a graphic designer", "design"), ("a truck driver", "trucking"), ("a dentist", "dentistry"),
        ("a librarian", "libraries"), ("a firefighter", "the fire service"),
        ("a data analyst", "data"), ("a photographer", "photography"), ("a mechanic", "car repair"),
        ("a pilot", "aviation"), ("a vet", "veterinary medicine"), ("a barista", "coffee shops"),
        ("a social worker", "social work"), ("a real estate agent", "real estate"),
        ("a journalist", "journalism"), ("a plumber", "plumbing"), ("a police officer", "policing"),
        ("a hairdresser", "hairdressing"), ("a farmer", "farming"), ("an architect", "architecture")]
LANGUAGES = ["Spanish", "French", "German", "Italian", "Portuguese", "Japanese", "Mandarin",
             "Korean", "Arabic", "Hindi", "Russian", "Polish", "Dutch", "Swedish", "Turkish", "Greek"]
RELATIVES = ["my sister", "my brother", "my husband", "my wife", "my partner", "my mom", "my dad",
             "my roommate", "my best friend", "my neighbour", "my boss", "my cousin", "my son",
             "my daughter", "my coworker", "my girlfriend", "my boyfriend"]
MEAT = ["a steak", "a bacon cheeseburger", "chicken wings", "pulled pork", "lamb chops",
        "a pepperoni pizza", "beef tacos", "a ham sandwich", "chicken curry", "meatballs",
        "roast chicken", "pork dumplings", "a chorizo omelette", "beef stew"]
VEGGIE = ["a lentil curry", "a mushroom risotto", "falafel", "a veggie burger", "vegetable stir-fry",
          "tofu pad thai", "a bean chili", "chickpea stew", "a roasted vegetable salad"]
DAIRY = ["a cheese omelette", "a milkshake", "mac and cheese", "cheesecake", "a latte with whole milk",
         "a big bowl of ice cream", "a grilled cheese sandwich"]
# (allergen phrase, foods that contain it)
ALLERGIES = [("peanuts", ["peanut butter toast", "satay chicken", "a Snickers bar", "pad thai with crushed peanuts"]),
             ("shellfish", ["a lobster roll", "garlic prawns", "crab cakes", "mussels", "a seafood paella"]),
             ("tree nuts", ["almond croissants", "walnut brownies", "cashew curry", "pistachio ice cream"]),
             ("eggs", ["scrambled eggs", "an omelette", "eggs Benedict", "a boiled egg"]),
             ("fish", ["salmon sushi", "fish and chips", "grilled tuna", "a fish taco"]),
             ("sesame", ["hummus", "sesame bagels", "tahini dressing"])]
# things one can love or hate
LIKES = ["sci-fi films", "jazz", "running", "cooking", "spicy food", "mushrooms", "country music",
         "hiking", "video games", "fantasy novels", "the beach", "winter", "crowds", "camping",
         "sushi", "early mornings", "musicals", "rock climbing", "gardening", "board games",
         "reality TV", "coffee", "cats", "flying", "public speaking", "olives", "swimming",
         "heavy metal", "road trips", "yoga", "baking", "football", "podcasts", "museums"]
# self-descriptions that cannot both hold: (A, B)
ANTONYMS = [("I'm an early riser", "I'm a night owl and never get up before ten"),
            ("I'm a morning person", "mornings are the worst, I'm useless before noon"),
            ("I'm pretty tall, about 6'3\"", "I'm pretty short, only about 5'2\""),
            ("I'm really introverted", "I'm a total extrovert and love big parties"),
            ("I'm right-handed", "I'm left-handed"),
            ("my apartment is tiny", "my apartment is huge"),
            ("I'm married", "I'm single"),
            ("I'm a very patient person", "I'm not patient at all"),
            ("I'm terrible at cooking", "I'm a great cook"),
            ("I'm afraid of heights", "heights don't scare me at all, I love skydiving"),
            ("I work from home full time", "I commute to the office every day"),
            ("I'm a student", "I finished school years ago and work full time"),
            ("I live alone", "I live with three roommates"),
            ("I'm retired", "I work full time"),
            ("I sleep really well", "I've had insomnia for years"),
            ("my job is very stressful", "my job is totally relaxed"),
            ("I'm fit and work out every day", "I never exercise"),
            ("I rent my place", "I own my house"),
            ("I'm an only child", "I grew up with four siblings"),
            ("I'm colour-blind", "I can see colours perfectly fine")]
WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August",
          "September", "October", "November", "December"]
EVENTS = ["my wedding", "my brother's wedding", "the party", "my interview", "my exam",
          "the conference", "my dentist appointment", "our anniversary dinner", "the move",
          "my surgery", "the concert", "my presentation", "the team offsite"]
TRANSPORT = ["flight", "train", "bus", "ferry"]
SPORTS_ETC = ["play tennis", "go swimming", "have choir practice", "have yoga", "play football",
              "visit my grandma", "have my pottery class", "do the grocery shopping"]

PREFIXES = ["Hi!", "Hey,", "Thanks.", "Okay.", "Quick question.", "Oh, and", "By the way,",
            "Honestly,", "Sorry, one more thing:", "Good idea.", "Makes sense.", "Cool.", "Right,",
            "Haha,", "So,", "Hello!", "Great, thanks.", "Ah ok.", "Also,", "Well,", "Hmm,",
            "Perfect.", "Got it.", "Good morning!", "Noted."]
SUFFIXES = ["Any recommendations?", "What do you suggest?", "Can you help me plan something?",
            "Does that change anything?", "What should I pack?", "Any tips?",
            "Can you recommend a good book?", "Is that a problem?", "What do you think?",
            "How should I get started?", "Thanks for the help!", "lol", "Just so you know.",
            "Can you keep that in mind?", "Where should I start?", "How does that sound?",
            "Could you suggest a weekend plan?", "What's a good gift idea?", "Any ideas for dinner?",
            "I need a workout plan.", "Help me write an email to my landlord?",
            "What's the weather usually like in spring?", "Should I be worried?",
            "Can you make me a shopping list?", "Tell me more.", "That's all for now."]
FILLERS = ["It's been a long week.", "I'm trying to get organised.", "Work has been busy.",
           "I'm planning the next few months.", "I'm writing this on my phone.",
           "I finally have some free time.", "The weather here is awful today.",
           "I'm in a good mood today.", "I looked at a few options online already.",
           "Sorry for the long message.", "I've been meaning to ask about this for a while.",
           "The last suggestion was helpful.", "My schedule is a bit chaotic right now.",
           "I read a couple of reviews but they contradict each other.",
           "I want to get this sorted before the weekend.", "Nothing urgent, just curious.",
           "I asked a friend too but she wasn't sure.", "Budget matters, but so does quality.",
           "I'm trying to keep things simple.", "I've got about an hour free tonight."]


# ------------------------------------------------------------------------------ pairs

@dataclass(frozen=True)
class SynthPair:
    premise: str
    hypothesis: str
    contradiction: bool
    kind: str            # e.g. "swap", "update", "other_person" (see CONTRA_KINDS / NEG_KINDS)
    family: str          # the topic, e.g. "age", "residence", "dnli"

    def example(self) -> Example:
        if self.contradiction:
            allowed = CONTRADICTION
        elif self.kind == "restatement":
            allowed = ENTAILMENT
        else:
            allowed = NOT_CONTRADICTION
        source = "synth-perturbed" if self.family in ("dnli", "snli") else "synth"
        return Example(self.premise, self.hypothesis, allowed, source)


CONTRA_KINDS = ("swap", "negation", "antonym", "existence", "profile")
NEG_KINDS = ("update", "other_person", "hypothetical", "past", "restatement", "elaboration",
             "question", "different_item", "unrelated", "future")

# A generator gets the random source and returns (premise, hypothesis, kind) or None when the
# draw does not fit (it is then drawn again).
Gen = Callable[[random.Random], "tuple[str, str, str] | None"]


def _pick(rng: random.Random, items, exclude=()):
    choices = [x for x in items if x not in exclude]
    return rng.choice(choices)


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:] if text else text


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _number_word(n: int) -> str:
    words = ["no", "one", "two", "three", "four", "five", "six"]
    return words[n] if 0 <= n < len(words) else str(n)


def _a(word: str) -> str:
    return ("an " if word[:1].lower() in "aeiou" else "a ") + word


def _bare(food: str) -> str:
    return re.sub(r"^(a|an) ", "", food)


def _time(rng: random.Random, hour: int) -> str:
    minute = rng.choice([0, 5, 10, 15, 20, 30, 35, 40, 45, 50])
    if rng.random() < 0.5:
        return f"{hour:02d}:{minute:02d}"
    suffix = "am" if hour < 12 else "pm"
    h12 = hour - 12 if hour > 12 else hour
    return f"{h12}:{minute:02d}{suffix}" if minute else f"{h12}{suffix}"


def _money(rng: random.Random, low: int, high: int) -> int:
    return rng.randrange(low, high, 50)


# ------------------------------------------------------------------------- families

def _age(rng: random.Random):
    a = rng.randint(19, 78)
    b = _pick(rng, [x for x in range(16, 85) if abs(x - a) >= 3])
    premise = rng.choice([f"I'm {a}", f"I'm {a} years old", f"I'm {a} and trying to get in shape",
                          f"at {a} my back isn't what it used to be", f"I just turned {a}",
                          f"I'm a {a} year old {rng.choice(['guy', 'woman', 'dad', 'mum', 'student'])}"])
    r = rng.random()
    if r < 0.5:
        return premise, rng.choice([f"I'm {b}", f"I'm {b} years old", f"at {b}, is a half marathon realistic?",
                                    f"I turned {b} last month", f"being {b}, is it too late to start?",
                                    f"I'm {b} now and I've never felt better"]), "swap"
    old = rng.randint(max(5, a - 40), a - 2) if a > 12 else 5
    kind, hyp = rng.choice([
        ("other_person", f"{rng.choice(RELATIVES)} is {b}"),
        ("other_person", f"{rng.choice(RELATIVES)} just turned {b}, any gift ideas?"),
        ("past", f"when I was {old} I ran a marathon"),
        ("past", f"I started playing guitar at {old}"),
        ("restatement", f"like I said, I'm {a}"),
        ("elaboration", f"I'm in my {a // 10 * 10}s, so nothing too extreme please"),
        ("hypothetical", f"if I were {b} I'd try it"),
        ("question", f"is {b} too old to learn to swim?"),
    ])
    if kind == "restatement" and premise.startswith("I just turned"):
        hyp = f"I'm {a} now"
    return premise, hyp, kind


def _kids(rng: random.Random):
    n = rng.randint(0, 4)
    m = _pick(rng, range(0, 6), exclude=(n,))
    child = rng.choice(["son", "daughter"])
    if n == 0:
        premise = rng.choice(["I don't have kids", "I don't have any children", "we don't have kids",
                              "no kids for me", "I've never had children"])
    elif n == 1:
        premise = rng.choice([f"I have one {child}", f"I have one kid, a {child}", f"my only child is a {child}",
                              "I have a single kid", f"we have one child, a {child} named {rng.choice(NAMES)}"])
    else:
        premise = rng.choice([f"I have {_number_word(n)} kids", f"I'm a parent of {n}", f"we have {_number_word(n)} children",
                              f"I have {n} kids under ten", f"my {_number_word(n)} kids keep me busy"])
    if rng.random() < 0.5:
        if n == 0:
            hyp = rng.choice(["the school pickup for my kids is at 3:15",
                              f"my {child} has a swimming lesson on Saturday",
                              "my kids want a dog", f"my oldest {child} is learning to drive"])
            return premise, hyp, "existence"
        if m == 0:
            return premise, rng.choice(["I don't have any kids", "I've never had children",
                                        "no kids here, it's just me and my partner"]), "existence"
        return premise, rng.choice([f"I have {_number_word(m)} kids", f"all {m} of my kids",
                                    f"as a parent of {m}, I need a bigger car",
                                    f"my {_number_word(m)} children are all in school now"]), "swap"
    options = [("other_person", f"{rng.choice(['my sister', 'my brother', 'my best friend', 'my neighbour'])} has {_number_word(m)} kids"),
               ("hypothetical", f"if I had {_number_word(max(m, 2))} kids I'd need a minivan"),
               ("question", f"what's a good holiday for a family with {_number_word(max(m, 1))} kids?")]
    if n == 0:
        options += [("future", "we're hoping to start a family next year"),
                    ("past", "I babysat my nephews a lot growing up"),
                    ("restatement", "like I said, no kids"),
                    ("update", "big news: we just adopted a little girl last month")]
    elif n == 1:
        options += [("restatement", f"just the one {child}"), ("elaboration", f"my {child} turns seven next week"),
                    ("update", "we're expecting our second in May")]
    else:
        options += [("elaboration", "my youngest just lost her first tooth"),
                    ("elaboration", "my oldest is getting into football"),
                    ("restatement", f"yes, {_number_word(n)} kids"),
                    ("update", "and we're expecting another one in the spring")]
        if n == 2:
            options.append(("elaboration", "both of my kids love swimming"))
    kind, hyp = rng.choice(options)
    return premise, hyp, kind


def _siblings(rng: random.Random):
    n1, n2 = rng.sample(NAMES, 2)
    sib = rng.choice(["brother", "sister"])
    premise = rng.choice(["I'm an only child", "I don't have any siblings",
                          f"my only {sib}, {n1}, lives nearby", f"I have one {sib}, {n1}",
                          f"I have just one {sib} called {n1}"])
    only_child = "only child" in premise or "any siblings" in premise
    if rng.random() < 0.5:
        if only_child:
            hyp = rng.choice([f"my {sib} {n2} is getting married next summer", f"my two {sib}s are visiting",
                              f"I'm the youngest of three"])
        else:
            hyp = rng.choice([f"my {sib} {n2} is starting a new job, gift ideas?", f"both of my {sib}s are coming",
                              "I'm an only child", f"I don't have a {sib}"])
        return premise, hyp, "existence"
    kind, hyp = rng.choice([("other_person", f"my friend {n2} has three {sib}s"),
                            ("different_item", f"my cousin {n2} is like a {sib} to me"),
                            ("hypothetical", f"I always wished I had a {sib}") if only_child else
                            ("restatement", f"my {sib} {n1} is coming over tonight"),
                            ("elaboration", "my parents are visiting next week"),
                            ("question", f"what's a good birthday present for a {sib}?")])
    return premise, hyp, kind


def _pets(rng: random.Random):
    (pet, pets), pname, pname2 = rng.choice(PETS), *rng.sample(PET_NAMES, 2)
    (other, others) = _pick(rng, PETS, exclude=((pet, pets),))
    has = rng.random() < 0.6
    if has:
        k = rng.randint(1, 3)
        premise = rng.choice([f"I have a {pet} named {pname}", f"my {pet} {pname} is {rng.randint(2, 15)} years old",
                              f"I have {_number_word(k)} {pets if k > 1 else pet}", f"I just walked my {pet}",
                              f"{pname}, my {pet}, hates the vet"])
        if rng.random() < 0.5:
            if premise.startswith("I have") and (str(k) in premise or _number_word(k) in premise) and rng.random() < 0.4:
                m = _pick(rng, range(1, 5), exclude=(k,))
                return premise, f"I have {_number_word(m)} {pets if m > 1 else pet}", "swap"
            return premise, rng.choice(["I don't have any pets", f"I've never owned a {pet}",
                                        "I'm not an animal person, never had pets", "no pets in my house",
                                        f"I've never had a {pet} in my life"]), "existence"
        kind, hyp = rng.choice([("other_person", f"my neighbour's {pet} barks all night"),
                                ("other_person", f"{rng.choice(RELATIVES)} doesn't have any pets"),
                                ("restatement", f"{pname} is doing great, by the way" if pname in premise else f"my {pet} says hi"),
                                ("elaboration", f"my {pet} loves the park near our house"),
                                ("different_item", f"I've never owned a {other}"),
                                ("future", f"I'm thinking of getting a {other} too"),
                                ("question", f"how often should a {pet} see the vet?"),
                                ("hypothetical", f"if I didn't have a {pet} I'd travel more")])
        return premise, hyp, kind
    premise = rng.choice(["I don't have any pets", f"I've never owned a {pet}", "no pets for me",
                          "I don't have pets, my landlord doesn't allow them"])
    if rng.random() < 0.5:
        return premise, rng.choice([f"my {pet} {pname} keeps me up at night",
                                    f"I need to feed my {pet} before I leave",
                                    f"{pname}, my {pet}, sleeps on my bed every night",
                                    f"I have {_number_word(rng.randint(2, 3))} {pets}"]), "existence"
    options = [("other_person", f"my sister's {pet} {pname2} is adorable"),
               ("future", f"I'd love to get a {pet} someday"),
               ("hypothetical", f"if I had a {pet} I'd call it {pname}"),
               ("question", f"what's the easiest pet for a busy person, a {pet}?"),
               ("restatement", "still no pets here")]
    if "never owned" not in premise:
        options += [("update", f"we just adopted a {pet} last week, her name is {pname}"),
                    ("past", f"I had a {pet} as a kid")]
    kind, hyp = rng.choice(options)
    return premise, hyp, kind


def _residence(rng: random.Random):
    (c1, k1), (c2, k2) = rng.sample(CITIES, 2)
    years = rng.randint(2, 20)
    premise = rng.choice([f"I live in {c1}", f"I've lived in {c1} for {years} years", f"I'm based in {c1}",
                          f"here in {c1} it's been raining all week", f"I live in {c1} with my partner",
                          f"my flat in {c1} is tiny"])
    if rng.random() < 0.5:
        hyp = rng.choice([f"I live in {c2}", f"I've lived in {c2} my whole life",
                          f"here in {c2} the winters are long and dark", f"I'm based in {c2}, so the time zone is different",
                          f"I've lived in {c2} for {rng.randint(3, 15)} years now",
                          f"I've never been to {c1}"])
        if k1 != k2 and rng.random() < 0.2:
            hyp = f"I've never lived outside {k2}"
        return premise, hyp, "swap"
    kind, hyp = rng.choice([("update", f"we moved to {c2} last month"),
                            ("update", f"I just relocated to {c2} for work"),
                            ("future", f"I'm moving to {c2} in the spring"),
                            ("past", f"I used to live in {c2}"),
                            ("past", f"I lived in {c2} until {rng.randint(1995, 2021)}"),
                            ("other_person", f"{rng.choice(RELATIVES)} lives in {c2}"),
                            ("different_item", f"I'm visiting {c2} next week"),
                            ("question", f"is {c2} worth a weekend trip?"),
                            ("elaboration", f"the public transport in {c1} is great"),
                            ("restatement", f"since I'm in {c1}, evenings work best for calls"),
                            ("hypothetical", f"if I lived in {c2} I'd cycle everywhere")])
    return premise, hyp, kind


def _travel(rng: random.Random):
    (c1, k1) = rng.choice(CITIES)
    (c2, k2) = _pick(rng, [c for c in CITIES if c[1] != k1])
    premise = rng.choice([f"I've never been to {k1}", f"I've never set foot in {k1}",
                          f"I've never travelled to {k1}", f"{k1} is somewhere I've never been"])
    if rng.random() < 0.5:
        return premise, rng.choice([f"I spent two weeks in {c1} last spring visiting friends",
                                    f"I lived in {c1} for two years", f"I've been to {c1} three times",
                                    f"my trip to {c1} last summer was amazing"]), "existence"
    kind, hyp = rng.choice([("future", f"I'd love to visit {c1} someday"),
                            ("other_person", f"my friend just got back from {c1}"),
                            ("different_item", f"I spent a week in {c2} last year"),
                            ("question", f"what should I see in {c1} on a first trip?"),
                            ("update", f"I'm finally flying to {c1} next month!"),
                            ("hypothetical", f"if I ever go to {c1} I'll try the street food")])
    return premise, hyp, kind


def _job(rng: random.Random):
    (j1, f1), (j2, f2) = rng.sample(JOBS, 2)
    premise = rng.choice([f"I'm {j1}", f"I work as {j1}", f"I've been {j1} for {rng.randint(2, 25)} years",
                          f"as {j1}, I work a lot of weekends", f"I'm {j1} at a small place downtown"])
    if rng.random() < 0.5:
        return premise, rng.choice([f"I'm {j2}", f"I work as {j2}", f"I've worked as {j2} since I left school",
                                    f"I've never worked in {f1}", f"I've never had a job in {f1}",
                                    "I don't work, I've been unemployed for two years"]), "swap"
    kind, hyp = rng.choice([("past", f"I used to be {j2} before this"),
                            ("future", f"I'm thinking of retraining as {j2}"),
                            ("other_person", f"{rng.choice(RELATIVES)} is {j2}"),
                            ("update", f"I just quit and started a new job as {j2} last week"),
                            ("hypothetical", f"if I were {j2} I'd have weekends off"),
                            ("question", f"how much does {j2} earn?"),
                            ("elaboration", "my shifts start at seven"),
                            ("restatement", f"my job in {f1} keeps me busy")])
    return premise, hyp, kind


def _diet(rng: random.Random):
    style = rng.choice(["vegetarian", "vegan", "no_meat"])
    meat, veg, dairy = rng.choice(MEAT), rng.choice(VEGGIE), rng.choice(DAIRY)
    if style == "vegan":
        premise = rng.choice(["I'm vegan", "I've been vegan for years", "I don't eat any animal products",
                              "I'm fully plant-based"])
        bad = rng.choice([meat, dairy])
    else:
        premise = rng.choice(["I'm vegetarian", "I don't eat meat", "I've been vegetarian since college",
                              "no meat for me, I'm veggie", "I haven't eaten meat in ten years"])
        bad = meat
    if rng.random() < 0.5:
        return premise, rng.choice([f"{bad} is what I ordered at lunch today",
                                    f"I'm making {bad} tonight, it's my favourite",
                                    f"I eat {bad} pretty much every week",
                                    f"honestly nothing beats {bad}, I have it all the time",
                                    "I'm a big meat eater"]), "profile"
    kind, hyp = rng.choice([("other_person", f"I'm making {meat} for my husband, he loves it"),
                            ("other_person", f"my friends ordered {meat} and I got {veg}"),
                            ("different_item", f"I had {veg} last night, so good"),
                            ("past", f"I used to love {meat} before I stopped eating meat"),
                            ("hypothetical", f"in another life I'd order {meat} every day"),
                            ("question", f"is there a plant-based version of {meat}?"),
                            ("restatement", "so nothing with meat, please"),
                            ("elaboration", f"my go-to dinner is {veg}")])
    return premise, hyp, kind


def _allergy(rng: random.Random):
    allergen, foods = rng.choice(ALLERGIES)
    other, other_foods = _pick(rng, ALLERGIES, exclude=((allergen, foods),))
    food = rng.choice(foods)
    premise = rng.choice([f"I'm severely allergic to {allergen}", f"I have a {allergen} allergy",
                          f"I can't eat {allergen}, I'm allergic", f"nothing with {allergen} please, I'm allergic"])
    if rng.random() < 0.5:
        return premise, rng.choice([f"I eat {food} almost every day", f"I just had {food} for lunch",
                                    f"my usual order is {_bare(food)}", f"{_bare(food)} is basically my staple, I have it twice a week",
                                    f"I'm not allergic to anything"]), "profile"
    kind, hyp = rng.choice([("other_person", f"my son is allergic to {other} too"),
                            ("other_person", f"I'll make {food} for the guests and something else for me"),
                            ("different_item", f"I had {rng.choice(other_foods)} for lunch"),
                            ("question", f"is {food} safe for someone with a {allergen} allergy?"),
                            ("elaboration", "I always carry an EpiPen"),
                            ("restatement", f"remember, no {allergen}"),
                            ("past", f"I loved {food} as a kid, before the allergy showed up")])
    return premise, hyp, kind


def _abstain(rng: random.Random):
    habit = rng.choice(["alcohol", "smoking", "coffee", "car", "meat_free_day"])
    if habit == "alcohol":
        never = rng.random() < 0.5
        premise = rng.choice(["I've never had a drink in my life", "I've never touched alcohol"]) if never else \
            rng.choice(["I don't drink alcohol", "I don't drink", f"I've been sober for {rng.randint(2, 12)} years"])
        contra = ["I split a bottle of wine with friends on Friday", "I'm opening a bottle of red tonight",
                  "I love a glass of wine with dinner", "I got pretty drunk at the party on Saturday"]
        negs = [("other_person", "my friends had a few beers while I stuck to soda"),
                ("question", "what's a good non-alcoholic cocktail?"),
                ("other_person", "I'm bringing wine for the hosts"),
                ("restatement", "I'll skip the wine, I don't drink")]
        if not never:
            negs.append(("past", "I used to drink a lot in college"))
    elif habit == "smoking":
        never = rng.random() < 0.5
        premise = "I've never smoked" if never else rng.choice(["I don't smoke", "I'm a non-smoker"])
        contra = ["I smoke about a pack a day", "I'm trying to cut down to five cigarettes a day",
                  "I just went out for a smoke", "I've smoked since I was sixteen"]
        negs = [("other_person", "my dad smokes a pack a day"), ("question", "how bad is vaping?"),
                ("restatement", "as a non-smoker I hate it when people light up near me")]
        if not never:
            negs.append(("past", f"I gave up cigarettes {rng.randint(2, 15)} years ago"))
    elif habit == "coffee":
        premise = rng.choice(["I don't drink coffee", "I never touch caffeine", "I can't have coffee"])
        contra = ["I'm on my third espresso today", "I can't function without my morning coffee",
                  "I drink about four cups of coffee a day"]
        negs = [("different_item", "I love a cup of herbal tea in the evening"),
                ("other_person", "my wife drinks espresso all day long"),
                ("question", "what's a good caffeine-free pick-me-up?")]
    elif habit == "car":
        premise = rng.choice(["I don't own a car", "I don't have a driver's licence", "I don't drive"])
        contra = ["I drove to work this morning", "my car's in the shop again",
                  "I'll just drive there myself", "I parked my car outside"]
        negs = [("different_item", "I took the bus to work"), ("other_person", "my wife drove us there"),
                ("future", "I'm taking driving lessons this summer"),
                ("question", "what's the best way to get there by train?")]
    else:
        premise = rng.choice(["I never eat breakfast", "I skip breakfast every day"])
        contra = ["I had a big breakfast like I do every morning", "breakfast is my favourite meal, I never skip it"]
        negs = [("other_person", "my kids need a big breakfast"), ("question", "is skipping breakfast bad?"),
                ("elaboration", "I usually have a big lunch instead")]
    if rng.random() < 0.5:
        return premise, rng.choice(contra), "profile"
    kind, hyp = rng.choice(negs)
    return premise, hyp, kind


def _likes(rng: random.Random):
    x, y = rng.sample(LIKES, 2)
    love = [f"I love {x}", f"I'm a huge fan of {x}", f"{x} is my favourite thing", f"I really enjoy {x}",
            f"I'm obsessed with {x}"]
    hate = [f"I hate {x}", f"I can't stand {x}", f"I've never liked {x}", f"{x} is really not my thing",
            f"I don't enjoy {x} at all", f"I'm not a fan of {x}"]
    positive = rng.random() < 0.5
    premise = rng.choice(love if positive else hate)
    if rng.random() < 0.5:
        return premise, rng.choice(hate if positive else love), "antonym"
    options = [("different_item", rng.choice([f"I love {y}", f"I can't stand {y}", f"I'm not a fan of {y}"])),
               ("other_person", f"{rng.choice(RELATIVES)} {'hates' if positive else 'loves'} {x}"),
               ("question", f"do you {'like' if positive else 'hate'} {x}?"),
               ("question", f"any suggestions related to {x}?"),
               ("restatement", rng.choice(love if positive else hate))]
    if positive:
        options += [("past", f"I used to hate {x} but I've come around"),
                    ("elaboration", f"I'd spend every weekend on {x} if I could")]
    else:
        options += [("past", f"I loved {x} as a teenager"),
                    ("hypothetical", f"I'd only try {x} if someone paid me")]
    kind, hyp = rng.choice(options)
    return premise, hyp, kind


def _antonym(rng: random.Random):
    a, b = rng.choice(ANTONYMS)
    if rng.random() < 0.5:
        a, b = b, a
    if rng.random() < 0.5:
        return a, b, "antonym"
    rel = rng.choice(RELATIVES)
    b_other = re.sub(r"^I'm ", f"{rel} is ", b)
    b_other = re.sub(r"^my ", f"{rel}'s ", b_other)
    if b_other == b:
        b_other = f'quoting {rel}: "{_cap(b)}"'
    kind, hyp = rng.choice([("other_person", b_other),
                            ("past", f"a few years ago I would have said {b}"),
                            ("restatement", f"like I said, {a}"),
                            ("question", f"is it bad that {a}?"),
                            ("hypothetical", f"I wish I could say {b}")])
    return a, hyp, kind


def _money_family(rng: random.Random):
    x = _money(rng, 300, 3000)
    thing = rng.choice(["a laptop", "a tent", "a sofa", "the trip", "a camera", "a used car deposit",
                        "the wedding dress", "a TV", "a new phone"])
    premise = rng.choice([f"my budget for {thing} is ${x}, hard cap", f"I can't spend more than ${x} on {thing}",
                          f"${x} is my absolute maximum for {thing}", f"I have exactly ${x} to spend on {thing}"])
    if rng.random() < 0.5:
        y = x + rng.choice([500, 800, 1000, 1500, 2000])
        return premise, rng.choice([f"actually I'm fine going up to ${y}",
                                    f"price doesn't matter, show me the priciest {thing.split()[-1]}",
                                    f"my budget is ${y}", f"I'm happy to spend ${y} or more"]), "swap"
    lower = x - rng.choice([50, 100, 200])
    kind, hyp = rng.choice([("elaboration", f"something around ${lower} would be even better"),
                            ("other_person", f"my brother spent ${x + 900} on his"),
                            ("restatement", f"so, ${x} max"),
                            ("question", f"can I get something decent for under ${lower}?"),
                            ("update", f"good news, I got a bonus, so my budget is now ${x + 500}")])
    return premise, hyp, kind


def _numbers(rng: random.Random):
    what = rng.choice(["rent", "commute", "height", "run", "sleep", "salary"])
    if what == "rent":
        a = _money(rng, 600, 3500)
        b = a + rng.choice([-400, -300, 300, 500, 800])
        premise, swap, same = f"my rent is ${a} a month", f"I pay ${b} a month in rent", f"paying ${a} a month in rent"
        other = f"pays ${b} a month in rent"
    elif what == "commute":
        a = rng.choice([10, 15, 20, 30, 45, 60, 90])
        b = _pick(rng, [10, 15, 20, 30, 45, 60, 90, 120], exclude=(a,))
        premise, swap, same = f"my commute is {a} minutes each way", f"it takes me {b} minutes to get to work", f"a {a}-minute commute"
        other = f"has a {b}-minute commute"
    elif what == "height":
        a = rng.randint(150, 195)
        b = a + rng.choice([-15, -10, 10, 15])
        premise, swap, same = f"I'm {a} cm tall", f"I'm {b} cm", f"being {a} cm tall"
        other = f"is {b} cm tall"
    elif what == "run":
        a = rng.choice([5, 10, 15, 20, 30, 40])
        b = _pick(rng, [0, 5, 10, 15, 20, 30, 40, 60], exclude=(a,))
        premise = f"I run about {a} miles a week"
        swap = f"I run {b} miles a week" if b else "I've never been running in my life"
        same = f"running {a} miles a week"
        other = f"runs {b or 25} miles a week"
    elif what == "sleep":
        a = rng.randint(4, 9)
        b = _pick(rng, range(3, 11), exclude=(a, a - 1, a + 1))
        premise, swap, same = f"I only sleep {a} hours a night", f"I get {b} hours of sleep every night", f"sleeping {a} hours a night"
        other = f"sleeps {b} hours a night"
    else:
        a = rng.randint(35, 150)
        b = a + rng.choice([-20, -15, 15, 25, 40])
        premise, swap, same = f"I make {a}k a year", f"my salary is {b}k", f"making {a}k a year"
        other = f"makes {b}k a year"
    if rng.random() < 0.5:
        return premise, swap, "swap"
    kind, hyp = rng.choice([("other_person", f"{rng.choice(RELATIVES)} {other}"),
                            ("restatement", f"like I said, {same}"),
                            ("update", f"things changed this month: {swap}, since I moved"),
                            ("question", f"is {same} normal?")])
    return premise, hyp, kind


def _dates(rng: random.Random):
    event = rng.choice(EVENTS)
    what = rng.choice(["date", "time", "weekday"])
    at = "at" if what == "time" else "on"
    if what == "date":
        month = rng.choice(MONTHS)
        d1, d2 = rng.sample(range(1, 29), 2)
        v1, v2 = f"{month} {_ordinal(d1)}", rng.choice([f"{month} {_ordinal(d2)}", f"{_pick(rng, MONTHS, (month,))} {_ordinal(d1)}"])
        premise = rng.choice([f"{event} is on {v1}", f"{event} is {v1}", f"we set {event} for {v1}"])
        contra = rng.choice([f"{event} falls on {v2}, so I need that week off", f"{event} is on {v2}",
                             f"{event} is {v2}, so the week before is busy"])
    elif what == "time":
        thing = rng.choice(TRANSPORT)
        h1, h2 = rng.sample(range(5, 23), 2)
        t1, t2 = _time(rng, h1), _time(rng, h2)
        v1, v2, event = t1, t2, f"my {thing}"
        premise = rng.choice([f"my {thing} leaves at {t1}", f"my {thing} is at {t1}", f"I'm on the {t1} {thing}"])
        contra = rng.choice([f"my {thing} leaves at {t2}", f"since my {thing} is at {t2}, when should I leave home?",
                             f"I'm on the {t2} {thing}"])
    else:
        d1, d2 = rng.sample(WEEKDAYS, 2)
        v1, v2 = d1, d2
        premise = rng.choice([f"{event} is on {d1}", f"{event} is this {d1}"])
        contra = rng.choice([f"{event} is on {d2}", f"{event} is this {d2}, right after work"])
    if rng.random() < 0.5:
        return premise, contra, "swap"
    kind, hyp = rng.choice([("update", f"they just moved {event} to {v2}, so we need to re-plan"),
                            ("update", f"update: {event} got rescheduled to {v2}"),
                            ("update", f"{event} was moved, it's {at} {v2} now"),
                            ("other_person", f"my friend's {event.split()[-1]} is {at} {v2}"),
                            ("restatement", f"just confirming, {event} is {v1}"),
                            ("question", f"would {v2} work better for {event}?"),
                            ("elaboration", f"I need to get ready the night before {event}")])
    return premise, hyp, kind


def _routine(rng: random.Random):
    d1 = rng.choice(WEEKDAYS)
    act = rng.choice(SPORTS_ETC)
    premise = rng.choice([f"I {act} every {d1}", f"on {d1}s I always {act}", f"{d1} is when I {act}, every week"])
    if rng.random() < 0.5:
        return premise, rng.choice([f"I'm free every {d1}, I never have plans", f"I never {act}",
                                    f"{d1}s are completely empty for me every week"]), "negation"
    kind, hyp = rng.choice([("elaboration", f"this {d1} I'm skipping it, I have a dentist appointment"),
                            ("other_person", f"my husband has {d1}s free"),
                            ("different_item", f"I'm free on {_pick(rng, WEEKDAYS, (d1,))}s"),
                            ("question", f"could we meet on {_pick(rng, WEEKDAYS, (d1,))} instead?"),
                            ("past", f"I used to be free on {d1}s")])
    return premise, hyp, kind


def _language(rng: random.Random):
    l1, l2 = rng.sample(LANGUAGES, 2)
    if rng.random() < 0.5:
        premise = rng.choice(["I only speak English", "English is the only language I speak",
                              f"I don't speak a word of {l1}"])
        contra = rng.choice([f"I'm fluent in {l1}", f"I grew up speaking {l1} at home",
                             f"I speak {l1} every day at work"])
    else:
        premise = rng.choice([f"I'm fluent in {l1}", f"I speak {l1} at home", f"{l1} is my first language"])
        contra = rng.choice([f"I don't speak any {l1}", "I only speak English", f"I can't speak {l1} at all"])
    if rng.random() < 0.5:
        return premise, contra, "negation"
    kind, hyp = rng.choice([("future", f"I'm learning {l2} on an app"),
                            ("other_person", f"my wife speaks {l1}"),
                            ("question", f"can you translate this into {l2}?"),
                            ("hypothetical", f"I wish I spoke {l2}"),
                            ("different_item", f"I don't speak {l2}")])
    return premise, hyp, kind


def _name(rng: random.Random):
    n1, n2 = rng.sample(NAMES, 2)
    premise = rng.choice([f"my name is {n1}", f"I'm {n1}, by the way", f"call me {n1}", f"{n1} here"])
    if rng.random() < 0.5:
        return premise, rng.choice([f"my name is {n2}", f"I'm {n2}, nice to meet you", f"my name's {n2}, not {n1}"]), "swap"
    kind, hyp = rng.choice([("other_person", f"my friend {n2} recommended you"),
                            ("restatement", f"it's {n1} again"),
                            ("other_person", f"my manager is called {n2}"),
                            ("question", f"can you address the letter from {n1}?")])
    return premise, hyp, kind


def _marital(rng: random.Random):
    partner = rng.choice(["wife", "husband", "partner"])
    name = rng.choice(NAMES)
    if rng.random() < 0.5:
        premise = rng.choice(["I'm single", "I've never been married", "I'm not married", "I live alone and I'm single"])
        contra = rng.choice([f"my {partner} {name} and I are celebrating our anniversary",
                             f"my {partner} and I have been married ten years", "I'm married"])
        negs = [("future", "I have a first date on Friday"), ("other_person", f"my sister just got married"),
                ("question", "any tips for a first date?")]
        if "single" in premise:
            negs.append(("past", "my ex-wife lives in Leeds"))
    else:
        premise = rng.choice([f"my {partner} {name} and I live together", "I'm married", f"I've been married to {name} for eight years"])
        contra = rng.choice(["I'm single", "I've never been married", "I've never had a partner"])
        negs = [("other_person", "my brother is single"), ("elaboration", f"my {partner} loves hiking"),
                ("question", "what's a good anniversary gift?")]
    if rng.random() < 0.5:
        return premise, contra, "negation"
    kind, hyp = rng.choice(negs)
    return premise, hyp, kind


def _instructions(rng: random.Random):
    l1, l2 = rng.sample(["French", "Spanish", "German", "English", "Italian", "Dutch"], 2)
    pairs = [(f"answer in {l1} only", f"switch to {l2} for all replies"),
             ("keep it brief, two or three lines max", "I want very long, in-depth replies"),
             ("please avoid tables", "put everything in tables"),
             ("use a formal tone with me", "be super casual with me, slang is fine"),
             ("don't include any code, just explain the idea", "always include the full code"),
             ("call me by my first name", "always address me by my full title"),
             ("write every code example in Go", "give every example in Python only"),
             ("no exclamation marks ever", "use lots of exclamation marks")]
    premise, contra = rng.choice(pairs)
    if rng.random() < 0.5:
        framed = rng.choice([f"{contra} from here on", f"as I said at the start, {contra}",
                             f"remember my rule: {contra}", f"like I asked earlier, {contra}", contra])
        return premise, framed, "negation"
    kind, hyp = rng.choice([("different_item", "also, please add a short summary at the end"),
                            ("restatement", f"as I said at the start, {premise}"),
                            ("elaboration", "and keep the tone friendly"),
                            ("question", "can you remind me what settings I asked for?"),
                            ("other_person", f"my colleague prefers it the other way: {contra}"),
                            ("update", f"for this one document only, {contra}; after that, back to normal")])
    return premise, hyp, kind


# ------------------------------------------------------------ more profile families

CITIZENSHIPS = ["American", "Canadian", "British", "Irish", "French", "German", "Spanish", "Italian",
                "Dutch", "Polish", "Indian", "Japanese", "Brazilian", "Mexican", "Australian", "Kenyan"]
UNIVERSITIES = ["Leeds", "Toronto", "Michigan", "Edinburgh", "Sydney", "Bologna", "Utrecht", "Kyoto",
                "Texas", "Bristol", "Melbourne", "Warwick", "Arizona", "Cork"]
SUBJECTS = ["history", "chemistry", "economics", "nursing", "law", "physics", "graphic design",
            "computer science", "philosophy", "biology", "music", "accounting"]


def _citizenship(rng: random.Random):
    c1, c2 = rng.sample(CITIZENSHIPS, 2)
    premise = rng.choice([f"I'm {c1}, only {c1} citizenship", f"I only hold {_a(c1)} passport",
                          f"I'm {_a(c1)} citizen and that's my only nationality"])
    if rng.random() < 0.5:
        return premise, rng.choice([f"as {_a(c2)} citizen with no other passport, do I need a visa?",
                                    f"I've only ever had {_a(c2)} passport", f"I'm {c2} through and through, born and raised"]), "swap"
    kind, hyp = rng.choice([("other_person", f"my husband is {c2}, does that help?"),
                            ("future", f"I'm applying for {c2} citizenship next year"),
                            ("question", f"do {c2} citizens need a visa for this trip?"),
                            ("restatement", f"with my {c1} passport, what are the rules?"),
                            ("hypothetical", f"if I were {c2} this would be easier")])
    return premise, hyp, kind


def _education(rng: random.Random):
    u1, u2 = rng.sample(UNIVERSITIES, 2)
    s1, s2 = rng.sample(SUBJECTS, 2)
    r = rng.random()
    if r < 0.35:
        premise = rng.choice([f"I did my whole degree at {u1}, {s1}", f"I studied {s1} at {u1} and graduated in {rng.randint(2005, 2022)}"])
        contra = rng.choice([f"my diploma is from {u2}, I finished there in three years",
                             f"I studied {s2}, nothing else, so {s1} is new to me",
                             "I never went to university"])
        negs = [("other_person", f"my sister went to {u2}"), ("future", f"I'm thinking of a master's at {u2}"),
                ("elaboration", f"my final project at {u1} was on climate policy"),
                ("past", f"I spent one summer school at {u2} before my degree started")]
    elif r < 0.7:
        premise = rng.choice(["I never went to college", "I left school at sixteen and never studied further",
                              "I don't have a degree"])
        contra = rng.choice([f"when I was at {u1} studying {s1}, I loved the library",
                             f"my {s1} degree from {u1} helps here", f"I graduated from {u1} in {s1}"])
        negs = [("future", f"I'm thinking of studying {s1} part-time"),
                ("other_person", f"my son is studying {s1} at {u1}"),
                ("question", f"is a {s1} degree worth it?")]
    else:
        premise = rng.choice(["I've never written a single program",
                              "I've never cooked anything more complex than toast",
                              "I've never driven a car in my life"])
        if "program" in premise:
            contra = "I rewrote our team's data pipeline last month, so I know my way around code"
        elif "cooked" in premise:
            contra = "I cooked a five-course dinner for twelve people last weekend"
        else:
            contra = "I drove across the country last summer"
        negs = [("future", "I'd like to learn properly this year"),
                ("other_person", "my brother is a pro at it"),
                ("question", "where should a complete beginner start?")]
    if rng.random() < 0.5:
        return premise, contra, "profile"
    kind, hyp = rng.choice(negs)
    return premise, hyp, kind


def _housing(rng: random.Random):
    r = rng.random()
    if r < 0.35:
        premise = rng.choice(["I rent my flat from a landlord", "we rent, we don't own anything",
                              "I'm renting an apartment downtown"])
        contra = rng.choice(["since the flat is mine, I can knock down a wall myself, right?",
                             "we own our place outright, no mortgage",
                             "since I bought my apartment, the repairs are on me"])
        negs = [("future", "we're saving to buy a place next year"),
                ("other_person", "my parents own their house"),
                ("question", "can my landlord raise the rent mid-contract?"),
                ("elaboration", "my lease runs until next March")]
    elif r < 0.7:
        premise = rng.choice(["I live alone", "it's just me in my apartment", "I live by myself in a studio"])
        contra = rng.choice(["my roommate and I share the kitchen", "my flatmate keeps eating my food",
                             "the four of us who live here split the bills"])
        negs = [("other_person", "my friend has three roommates"),
                ("past", "I had roommates at university"),
                ("elaboration", "it's quiet, which I love"),
                ("update", "my partner just moved in with me last week")]
    else:
        premise = rng.choice(["I have no debt at all, no loans", "I'm completely debt-free",
                              "I don't owe anyone a penny"])
        contra = rng.choice(["should I pay off my student loans faster?", "my car loan payments are killing me",
                             "I still owe about 20k on my credit card"])
        negs = [("past", "I paid off my student loans last year"),
                ("other_person", "my brother has a lot of credit card debt"),
                ("question", "is it smart to take a loan for a car?"),
                ("future", "we might take a mortgage next year")]
    if rng.random() < 0.5:
        return premise, contra, "profile"
    kind, hyp = rng.choice(negs)
    return premise, hyp, kind


def _only_one(rng: random.Random):
    role = rng.choice(["manager", "partner", "brother", "sister", "best friend", "doctor", "dog", "car"])
    n1, n2 = rng.sample(NAMES if role not in ("dog", "car") else PET_NAMES, 2)
    premise = rng.choice([f"my {role} {n1} is the only one I have", f"{n1}, my one and only {role}, is great",
                          f"I have just one {role}: {n1}", f"my only {role} is {n1}"])
    if rng.random() < 0.5:
        return premise, rng.choice([f"my {role} {n2} says hi", f"{n2}, my only {role}, is coming too",
                                    f"I'll ask my {role} {n2} about it"]), "swap"
    kind, hyp = rng.choice([("restatement", f"{n1} says hi"), ("other_person", f"my friend's {role} is called {n2}"),
                            ("elaboration", f"{n1} has been around for years"),
                            ("question", f"what should I get {n1} for their birthday?"),
                            ("past", f"before {n1}, my {role} was someone called {n2}")])
    return premise, hyp, kind


def _compatible(rng: random.Random):
    """Restrictions with a compatible item (hard negatives) or an incompatible one."""
    cases = [("I'm lactose intolerant", "lactose-free yogurt with my granola", "a big glass of regular milk every morning"),
             ("I'm coeliac, no gluten", "gluten-free pasta for dinner", "a huge plate of regular wheat pasta"),
             ("I'm vegan", "an oat milk latte", "a cheese and ham toastie"),
             ("I don't drink alcohol", "an alcohol-free beer at the bar", "three pints of lager at the bar"),
             ("I'm allergic to peanuts", "sunflower seed butter on toast", "peanut butter on toast"),
             ("I don't eat pork", "chicken sausages at the barbecue", "pork ribs at the barbecue"),
             ("I work from home full time", "my office is the spare bedroom, so no commute", "my commute is an hour each way to the office"),
             ("I have two sisters", "growing up as one of three girls was loud", "my only sister is visiting"),
             ("I have two brothers", "both my brothers are coming", "my three brothers are coming"),
             ("I drive an electric car", "I charge my car overnight in the garage", "I fill my car up with petrol every week")]
    premise, ok, bad = rng.choice(cases)
    lead = rng.choice(["I had ", "I'm having ", "I usually have ", ""]) if not ok.startswith(("my", "I ", "being", "both")) else ""
    if rng.random() < 0.5:
        lead_bad = lead if not bad.startswith(("my", "I ", "being", "both")) else ""
        return premise, lead_bad + bad, "profile"
    return premise, lead + ok, "different_item"


FAMILIES: dict[str, tuple[Gen, float]] = {
    "age": (_age, 1.0), "kids": (_kids, 1.0), "siblings": (_siblings, 0.6), "pets": (_pets, 1.2),
    "residence": (_residence, 1.2), "travel": (_travel, 0.7), "job": (_job, 1.0), "diet": (_diet, 1.0),
    "allergy": (_allergy, 0.8), "abstain": (_abstain, 1.0), "likes": (_likes, 1.4),
    "antonym": (_antonym, 1.0), "money": (_money_family, 0.7), "numbers": (_numbers, 0.8),
    "dates": (_dates, 1.0), "routine": (_routine, 0.6), "language": (_language, 0.7),
    "name": (_name, 0.6), "marital": (_marital, 0.6), "instructions": (_instructions, 0.5),
    "citizenship": (_citizenship, 0.5), "education": (_education, 0.7), "housing": (_housing, 0.8),
    "only_one": (_only_one, 0.6), "compatible": (_compatible, 0.7),
}


# ------------------------------------------------------------------------- chat style

_CONTRACTIONS = [("I'm ", "I am "), ("I've ", "I have "), ("don't ", "do not "), ("can't ", "cannot "),
                 ("I'd ", "I would "), ("it's ", "it is "), ("doesn't ", "does not ")]


_LOWER_AFTER_COMMA = set("""my the as since like nothing no honestly being so just if is things update:
remember, still and ideally both all when someone mornings heights breakfast money big good can do
what how would could here it's there they we he she a an this that not on at in with our your his
her their some every one two three four five for nothing imagine""".split())


def _style(rng: random.Random, text: str) -> str:
    """One chat turn: a fact sentence with optional greeting, filler, request and casual casing."""
    if rng.random() < 0.15:
        old, new = rng.choice(_CONTRACTIONS)
        text = text.replace(old, new)
    question = text.endswith("?") or text.endswith("!")
    suffix = rng.choice(SUFFIXES) if rng.random() < 0.4 else ""
    ends = [".", ".", ".", "!"] if suffix else [".", ".", ".", "!", ""]
    sentence = _cap(text) + ("" if question else rng.choice(ends))
    parts = []
    r = rng.random()
    if r < 0.35:
        prefix = rng.choice(PREFIXES)
        first = sentence.split(" ", 1)[0].lower()
        if (prefix.endswith(",") or prefix.endswith(":")) and first in _LOWER_AFTER_COMMA:
            sentence = sentence[:1].lower() + sentence[1:]
        parts.append(prefix)
    elif r < 0.45:
        parts.append(rng.choice(FILLERS))
    parts.append(sentence)
    if rng.random() < 0.2:  # a longer turn: the fact sits between other sentences
        parts[:0] = rng.sample(FILLERS, rng.randint(1, 2))
        parts.append(rng.choice(FILLERS))
    if suffix:
        parts.append(suffix)
    out = " ".join(parts)
    if rng.random() < 0.08:
        out = out.lower()
    return out


# ------------------------------------------------------------ perturbed shippable data

_AUX_NEGATE = [(r"\bis not\b", "is"), (r"\bisn't\b", "is"), (r"\bare not\b", "are"), (r"\baren't\b", "are"),
               (r"\bwas not\b", "was"), (r"\bwasn't\b", "was"), (r"\bwere not\b", "were"),
               (r"\bweren't\b", "were"), (r"\bcannot\b", "can"), (r"\bcan't\b", "can"),
               (r"\bwon't\b", "will"), (r"\bwill not\b", "will"), (r"\bdoesn't\b", "does"),
               (r"\bdoes not\b", "does"), (r"\bdon't\b", "do"), (r"\bdo not\b", "do"),
               (r"\bdidn't\b", "did"), (r"\bdid not\b", "did"), (r"\bhasn't\b", "has"),
               (r"\bhaven't\b", "have"), (r"\bam not\b", "am"), (r"\bnever\b", "always")]
_AUX_AFFIRM = [(r"\bis\b", "is not"), (r"\bare\b", "are not"), (r"\bwas\b", "was not"),
               (r"\bwere\b", "were not"), (r"\bcan\b", "cannot"), (r"\bwill\b", "will not"),
               (r"\bam\b", "am not"), (r"\bshould\b", "should not"), (r"\bwould\b", "would not"),
               (r"\bhas been\b", "has never been"), (r"\bhave been\b", "have never been")]
_SPEAKER = re.compile(r"^(?:the\s+)?(?:speaker|person)\s*[a-e]\b\s*", re.I)
_FIRST_PERSON = {"is": "I am", "was": "I was", "has": "I have", "does": "I do", "doesn't": "I don't",
                 "isn't": "I'm not", "wasn't": "I wasn't", "can": "I can", "can't": "I can't",
                 "will": "I will", "won't": "I won't", "would": "I would", "likes": "I like",
                 "loves": "I love", "wants": "I want", "thinks": "I think", "knows": "I know",
                 "needs": "I need", "hates": "I hate", "lives": "I live", "works": "I work",
                 "had": "I had", "did": "I did", "didn't": "I didn't", "went": "I went",
                 "think": "I think", "like": "I like", "want": "I want", "know": "I know",
                 "feels": "I feel", "feel": "I feel", "says": "I say", "said": "I said",
                 "believes": "I believe", "are": "I am", "have": "I have", "doesnt": "I don't"}


def negate(sentence: str) -> str | None:
    """Flip the first auxiliary's polarity ("is" <-> "is not", "doesn't" -> "does"); None if none."""
    for pattern, repl in _AUX_NEGATE:
        if re.search(pattern, sentence, flags=re.I):
            return re.sub(pattern, repl, sentence, count=1, flags=re.I)
    for pattern, repl in _AUX_AFFIRM:
        if re.search(pattern, sentence):
            return re.sub(pattern, repl, sentence, count=1)
    return None


def first_person(sentence: str) -> str:
    """"Speaker A is tired" -> "I am tired" (only a leading speaker/person reference)."""
    match = _SPEAKER.match(sentence)
    if not match:
        return sentence
    rest = sentence[match.end():]
    verb, _, tail = rest.partition(" ")
    subject = _FIRST_PERSON.get(verb.lower())
    return f"{subject} {tail}".strip() if subject else sentence


def _clean(sentence: str) -> str:
    return re.sub(r"\s+", " ", sentence).strip().rstrip(".")


def shippable_sentences(data_dir: Path, rng: random.Random, limit: int = 6000) -> list[tuple[str, str]]:
    """(family, sentence) from DNLI hypotheses (MIT) and SNLI dev sentences (CC BY-SA 4.0)."""
    nli = data_dir / "nli"
    out: list[tuple[str, str]] = []
    dnli = nli / "dnli" / "data.csv"
    if dnli.exists():
        seen = set()
        for line in dnli.read_text(encoding="utf-8").splitlines():
            parts = line.split("\t")
            if len(parts) == 3:
                s = _clean(first_person(parts[1].strip()))
                if 3 <= len(s.split()) <= 16 and s.lower() not in seen:
                    seen.add(s.lower())
                    out.append(("dnli", s))
    snli = nli / "snli" / "snli_1.0_dev.jsonl"
    if snli.exists():
        seen = set()
        for line in snli.read_text(encoding="utf-8").splitlines():
            s = _clean(json.loads(line)["sentence2"])
            if 3 <= len(s.split()) <= 14 and s.lower() not in seen:
                seen.add(s.lower())
                out.append(("snli", s))
    out = [(f, s) for f, s in out if negate(s) is not None]
    rng.shuffle(out)
    return out[:limit]


def _perturbed(rng: random.Random, family: str, sentence: str, others: list[tuple[str, str]]):
    flipped = negate(sentence)
    if flipped is None:
        return None
    a, b = (sentence, flipped) if rng.random() < 0.5 else (flipped, sentence)
    if rng.random() < 0.5:
        return a, b, "negation"
    low = b[:1].lower() + b[1:] if not b.startswith("I ") else b
    kind, hyp = rng.choice([("other_person", f"{_cap(rng.choice(RELATIVES))} thinks {low}"),
                            ("other_person", f"someone told me {low}, but I'm not sure"),
                            ("past", f"I used to think {low}"),
                            ("question", f"is it true that {low}?"),
                            ("hypothetical", f"if {low}, what then?"),
                            ("restatement", a),
                            ("unrelated", rng.choice(others)[1])])
    return a, hyp, kind


# --------------------------------------------------------------------------- builder

# Topics whose statements can clash with each other ("I live alone" / "I live in Leeds with my
# partner", "I'm vegan" / "I had crab cakes"): never paired as "unrelated".
_RELATED = [{"antonym"}, {"marital", "residence"}, {"diet", "allergy"}, {"diet", "abstain"},
            {"marital", "antonym"}, {"siblings", "antonym"}, {"housing", "antonym"},
            {"housing", "residence"}, {"housing", "marital"}, {"compatible", "diet"},
            {"compatible", "allergy"}, {"compatible", "abstain"}, {"compatible", "siblings"},
            {"compatible", "antonym"}, {"only_one", "siblings"}, {"only_one", "marital"},
            {"only_one", "pets"}, {"education", "job"}, {"citizenship", "language"}]


def _unrelated(rng: random.Random, draws: Callable[[], tuple[str, str, str, str]]):
    """Two statements of one speaker on different topics (the second may be a hard negative)."""
    fam1, p1, _, _ = draws()
    fam2, p2, h2, kind2 = draws()
    if fam1 == fam2 or any({fam1, fam2} <= group or {fam1, fam2} == group | group for group in _RELATED):
        return None
    if "antonym" in (fam1, fam2) or "compatible" in (fam1, fam2):
        return None
    return p1, (h2 if kind2 in NEG_KINDS and rng.random() < 0.5 else p2), "unrelated"


def generate(n: int, *, seed: int = 13, data_dir: Path | None = None,
             perturbed_fraction: float = 0.15) -> list[SynthPair]:
    """``n`` distinct pairs, half contradictions; ``perturbed_fraction`` of them from shippable data."""
    rng = random.Random(seed)
    names = list(FAMILIES)
    weights = [FAMILIES[f][1] for f in names]
    sentences = shippable_sentences(data_dir, rng) if data_dir is not None and perturbed_fraction > 0 else []
    n_perturbed = int(n * perturbed_fraction) if sentences else 0
    n_template = n - n_perturbed

    def draw_any() -> tuple[str, str, str, str]:
        while True:
            family = rng.choices(names, weights)[0]
            got = FAMILIES[family][0](rng)
            if got is not None:
                return (family, *got)

    def fill(target: int, want_contra: bool, make) -> list[SynthPair]:
        made: list[SynthPair] = []
        tries = 0
        while len(made) < target and tries < target * 60:
            tries += 1
            got = make()
            if got is None:
                continue
            family, premise, hypothesis, kind = got
            if (kind in CONTRA_KINDS) != want_contra:
                continue
            pair = SynthPair(_style(rng, premise), _style(rng, hypothesis), want_contra, kind, family)
            key = (pair.premise.lower(), pair.hypothesis.lower())
            if key in seen or pair.premise.lower() == pair.hypothesis.lower() and want_contra:
                continue
            seen.add(key)
            made.append(pair)
        return made

    seen: set[tuple[str, str]] = set()

    def template_negative():
        if rng.random() < 0.12:
            got = _unrelated(rng, draw_any)
            return None if got is None else ("unrelated", *got)
        return draw_any()

    def perturbed_draw():
        family, sentence = rng.choice(sentences)
        got = _perturbed(rng, family, sentence, sentences)
        return None if got is None else (family, *got)

    half_t = n_template // 2
    half_p = n_perturbed // 2
    pairs = (fill(half_t, True, draw_any) + fill(n_template - half_t, False, template_negative)
             + fill(half_p, True, perturbed_draw) + fill(n_perturbed - half_p, False, perturbed_draw))
    rng.shuffle(pairs)
    return pairs


def synthetic_examples(n: int, *, seed: int = 13, data_dir: Path | None = None) -> list[Example]:
    return [p.example() for p in generate(n, seed=seed, data_dir=data_dir)]


def summary(pairs: Iterable[SynthPair]) -> dict[str, dict[str, int]]:
    """Counts by label and by kind (for the card and the tests)."""
    pairs = list(pairs)
    return {"label": dict(Counter("contradiction" if p.contradiction else "not_contradiction" for p in pairs)),
            "kind": dict(sorted(Counter(p.kind for p in pairs).items())),
            "family": dict(sorted(Counter(p.family for p in pairs).items()))}


if __name__ == "__main__":  # a quick look: python -m agentmem.train.nli_synth [N] [DATA_DIR]
    import sys

    count = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    folder = Path(sys.argv[2]) if len(sys.argv) > 2 else None
    for p in generate(count, seed=7, data_dir=folder):
        print(f"[{'C' if p.contradiction else '-'} {p.family}/{p.kind}] {p.premise}  ||  {p.hypothesis}")
