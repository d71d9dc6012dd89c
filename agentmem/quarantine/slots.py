"""Typed facts and the conflicts between them: the precise half of clash detection.

An NLI model reads "I'm 34 ..." / "as a 52-year-old ..." as two loosely related sentences;
a person reads them as two values of one slot (age) of one subject (the speaker). This
module does what the person does, for the slots chat users actually state about themselves
(age, home, diet, allergies, family, pets, job, languages, standing instructions, dates and
amounts), with small curated lexicons instead of a model:

* :func:`extract_facts` turns a text into :class:`Fact` records: slot, normalised value,
  polarity, subject (the speaker, another person, generic) and qualifiers that change what
  the fact commits to (hypothetical, past / "used to", time-bounded, habitual, one-off
  occasion, future, announced update, newly acquired).
* :func:`conflict` compares the facts of an older and a newer text and returns the most
  confident :class:`Conflict`, after the guards: another subject, a hypothetical, a
  past or time-bounded state, a habit versus an exception, an announced update.
* :func:`relations` exposes every comparable pair with its status (conflict, consistent,
  guarded), which the cascade uses to skip the NLI backstop when a guard has already
  explained the pair.

Precision is the design goal: every pattern asks for the speaker as subject and a concrete
value, and anything unusual falls through to the NLI layer rather than firing.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from functools import lru_cache

from agentmem.quarantine import places
from agentmem.quarantine.claims import split_sentences, text_clauses


@dataclass(frozen=True)
class Fact:
    """One typed statement. ``value`` is normalised so equal facts compare equal."""

    slot: str
    value: str
    polarity: bool = True
    subject: str = "self"  # "self", "other:<relation>", "generic"
    qualifiers: frozenset[str] = field(default_factory=frozenset)
    evidence: str = ""
    strength: float = 1.0  # 1.0 stated outright; lower when inferred ("stay-at-home mom" -> kids)


@dataclass(frozen=True)
class Conflict:
    kind: str
    slot: str
    older: Fact
    newer: Fact
    score: float
    reason: str


# --------------------------------------------------------------------------- numbers

_NUMBER_WORDS = {
    "no": 0, "zero": 0, "none": 0, "a": 1, "an": 1, "one": 1, "single": 1, "two": 2, "three": 3, "four": 4,
    "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12,
    "thirteen": 13, "fourteen": 14, "fifteen": 15, "sixteen": 16, "seventeen": 17, "eighteen": 18,
    "nineteen": 19, "twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70,
    "eighty": 80, "ninety": 90, "a couple of": 2, "a dozen": 12, "both": 2, "twin": 2,
}
_TENS = r"(?:twenty|thirty|forty|fifty|sixty|seventy|eighty|ninety)"
_UNITS = r"(?:one|two|three|four|five|six|seven|eight|nine)"
NUM = (r"(?:\d{1,3}|" + _TENS + r"(?:[- ]" + _UNITS + r")?|ten|eleven|twelve|thirteen|fourteen|fifteen|"
       r"sixteen|seventeen|eighteen|nineteen|" + _UNITS + r")")
COUNT = r"(?:" + NUM + r"|a couple of|a dozen|a|an|no)"


def parse_number(text: str) -> int | None:
    """'34' / 'thirty-four' / 'two' / 'a' -> int; None when not a number."""
    text = text.strip().lower()
    if text.isdigit():
        return int(text)
    if text in _NUMBER_WORDS:
        return _NUMBER_WORDS[text]
    parts = re.split(r"[- ]", text)
    if len(parts) == 2 and parts[0] in _NUMBER_WORDS and parts[1] in _NUMBER_WORDS:
        return _NUMBER_WORDS[parts[0]] + _NUMBER_WORDS[parts[1]]
    return None


# --------------------------------------------------------------------------- qualifiers

_Q_HYPOTHETICAL = re.compile(r"\b(?:if|unless|wish|dream of|dreaming of|imagine|suppose|hypothetically|"
                             r"in theory|pretend|fantasi[sz]e|what if)\b")
# Weaker modal markers: they cancel a stated state ("I might be vegan") but not what a possessive
# presupposes ("maybe I'll leave my car at the airport" still says there is a car).
_Q_MODAL = re.compile(r"\b(?:would|could|might|hope to|hoping to|want to|wanna|would like|someday|one day|"
                      r"ideally|maybe|perhaps|probably|should)\b")
_Q_FUTURE = re.compile(r"\b(?:(?<!a )(?<!my )(?<!the )(?<!your )(?<!our )(?<!his )(?<!her )(?<!their )will|"
                       r"going to|gonna|plan(?:ning)? (?:to|on|my)|about to|next (?:week|month|year|fall|"
                       r"spring|summer|winter|season|semester)|tomorrow|soon|thinking (?:of|about)|"
                       r"considering|intend|intending|hope|aiming|moving to|move to|relocating|"
                       r"by the end of|eventually|in the future|later this)\b")
_Q_PAST = re.compile(r"\b(?:used to|use to|when i was|back when|back then|back in (?:the )?(?:\d|day|"
                     r"high school|"
                     r"college|school|uni)|growing up|as a (?:kid|"
                     r"child|teen|teenager)|years ago|in the past|previously|formerly|once upon|my old|"
                     r"my late|my ex|my former|before i|when we were|in my (?:twenties|teens|youth|"
                     r"younger days|student days)|in my 20s|at the time|those days|quit|gave up|stopped|"
                     r"got rid of|passed away|died|lost (?:him|her|my))\b")
_Q_BOUNDED = re.compile(r"\b(?:until|till|til|up until|through (?:january|february|march|april|may|june|"
                        r"july|august|september|october|november|december)|for now|temporarily|"
                        r"for the (?:time being|summer|winter|week|month|semester))\b")
_Q_HABITUAL = re.compile(r"\b(?:usually|normally|typically|generally|mostly|most (?:days|weeks|weekends|"
                         r"mornings|evenings|nights|of the time)|often|tend to|as a rule|on weekdays|"
                         r"most saturdays|most sundays)\b")
_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_Q_OCCASION = re.compile(r"\b(?:this (?:week|weekend|time|morning|afternoon|evening|year|month|once|"
                         + "|".join(_WEEKDAYS) + r")|today|tonight|tomorrow|for once|just this once|except|"
                         r"this coming|on this occasion|right now|at the moment|for this one)\b")
_Q_NEW = re.compile(r"\b(?:new|newly|just (?:got (?!home|back|off|in\b|up\b)|bought|adopted|started|moved|"
                    r"married|had|welcomed|became|"
                    r"turned|found)|recently|finally got|since (?:last|yesterday)|got (?:married|engaged|"
                    r"divorced)|adopted|bought|started)\b")
_Q_LIFETIME = re.compile(r"\b(?:never|not ever|my whole (?:life|career)|all my life|entire life|ever since|"
                         r"since birth|since i was born|a day in my life)\b")

# Announced changes: the speaker tells us the old value no longer holds.
_UPDATE = re.compile(
    r"(?:^|\b)(?:update:|^\W*update\b|just (?:confirmed|found out|learned|got diagnosed)|diagnosed|(?:i|"
    r"we) went (?:vegetarian|vegan|pescatarian|plant-based|keto|gluten-free|dairy-free|sober|teetotal)|"
    r"quick update|small update|an update|(?:i|we) (?:have |just )?(?:moved|relocated)|"
    r"(?<!you )(?<!you have )(?:have|has) changed|(?:i|we) changed|changed my mind|change of plans?|"
    r"plans? (?:have |has )?changed|slight change|scratch that|forget (?:what i said|that|i said)|"
    r"correction:|i mean,|i misspoke|(?:got|been) (?:rescheduled|moved|postponed|pushed|cancell?ed|delayed|"
    r"bumped)|rescheduled|postponed|pushed (?:back|to)|moved (?:it |the \w+ )?(?:to|up|back)|no longer|"
    r"not anymore|anymore|turns out|it turns out|these days|nowadays|since then|switched|upgraded|(?:i|"
    r"we) (?:just|recently) (?:got|bought|adopted|had) (?:a|an|another|my|our|married|engaged|divorced)|"
    r"(?:i|we) (?:got|bought|adopted) (?:a|an|another) new|(?:i|we) got married|(?:i|we) separated|(?:i|"
    r"we) broke up|(?:i|we) divorced|became|(?:i|we) (?:have|am|are) now|(?:i|we) now|recently|new job|"
    r"started (?:a|my|working)|quit my|retired (?:last|this|in)|since (?:last|yesterday|january|february|"
    r"march|april|may|june|july|august|september|october|november|december))")
_NOW = re.compile(r"\bnow\b")
_NOW_IDIOMS = re.compile(r"\b(?:(?:book|do|go|start|buy|order|leave|call|stop|decide|apply|sign up|act|pay|"
                         r"answer|reply|help|come|eat) now|now\?|right now|from now on|for now|just now|"
                         r"by now|"
                         r"until now|now that|"
                         r"now and then|now or never|as of now|up to now|now,? (?:what|how|which|where|can|"
                         r"could|should|do|does|is|are))\b")
_ACTUALLY_START = re.compile(r"^\W*(?:oh,? )?actually\b")


def announces_update(text: str) -> bool:
    """True when the text announces that something changed ("moved to", "update:", "now")."""
    norm = _norm(text)
    if _UPDATE.search(norm) or _ACTUALLY_START.search(norm):
        return True
    stripped = _NOW_IDIOMS.sub(" ", norm)
    actually = re.search(r"\bactually,? (?:i|we|it|the|my|our) (?:got|have|am|are|moved|changed|decided|"
                         r"now)\b",
                         norm)
    return bool(_NOW.search(stripped)) or bool(actually)


def _norm(text: str) -> str:
    from agentmem.quarantine.claims import normalise
    return normalise(text)


# --------------------------------------------------------------------------- lexicons

# Food and drink items -> categories they belong to. Longest names match first.
_ITEMS: dict[str, frozenset[str]] = {}


def _add_items(categories: str, names: str) -> None:
    cats = frozenset(categories.split())
    for name in names.split(","):
        name = name.strip()
        if name:
            _ITEMS[name] = _ITEMS.get(name, frozenset()) | cats


_add_items("meat red_meat beef", "steak, steaks, beef, brisket, ribeye, sirloin, hamburger, hamburgers, "
           "cheeseburger, cheeseburgers, burger, burgers, roast beef, bolognese, meatball, meatballs, "
           "meatloaf, veal, filet mignon, t-bone, beef stew, corned beef, pastrami, chili con carne")
_add_items("meat red_meat pork", "bacon, ham, pork, pork chops, pulled pork, sausage, sausages, pepperoni, "
           "salami, chorizo, prosciutto, ribs, spare ribs, hot dog, hot dogs, bratwurst, carnitas, lard, "
           "pork belly")
_add_items("meat red_meat", "lamb, mutton, venison, goat, lamb chops, kebab, kebabs, gyro, gyros, jerky, "
           "meat, red meat, veal")
_add_items("meat poultry", "chicken, chicken wings, wings, turkey sandwich, roast chicken, fried chicken, "
           "duck, chicken stock, chicken broth, chicken nuggets, nuggets, chicken breast, chicken curry, "
           "chicken tikka, rotisserie chicken, roast turkey, turkey dinner, goose, bone broth")
_add_items("fish", "salmon, tuna, cod, fish, sardines, anchovies, anchovy, trout, halibut, mackerel, "
           "tilapia, fish and chips, fish tacos, haddock, sea bass, swordfish, sashimi, smoked salmon, lox, "
           "caviar")
_add_items("shellfish", "shrimp, prawn, prawns, lobster, lobsters, crab, crabs, crab cakes, scallops, "
           "scallop, mussels, clams, clam chowder, oysters, oyster, crayfish, scampi, shrimp scampi, "
           "langoustines, calamari, squid, octopus, shellfish, seafood paella, paella")
_add_items("dairy", "milk, cheese, butter, cream, yogurt, yoghurt, ice cream, cheesecake, milkshake, "
           "mozzarella, cheddar, parmesan, brie, feta, custard, whipped cream, mac and cheese, cheese "
           "pizza, gelato, buttermilk, sour cream, cream cheese, camembert, goat cheese, ricotta, burrata")
_add_items("eggs", "egg, eggs, omelette, omelet, quiche, scrambled eggs, frittata, meringue, fried eggs, "
           "eggs benedict, boiled eggs")
_add_items("nuts", "nuts, almonds, almond, walnuts, walnut, cashews, cashew, pecans, pecan pie, pistachios, "
           "hazelnuts, macadamia, nutella, marzipan, praline, pesto, almond croissant, pine nuts, trail mix")
_add_items("peanuts nuts", "peanut, peanuts, peanut butter, satay, pad thai, peanut butter cookies, reese's")
_add_items("gluten", "bread, pasta, spaghetti, pizza, bagel, bagels, croissant, croissants, sourdough, "
           "wheat, barley, rye, couscous, baguette, noodles, ramen, lasagna, lasagne, pancakes, waffles, "
           "donuts, doughnuts, cake, muffins, cookies, crackers, toast, sandwich, sandwiches, burrito, "
           "dumplings")
_add_items("alcohol gluten", "beer, beers, pint, pints, lager, ale, ipa, stout, pint of beer")
_add_items("alcohol", "rioja, merlot, cabernet, pinot noir, pinot grigio, chardonnay, sauvignon blanc, "
           "malbec, shiraz, cava, chianti, riesling, bordeaux, port wine, sherry, glass or two of wine")
_add_items("alcohol", "wine, red wine, white wine, rose wine, champagne, prosecco, cocktail, cocktails, "
           "margarita, margaritas, mojito, mojitos, martini, martinis, vodka, whisky, whiskey, bourbon, "
           "scotch, rum, gin, tequila, sake, sangria, mimosa, mimosas, spritz, aperol spritz, booze, "
           "alcohol, glass of wine, bottle of wine, hard cider, negroni, old fashioned, gin and tonic, "
           "cosmopolitan, mead, brandy, cognac, liquor, shots of tequila, jagerbomb, rose")
_add_items("tobacco", "cigarette, cigarettes, cigar, cigars, a smoke, vape, vaping, pack of cigarettes, "
           "tobacco, joint, hookah, shisha")
_add_items("coffee caffeine", "coffee, coffees, espresso, espressos, latte, lattes, cappuccino, "
           "cappuccinos, americano, flat white, cold brew, macchiato, mocha")
_add_items("dairy", "latte, lattes, cappuccino, cappuccinos, flat white, macchiato, mocha")

_ITEM_RE = re.compile(r"\b(" + "|".join(sorted((re.escape(k) for k in _ITEMS), key=len,
                                               reverse=True)) + r")\b")
# Words that turn an item into its substitute ("veggie burger", "oat milk", "non-alcoholic beer").
_SUBSTITUTE_BEFORE = re.compile(
    r"(?:veggie|vegan|vegetarian|plant[- ]based|meatless|meat[- ]free|fake|faux|mock|impossible|beyond|tofu|"
    r"seitan|soy|oat|almond|coconut|rice|cashew|dairy[- ]free|lactose[- ]free|gluten[- ]free|"
    r"non[- ]alcoholic|alcohol[- ]free|virgin|zero[- ]proof|decaf|nut[- ]free|egg[- ]free|bean|black bean|"
    r"lentil|mushroom|jackfruit|quorn|no|without|not|zero|free|skip(?:ping)? the|hold the|instead of|"
    r"not even|avoid(?:ing)?|except|minus|ginger|root|apple|grape|chocolate|peppermint|candy|gummy|"
    r"electronic|e-|nicotine[- ]free|cauliflower|halloumi|paneer|veg|lab-grown|cultured)(?:\s+\w+)?\s*$")
_SUBSTITUTE_AFTER = re.compile(r"^(?:-free|[- ]free|\s+(?:substitute|alternative|replacement|"
                               r"flavou?r(?:ed)?|-?style|scented|sauce|smell|candle|costume|knife|knives|"
                               r"pan|grill|place|shop|restaurant|bar|house|joint|place|festival|tasting|"
                               r"for (?:my|the|our|him|her|them|guests|everyone)\b))")
_EAT_VERBS = (r"(?:ate|eat|eating|eats|had|having|have had|devoured|tried|tasted|grabbed|ordered|order|love|"
              r"loved|loves|like|likes|enjoy|enjoyed|enjoying|adore|crave|craving|munching|snacking on|"
              r"drink|drank|drinking|drinks|sipping|sipped|smoke|smoked|smoking|smokes|chugged|downed|"
              r"polished off|live on|lived on|finished|was eating|was drinking|got|get|binged on|open|"
              r"opened|pour|poured|crack open|cracked open|split|share|shared)")
_PREP_VERBS = (r"(?:cook|cooked|cooking|make|made|making|bake|baked|baking|grill|grilled|grilling|roast|"
               r"roasted|fry|fried|frying|barbecue|barbecued|bbq|do|doing|serve|serving|prepare|preparing|"
               r"whip up)")
_CONSUME = re.compile(r"\b(?:i|we)\b(?: (?:\w+)){0,3}? (" + _EAT_VERBS + "|" + _PREP_VERBS + r")\b((?: "
                      r"[\w'-]+){0,6}?) ?" + _ITEM_RE.pattern)
_MY_USUAL = re.compile(r"\bmy (?:usual|favou?rite|go-to|signature|famous|daily|nightly|morning|evening|"
                       r"weekly|regular|beloved)((?: [\w'-]+){0,3}?) " + _ITEM_RE.pattern)
_FOR_OTHERS = re.compile(r"\bfor (?:my|the|our|his|her) (?:kids|children|son|daughter|husband|wife|partner|"
                         r"family|guests|friends|boyfriend|girlfriend|parents|mom|dad|mother|father|dog|cat|"
                         r"team|staff|customers|clients|party)\b|\bfor (?:him|her|them|everyone|others)\b")

_DIETS = {
    "vegetarian": "meat fish shellfish", "veggie": "meat fish shellfish", "vegan": "meat fish shellfish "
    "dairy eggs",
    "plant-based": "meat fish shellfish dairy eggs", "plant based": "meat fish shellfish dairy eggs",
    "pescatarian": "meat", "pescetarian": "meat", "halal": "pork", "kosher": "pork shellfish",
}
_FOOD_GROUPS = {
    "meat": "meat", "red meat": "red_meat", "pork": "pork", "beef": "beef", "fish": "fish",
    "seafood": "fish shellfish",
    "shellfish": "shellfish", "dairy": "dairy", "eggs": "eggs", "chicken": "poultry", "poultry": "poultry",
    "animal products": "meat fish shellfish dairy eggs", "gluten": "gluten", "wheat": "gluten",
    "nuts": "nuts",
    "peanuts": "peanuts", "alcohol": "alcohol", "booze": "alcohol", "coffee": "coffee",
    "caffeine": "caffeine",
    "milk": "dairy", "cheese": "dairy", "sugar": "sugar", "lamb": "red_meat",
}
_ALLERGENS = {
    "nuts": "nuts peanuts", "nut": "nuts peanuts", "tree nuts": "nuts", "tree nut": "nuts",
    "peanuts": "peanuts",
    "peanut": "peanuts", "shellfish": "shellfish", "seafood": "shellfish fish", "fish": "fish",
    "gluten": "gluten", "wheat": "gluten", "dairy": "dairy", "milk": "dairy", "lactose": "dairy",
    "eggs": "eggs", "egg": "eggs", "soy": "soy", "sesame": "sesame", "shrimp": "shellfish",
    "crustaceans": "shellfish", "almonds": "nuts", "cats": "pet_cat", "cat": "pet_cat", "dogs": "pet_dog",
    "dog": "pet_dog", "cat dander": "pet_cat", "pet dander": "pet_cat pet_dog", "animals": "pet_cat pet_dog",
}

_PETS = {
    "dog": "dog", "dogs": "dog", "puppy": "dog", "puppies": "dog", "pup": "dog", "cat": "cat", "cats": "cat",
    "kitten": "cat", "kittens": "cat", "kitty": "cat", "horse": "horse", "horses": "horse", "pony": "horse",
    "rabbit": "rabbit", "rabbits": "rabbit", "bunny": "rabbit", "hamster": "hamster", "hamsters": "hamster",
    "parrot": "bird", "bird": "bird", "birds": "bird", "fish": "fish_pet", "goldfish": "fish_pet",
    "snake": "snake", "lizard": "lizard", "turtle": "turtle", "guinea pig": "guinea_pig", "ferret": "ferret",
    "pets": "pet", "pet": "pet", "animals": "pet",
    "labrador": "dog", "lab": "dog", "chihuahua": "dog", "pomeranian": "dog", "poodle": "dog",
    "pitbull": "dog", "pit bull": "dog", "beagle": "dog", "golden retriever": "dog", "retriever": "dog",
    "husky": "dog", "german shepherd": "dog", "german shepard": "dog", "terrier": "dog", "dachshund": "dog",
    "bulldog": "dog", "corgi": "dog", "labradoodle": "dog", "shih tzu": "dog", "rottweiler": "dog",
    "doberman": "dog", "collie": "dog", "border collie": "dog", "great dane": "dog", "pug": "dog",
    "yorkie": "dog", "mutt": "dog", "greyhound": "dog", "boxer": "dog", "siamese": "cat",
    "persian cat": "cat",
    "maine coon": "cat", "tabby": "cat",
}
_PET_RE = r"(" + "|".join(sorted(map(re.escape, _PETS), key=len, reverse=True)) + r")"

_OCCUPATIONS = {
    "teacher": "education", "professor": "education", "tutor": "education", "lecturer": "education",
    "principal": "education", "teaching assistant": "education", "kindergarten teacher": "education",
    "nurse": "health", "doctor": "health", "physician": "health", "surgeon": "health", "dentist": "health",
    "pharmacist": "health", "paramedic": "health", "emt": "health", "therapist": "health",
    "psychologist": "health", "psychiatrist": "health", "veterinarian": "vet", "vet": "vet",
    "midwife": "health", "physical therapist": "health", "dental hygienist": "health", "caregiver": "health",
    "lawyer": "law", "attorney": "law", "paralegal": "law", "judge": "law",
    "accountant": "finance", "banker": "finance", "bank teller": "finance", "teller": "finance",
    "financial advisor": "finance", "stockbroker": "finance", "trader": "finance", "actuary": "finance",
    "software engineer": "software", "software developer": "software", "developer": "software",
    "programmer": "software", "web developer": "software", "data scientist": "software", "coder": "software",
    "engineer": "engineering", "mechanical engineer": "engineering", "civil engineer": "engineering",
    "architect": "architecture", "chef": "food", "cook": "food", "baker": "food", "waiter": "food",
    "waitress": "food", "server": "food", "bartender": "food", "barista": "food", "line cook": "food",
    "cashier": "retail", "sales associate": "retail", "salesman": "sales", "saleswoman": "sales",
    "sales rep": "sales", "realtor": "sales", "real estate agent": "sales", "police officer": "police",
    "cop": "police", "detective": "police", "firefighter": "fire", "fireman": "fire", "soldier": "military",
    "pilot": "aviation", "flight attendant": "aviation", "farmer": "farming", "rancher": "farming",
    "mechanic": "trades", "electrician": "trades", "plumber": "trades", "carpenter": "trades",
    "construction worker": "trades", "welder": "trades", "truck driver": "transport",
    "bus driver": "transport",
    "uber driver": "transport", "taxi driver": "transport", "delivery driver": "transport",
    "writer": "writing", "author": "writing", "journalist": "writing", "editor": "writing",
    "artist": "art", "painter": "art", "photographer": "art", "graphic designer": "design",
    "designer": "design",
    "musician": "music", "singer": "music", "actor": "acting", "actress": "acting", "dancer": "dance",
    "scientist": "science", "researcher": "science", "chemist": "science", "biologist": "science",
    "librarian": "library", "receptionist": "office", "secretary": "office", "clerk": "office",
    "janitor": "custodial", "custodian": "custodial", "cleaner": "custodial", "housekeeper": "custodial",
    "stay at home mom": "homemaker", "stay-at-home mom": "homemaker", "stay at home dad": "homemaker",
    "stay-at-home dad": "homemaker", "homemaker": "homemaker", "housewife": "homemaker",
    "stay at home mother": "homemaker", "stay at home father": "homemaker",
    "stay at home parent": "homemaker",
    "social worker": "social", "coach": "sports", "personal trainer": "sports", "athlete": "sports",
    "consultant": "business", "manager": "business", "ceo": "business", "entrepreneur": "business",
    "business owner": "business", "marketer": "business", "shipbuilder": "trades", "deckhand": "trades",
    "lifeguard": "sports", "student": "student", "grad student": "student", "college student": "student",
    "retiree": "retired", "nanny": "childcare", "babysitter": "childcare", "daycare worker": "childcare",
}
_OCC_RE = r"(" + "|".join(sorted(map(re.escape, _OCCUPATIONS), key=len, reverse=True)) + r")s?"
_ACTIVITY_FIELD = {"taught": "education", "teach": "education", "teaching": "education",
                   "nursed": "health", "practiced law": "law", "practised law": "law", "coded": "software",
                   "cooked professionally": "food", "worked in health care": "health",
                   "worked in healthcare": "health", "worked in a hospital": "health",
                   "worked in education": "education", "worked in a school": "education",
                   "worked in tech": "software", "worked in finance": "finance", "worked in retail": "retail",
                   "worked in construction": "trades", "worked in a restaurant": "food"}

_LANGUAGES = ("english french spanish german italian portuguese chinese mandarin cantonese japanese korean "
              "russian arabic hindi urdu bengali punjabi dutch swedish norwegian danish finnish polish "
              "czech turkish greek hebrew persian farsi swahili thai vietnamese indonesian tagalog "
              "ukrainian romanian hungarian catalan irish welsh latin sign asl").split()
_LANG_RE = r"(" + "|".join(_LANGUAGES) + r")"

_DEMONYMS = {
    "american": "US", "canadian": "CA", "mexican": "MX", "british": "GB", "english": "GB", "scottish": "GB",
    "welsh": "GB", "irish": "IE", "french": "FR", "german": "DE", "spanish": "ES", "italian": "IT",
    "portuguese": "PT", "dutch": "NL", "belgian": "BE", "swiss": "CH", "austrian": "AT", "swedish": "SE",
    "norwegian": "NO", "danish": "DK", "finnish": "FI", "polish": "PL", "czech": "CZ", "greek": "GR",
    "turkish": "TR", "russian": "RU", "ukrainian": "UA", "chinese": "CN", "japanese": "JP", "korean": "KR",
    "indian": "IN", "pakistani": "PK", "bangladeshi": "BD", "filipino": "PH", "vietnamese": "VN",
    "thai": "TH", "indonesian": "ID", "australian": "AU", "brazilian": "BR", "argentinian": "AR",
    "argentine": "AR", "chilean": "CL", "colombian": "CO", "peruvian": "PE", "nigerian": "NG",
    "kenyan": "KE", "egyptian": "EG", "south african": "ZA", "israeli": "IL", "iranian": "IR",
    "hungarian": "HU", "romanian": "RO", "new zealander": "NZ", "kiwi": "NZ", "cuban": "CU",
    "jamaican": "JM", "venezuelan": "VE", "moroccan": "MA", "lebanese": "LB", "saudi": "SA",
}
_DEMONYM_RE = r"(" + "|".join(sorted(map(re.escape, _DEMONYMS), key=len, reverse=True)) + r")"

_RELATIONS = ("wife husband partner spouse son daughter brother sister mom mum mother dad father boyfriend "
              "girlfriend fiance fiancee grandma grandmother grandpa grandfather aunt uncle cousin friend "
              "boss roommate neighbor neighbour colleague coworker kid child baby niece nephew twin").split()
_RELATION_RE = r"(" + "|".join(_RELATIONS) + r")"
_UNIQUE_RELATIONS = frozenset({"wife", "husband", "spouse", "mom", "mum", "mother", "dad", "father", "fiance",
                               "fiancee", "partner", "manager", "boss"})

_EVENTS = ("wedding birthday flight appointment interview exam surgery operation party anniversary "
           "graduation meeting deadline move trip vacation holiday concert recital game match race marathon "
           "check-in checkout due date dentist appointment doctor's appointment rehearsal dinner "
           "reservation booking shift class lesson").split()
_EVENT_RE = r"(" + "|".join(sorted(map(re.escape, _EVENTS), key=len, reverse=True)) + r")"
_MONTHS = ("january february march april may june july august september october november december").split()
_MONTH_ABBR = {m[:3]: m for m in _MONTHS} | {"sept": "september"}
_MONTH_RE = r"(" + "|".join(_MONTHS + sorted(_MONTH_ABBR)) + r")\.?"
_DATE_RE = (r"(?:" + _MONTH_RE + r" (\d{1,2})(?:st|nd|rd|th)?\b|(?:the )?(\d{1,2})(?:st|nd|rd|th)? (?:of )?"
            + _MONTH_RE + r"\b)")
_TIME_RE = r"(\d{1,2})(?::(\d{2}))? ?(am|pm|a\.m\.|p\.m\.)?"
_WEEKDAY_RE = r"(" + "|".join(_WEEKDAYS) + r")s?\b"


# --------------------------------------------------------------------------- extraction context

@dataclass(frozen=True)
class _Ctx:
    text: str
    original: str
    mood: str
    updated: bool
    lowercase: bool
    before: str = ""  # earlier clauses of the same turn, for "never had one" and "mine is ..."
    sentence: str = ""  # the whole original sentence, for names the clause split cut off ("Alex, my partner")

    def fact(self, slot: str, value: str, end: int, polarity: bool = True, subject: str = "self",
             extra: Iterable[str] = (), strength: float = 1.0) -> Fact:
        """A fact whose qualifiers come from the clause up to ``end`` plus its short tail."""
        quals = _clause_qualifiers(self.text[:end]) | set(extra)
        quals |= _clause_qualifiers(_tail(self.text[end:])) & _TAIL_QUALIFIERS
        if self.updated:
            quals.add("update")
        if self.mood == "hypothetical":
            quals.add("hypothetical")
        if self.mood == "question":
            quals.add("presupposed")
        return Fact(slot, value, polarity, subject, frozenset(quals), self.text, strength)


_TAIL_QUALIFIERS = frozenset({"past", "bounded", "occasion", "habitual", "lifetime"})
_TAIL_STOP = re.compile(r"[,;]|\b(?:and|but|so|because|although|though|while|which|who|whereas)\b")


def _tail(rest: str) -> str:
    """The words right after a fact that still modify it ("... until 2019", "... years ago")."""
    stop = _TAIL_STOP.search(rest)
    rest = rest[: stop.start()] if stop else rest
    return " ".join(rest.split()[:6])


_QUOTED = re.compile(r"\"[^\"]{3,}\"|(?:^|(?<=\s))'[^']*\s[^']*'(?=[\s,.!?;]|$)")


def _clause_qualifiers(text: str) -> set[str]:
    quals: set[str] = set()
    checks = ((_Q_HYPOTHETICAL, "hypothetical"), (_Q_MODAL, "modal"), (_Q_FUTURE, "future"),
              (_Q_PAST, "past"), (_Q_BOUNDED, "bounded"), (_Q_HABITUAL, "habitual"),
              (_Q_OCCASION, "occasion"),
              (_Q_NEW, "new"),
              (_Q_LIFETIME, "lifetime"))
    for pattern, name in checks:
        if pattern.search(text):
            quals.add(name)
    return quals


def _contexts(text: str) -> Iterator[_Ctx]:
    lowercase = text == text.lower()
    sentences = split_sentences(text)
    updated_from = len(sentences)
    for index, sentence in enumerate(sentences):
        if announces_update(sentence):
            updated_from = index
            break
    before: list[str] = []
    for clause in text_clauses(text):
        body = _QUOTED.sub(" ", clause.text).strip()
        sentence = sentences[clause.sentence_index] if clause.sentence_index < len(sentences) else ""
        yield _Ctx(body, clause.original, clause.mood, clause.sentence_index >= updated_from, lowercase,
                   " ".join(before[-4:]), sentence)
        before.append(body)


_OTHER_SUBJECT = re.compile(
    r"^(?:(?:my|our|his|her|their) (?:[\w'-]+ ){0,2}?(?:" + "|".join(_RELATIONS) + r"|guests|friends|"
    r"parents|family|team|client|clients|customers|colleagues|coworkers|neighbors|neighbours|kids|children|"
    r"sons|daughters|brothers|sisters)s?\b(?! and i\b)|(?:he|she|they) (?:is|are|was|were|has|have|had|does|"
    r"do|did|works|lives|makes|needs|wants|loves|says|said|can|will|would|just|also|still|never|always|"
    r"only)\b)")


def clause_guard(clause_text: str) -> str:
    """A clause-level reason its content cannot clash with the speaker's own earlier claims.

    'past' (used to / back in my twenties / until 2021), 'hypothetical' (if / would),
    'other person' (my wife works 9 to 5, he's a Brazilian citizen), or ''.
    """
    text = clause_text.strip()
    other = _OTHER_SUBJECT.search(text)
    if other and not re.search(r"\b(?:i|me|we|us|myself)\b", text[other.end():]):
        return "other person"
    quals = _clause_qualifiers(text)
    if quals & {"past", "bounded"}:
        return "past"
    if "hypothetical" in quals:
        return "hypothetical"
    return ""


def extract_facts(text: str) -> list[Fact]:
    """Typed facts of a turn or sentence (see the module docstring)."""
    return list(_cached_facts(text))


@lru_cache(maxsize=8192)
def _cached_facts(text: str) -> tuple[Fact, ...]:
    """Facts are immutable, and a session compares each turn with many others: extract once."""
    facts: list[Fact] = []
    for ctx in _contexts(text):
        extractors = _PRESUPPOSITION_EXTRACTORS if ctx.mood == "question" else _EXTRACTORS
        for extractor in extractors:
            facts += extractor(ctx)
    return tuple(_dedupe(facts))


def _dedupe(facts: list[Fact]) -> list[Fact]:
    seen: set[tuple[str, str, bool, str]] = set()
    out = []
    for fact in facts:
        key = (fact.slot, fact.value, fact.polarity, fact.subject)
        if key not in seen:
            seen.add(key)
            out.append(fact)
    return out


# --------------------------------------------------------------------------- extractors: people

_AGE_PATTERNS = (
    re.compile(r"\bi am (?:now |almost |nearly |about |only |just |currently |turning )?(" + NUM + r")(?:[- "
               r"]years?[- ]old| yrs? old| y/?o\b)?(?=\s*(?:[,.;!?)]|$|and\b|but\b|so\b|with\b|myself\b|"
               r"too\b|years\b|by the way\b|btw\b|if\b|which\b|who\b|now\b|this year\b|going on\b))"),
    re.compile(r"\bi am an? (" + NUM + r")[- ]?(?:years?|yrs?)[- ]?old\b"),
    re.compile(r"\bi (?:just )?turned (" + NUM + r")\b"),
    re.compile(r"\bmy age is (" + NUM + r")\b"),
)
_AGE_DECADE = re.compile(r"\bi am in my (early |mid |mid-|late )?(twenties|thirties|forties|fifties|sixties|"
                         r"seventies|eighties|20s|30s|40s|50s|60s|70s|80s)\b")
_DECADES = {"twenties": 20, "thirties": 30, "forties": 40, "fifties": 50, "sixties": 60, "seventies": 70,
            "eighties": 80}
_OTHER_AGE = re.compile(r"\bmy (?:(only|oldest|eldest|youngest|older|younger|little|big) )?" + _RELATION_RE
                        + r"(?:,? [a-z]+,?)? (?:is|just turned|turned) (" + NUM + r")(?: years "
                        r"old)?(?=\s*(?:[,.;!?]|$|and\b|but\b|years\b))")


_AGE_AT = re.compile(r"(?:^|,\s|\b(?:honestly|but|and|so|even|me|like)\s)at (\d{2}),? (?=(?:is|am|should|do|"
                     r"does|can|will|would|i|it|that|are|how|what|with|my)\b)|\bat (?:my age|age) (\d{2})\b|"
                     r"^at (\d{2})$")


def _ages(ctx: _Ctx) -> list[Fact]:
    out = []
    for match in _AGE_AT.finditer(ctx.text):
        age = int(match.group(1) or match.group(2) or match.group(3))
        if 14 <= age <= 99:
            out.append(ctx.fact("age", f"{age}-{age}", match.end(), strength=0.9))
    for number, pattern in enumerate(_AGE_PATTERNS):
        for match in pattern.finditer(ctx.text):
            age = parse_number(match.group(1))
            if age is not None and 10 <= age <= 110:
                high = age + 1 if number == 2 else age
                out.append(ctx.fact("age", f"{age}-{high}", match.end()))
    for match in _AGE_DECADE.finditer(ctx.text):
        base = _DECADES.get(match.group(2)) or int(match.group(2)[:2])
        spans = {"early ": (0, 3), "mid ": (3, 7), "mid-": (3, 7), "late ": (6, 9)}
        low, high = spans.get(match.group(1) or "",
                                                                                          (0, 9))
        out.append(ctx.fact("age", f"{base + low}-{base + high}", match.end()))
    for match in _OTHER_AGE.finditer(ctx.text):
        age = parse_number(match.group(3))
        if age is not None:
            extra = ("only",) if match.group(1) == "only" else ()
            out.append(ctx.fact("age", f"{age}-{age}", match.end(), subject="other:" + match.group(2),
                                extra=extra))
    return out


_NAME_STOP = frozenset("""fine good great ok okay well here back done sorry glad happy sure tired
new single married so not the a an in at on just very really still also from into busy ready home sick
excited""".split())
_SELF_NAME = re.compile(r"\b(?:my name is|my name's|call me|i go by|the name is|name is) ([a-z][a-z'-]+)\b")
_GREETING_NAME = re.compile(r"\b(?:I am|I'm|Im) ([A-Z][a-z]+)\s*[.!,]?\s*$")
_REL_NAME = re.compile(r"\bmy (?:(only|older|younger|little|big|twin|eldest|oldest|youngest) )?(wife|"
                       r"husband|partner|brother|sister|son|daughter|boyfriend|girlfriend|fiance|fiancee|"
                       r"dog|cat|puppy|kitten|horse|mom|mum|mother|dad|father|manager|boss)(?:'s name is|"
                       r" is called| is named| called| named|,| is| -)? ([a-z][a-z'-]+)\b")
_EXPLICIT_NAMING = re.compile(r"(?:'s name is|called|named)$")


_NAME_BEFORE = re.compile(r"\b([A-Z][a-z]+), my (one and only |only |beloved |dear |sweet |little |"
                          r"old )?([a-z]+)")
_NAMED = re.compile(r"\b(?:a|an|my|our|(" + NUM + r")) (?:[\w-]+ ){0,2}?([a-z]+) (?:named|called) "
                    r"([a-z][a-z'-]+(?:(?:,| and|, and) [a-z][a-z'-]+)*)\b")


_ORG = r"([A-Z][\w&'-]+(?: (?:[A-Z][\w&'-]+|of|&|and))*)"
_EMPLOYER = (re.compile(r"\b(?i:i work (?:at|for)|i am employed (?:at|by)|my employer,? (?:is )?|"
                        r"i have worked (?:at|for)) " + _ORG),
             re.compile(_ORG + r",? (?i:the (?:company|firm|place|employer) (?:i|we) work (?:for|at))\b"))
_SCHOOLED = (re.compile(r"\b(?i:(?:degree|graduated|studied|my (?:entire |whole )?(?:degree|studies|"
                        r"bachelor's|master's)) (?:\w+ ){0,3}?(?:at|from)) " + _ORG),
             re.compile(_ORG + r",? (?i:where i (?:got|did|earned|finished) my (?:degree|bachelor's|"
                        r"master's|phd))\b"))
_ORG_STOP = frozenset({"I", "The", "A", "My", "Our", "It", "And"})


def _organisations(ctx: _Ctx) -> list[Fact]:
    if ctx.lowercase:
        return []
    out = []
    for slot, patterns in (("employer", _EMPLOYER), ("alma_mater", _SCHOOLED)):
        for pattern in patterns:
            for match in pattern.finditer(ctx.sentence):
                name = match.group(1)
                if name.split()[0] in _ORG_STOP or name.lower() in _PLACE_STOP:
                    continue
                whole = ("only",) if re.search(r"\b(?:entire|whole|only)\b", ctx.text) else ()
                out.append(ctx.fact(slot, name.lower(), len(ctx.text), extra=whole))
    return out


def _names_before(ctx: _Ctx) -> list[Fact]:
    """'Alex, my partner of five years' and 'a beagle named Biscuit'."""
    out = []
    for match in _NAME_BEFORE.finditer(ctx.sentence):
        noun = match.group(3).lower()
        relation = "dog" if _PETS.get(noun) == "dog" else "cat" if _PETS.get(noun) == "cat" else noun
        if relation in _RELATIONS or relation in ("dog", "cat", "manager", "boss"):
            extra = ("only",) if match.group(2) and "only" in match.group(2) else ()
            out.append(ctx.fact("name:" + _base_relation(relation), match.group(1).lower(), len(ctx.text),
                                extra=extra + ("possessive",)))
    for match in _NAMED.finditer(ctx.text):
        noun = match.group(2)
        relation = "dog" if _PETS.get(noun) == "dog" else "cat" if _PETS.get(noun) == "cat" else noun
        if relation not in _RELATIONS and relation not in ("dog", "cat"):
            continue
        names = [n for n in re.split(r",? and |, ", match.group(3)) if n not in _NAME_STOP]
        count = parse_number(match.group(1)) if match.group(1) else None
        only = re.search(r"\b(?:one|only one|a single|just one|my only) " + re.escape(noun)
                         + r"\b|\b(?:one|only one|a single|just one) (?:dog|cat|pet)\b", ctx.text)
        extra = ("only",) if only else ("all",) if count and count == len(names) and count > 1 else ()
        if names:
            out.append(ctx.fact("name:" + _base_relation(relation), ",".join(names), match.end(),
                                extra=extra))
    return out


def _names(ctx: _Ctx) -> list[Fact]:
    out = _names_before(ctx)
    for match in _SELF_NAME.finditer(ctx.text):
        if match.group(1) not in _NAME_STOP:
            out.append(ctx.fact("name:self", match.group(1), match.end()))
    greeting = _GREETING_NAME.search(ctx.original.strip())
    greeted = greeting.group(1).lower() if greeting else ""
    if greeted and greeted not in _NAME_STOP and greeted not in _DEMONYMS and greeted not in _LANGUAGES:
        out.append(ctx.fact("name:self", greeting.group(1).lower(), len(ctx.text)))
    for match in _REL_NAME.finditer(ctx.text):
        name = match.group(3)
        connector = ctx.text[match.end(2):match.start(3)].strip()
        explicit = bool(_EXPLICIT_NAMING.search(connector))
        if name in _NAME_STOP or name in _RELATIONS or not (explicit or _is_capitalised(ctx, name)):
            continue
        only = match.group(1) == "only" or re.search(r"\b(?:my one and only|the only (?:person|one))\b",
                                                     ctx.text)
        out.append(ctx.fact("name:" + _base_relation(match.group(2)), name, match.end(),
                            extra=("only", "possessive") if only else ("possessive",)))
    return out


def _base_relation(word: str) -> str:
    return {"puppy": "dog", "kitten": "cat", "mum": "mom", "mother": "mom", "father": "dad",
            "fiancee": "fiance"}.get(word, word)


def _is_capitalised(ctx: _Ctx, word: str) -> bool:
    """Was ``word`` written with a capital (and not just at the start of the sentence)?"""
    if ctx.lowercase:
        return False
    pattern = re.compile(r"(?<![.!?]\s)(?<!^)\b" + re.escape(word.capitalize()) + r"\b")
    return bool(pattern.search(ctx.original))


_PLACE_STOP = frozenset("""a an the my our his her their this that some for since with and but so because
when where which who now too also right near by at on in to from last next this year years ago month week
summer winter spring fall weekend for until till back every""".split())


def _place_after(ctx: _Ctx, start: int) -> tuple[str, places.Place | None, int]:
    """(name, resolved place, end offset) of the place phrase starting at ``start``."""
    rest = ctx.text[start:]
    words: list[str] = []
    offset = start
    for token in re.finditer(r"[a-z][a-z.'-]*", rest):
        word = token.group().rstrip(".")
        if rest[:token.start()].strip(" ") and re.search(r"[,;!?()]", rest[:token.start()]):
            break
        if word in _PLACE_STOP and words:
            break
        if word in ("the",) and not words:
            continue
        words.append(word)
        offset = start + token.end()
        if len(words) == 4:
            break
    flags = [(not ctx.lowercase) and _is_capitalised(ctx, w) for w in words] if not ctx.lowercase else []
    place, used = places.resolve_prefix(words, flags if flags else [False] * len(words))
    if place is None and not ctx.lowercase and words and all(flags[:1]):
        name = " ".join(w for w, f in zip(words, flags) if f) or words[0]
        return "?" + name, None, offset
    if place is None:
        return "", None, offset
    end = start + sum(len(w) + 1 for w in words[:used])
    return places.fold(place.name), place, end


_RESIDENCE = re.compile(r"\b(?:i|we) (?:currently |still |also |actually |now )?(?:live|am living|"
                        r"are living|reside|am based|are based|am located|are located|have lived|"
                        r"have been living|am settled|are settled|call home)(?: here)? in ")
_MY_HOME = re.compile(r"\b(?:my|our) (?:home|house|flat|apartment|condo|place|hometown|home town|"
                      r"town)(?: is| here)? in |\bhere in |\bsomeone (?:who lives|living|"
                      r"based) in (?=[\w ]+ like me\b)")
_ORIGIN = re.compile(r"\b(?:i am|we are) (?:originally |actually )?from |\b(?:i|we) (?:grew up|"
                     r"was born(?: and raised)?|were born|was raised|were raised) in |\bborn and raised in |"
                     r"(?:^|, )growing up in ")
_NOT_FROM = re.compile(r"\b(?:i am|we are) not (?:originally )?from ")
_VISITED = re.compile(r"\b(?:i|we) (?:was|were) (?:in|at|over in|out in) |\b(?:i|we) have (?:been|traveled|"
                      r"travelled|lived|stayed) (?:to|in) |\b(?:i|we) (?:went|traveled|travelled|flew|drove|"
                      r"got back|came back|returned|backpacked|toured) (?:to|from|around|through) |\b(?:i|"
                      r"we) visited |\bmy (?:trip|visit|holiday|vacation|honeymoon|stay|semester|"
                      r"year abroad) (?:to|in) |\b(?:i|we) spent (?:\w+ ){1,3}in |\b(?:i|we) (?:lived|"
                      r"stayed|studied|worked) in |\bwhen i was in ")
_NEVER_BEEN = re.compile(r"\b(?:i|we) (?:have )?never (?:been|traveled|travelled|gone|visited|set foot|"
                         r"stepped foot|flown)(?: to| in)? |\b(?:i|we) have not (?:ever )?been (?:to|in) |"
                         r"\b(?:i|we) have yet to (?:visit|go to) ")
_FOR_DURATION = re.compile(r"^\s*(?:for|since|my whole life|all my life)\b")


def _places(ctx: _Ctx) -> list[Fact]:
    out: list[Fact] = []
    for pattern, slot, polarity in ((_RESIDENCE, "residence", True), (_MY_HOME, "residence", True),
                                    (_ORIGIN, "origin", True), (_NOT_FROM, "origin", False),
                                    (_VISITED, "visited", True), (_NEVER_BEEN, "visited", False)):
        for match in pattern.finditer(ctx.text):
            name, _place, end = _place_after(ctx, match.end())
            if not name:
                continue
            fact_slot = slot
            if slot == "residence" and "have lived" in match.group() + " " and not \
                    _FOR_DURATION.search(ctx.text[end:]):
                fact_slot = "visited"
            extra = ("lifetime",) if slot == "visited" and not polarity else ()
            out.append(ctx.fact(fact_slot, name, end, polarity, extra=extra,
                                strength=0.85 if "here in" in match.group() else 1.0))
            if fact_slot in ("residence", "origin") and polarity:
                out.append(ctx.fact("visited", name, end, True, extra=("implied",)))
    return out


_KID_NOUNS = (r"(kids|children|child|sons?|daughters?|grandkids|grandchildren|stepkids|stepchildren|"
              r"little ones)")
_KIDS_HAVE = re.compile(r"\b(?:i|we) (?:also |both )?(?:have|have got|got|raised|am raising|are raising) ("
                        + COUNT + r") (?:(?:[\w-]+) ){0,2}?" + _KID_NOUNS + r"\b")
_KIDS_NONE = re.compile(r"\b(?:i|we) (?:do not|did not|never|have never|have not) (?:have|had|want|"
                        r"wanted)(?: any)? (?:kids|children|a child|a kid|a baby|babies)\b|"
                        r"\bi am (?:childless|child-free|childfree|not a (?:mom|mother|dad|father|"
                        r"parent))\b|^(?:and )?no (?:kids|children)\b(?! (?:allowed|menu|under|zone|section|"
                        r"policy|please))|(?:single|divorced|married), no (?:kids|children)\b")
_PARENT_OF = re.compile(r"\ban? (?:proud |busy |single )?(?:mother|mom|mum|father|dad|parent) of (" + NUM
                        + r")\b")
_MY_KIDS = re.compile(r"\b(?:my|our) ((?:[\w-]+ ){0,2}?)(kids|children|son|sons|daughter|daughters|toddler|"
                      r"grandkids|grandchildren|stepson|stepdaughter|stepkids|little ones)\b")
_MY_YOUNGEST = re.compile(r"\b(?:my|our) (youngest|eldest|oldest)(?=,| [A-Za-z]+,| is\b| just\b| starts\b|"
                          r" turned\b| turns\b| goes\b)")
_STAY_HOME = re.compile(r"\bstay[- ]at[- ]home (?:mom|dad|mum|mother|father|parent)\b")
_TEACHING = re.compile(r"\b(?:class|classroom|students|pupils|teach|teaching|coach|coaching|daycare|camp)\b")


def _kids(ctx: _Ctx) -> list[Fact]:
    out = []
    for match in _KIDS_HAVE.finditer(ctx.text):
        count = parse_number(match.group(1))
        noun = match.group(2)
        if count is None or "'" in match.group():
            continue
        if noun.startswith(("son", "daughter")):
            out.append(ctx.fact("kids", "some" if count else "0", match.end(), strength=0.95))
            continue
        if noun.startswith("grand"):
            out.append(ctx.fact("kids", "some", match.end(), strength=0.9))
            continue
        value = str(count) if count != 1 or match.group(1) in ("one", "1") else "some"
        out.append(ctx.fact("kids", value, match.end()))
    for match in _KIDS_NONE.finditer(ctx.text):
        lifetime = ("lifetime",) if "never" in match.group() else ()
        out.append(ctx.fact("kids", "0", match.end(), extra=lifetime))
    for match in _PARENT_OF.finditer(ctx.text):
        count = parse_number(match.group(1))
        if count:
            out.append(ctx.fact("kids", str(count), match.end()))
    bare = re.match(r"^(" + NUM + r") (?:kids|children)\b", ctx.text)
    if bare and (parse_number(bare.group(1)) or 0) >= 1:
        out.append(ctx.fact("kids", str(parse_number(bare.group(1))), bare.end(), strength=0.85))
    only = re.search(r"\b(?:our|my) only (?:one|child|kid)\b|\bwe have (?:one|a single|only one|"
                     r"just one) (?:child|kid)\b|\bi have (?:one|a single|only one|just one) (?:child|"
                     r"kid)\b", ctx.text)
    if only:
        out.append(ctx.fact("kids", "1", only.end()))
    out += _my_kids(ctx)
    for match in _STAY_HOME.finditer(ctx.text):
        if re.search(r"\bi am (?:an? )?(?:\w+ )?$", ctx.text[:match.start()]):
            out.append(ctx.fact("kids", "some", match.end(), strength=0.75))
    return out


_NOT_MY_KIDS = frozenset({"future", "dream", "friend", "sister", "brother", "partner", "husband", "wife",
                          "imaginary", "fur"})


def _my_kids(ctx: _Ctx) -> list[Fact]:
    if _TEACHING.search(ctx.text):
        return []
    out = []
    for match in _MY_KIDS.finditer(ctx.text):
        modifiers = match.group(1).split()
        if any("'" in m or m in _NOT_MY_KIDS for m in modifiers):
            continue
        count = next((parse_number(m) for m in modifiers if parse_number(m) not in (None, 1)), None)
        plural = match.group(2) in ("kids", "children", "stepkids", "little ones", "sons", "daughters")
        value = (str(count) if count else "several") if plural else "some"
        out.append(ctx.fact("kids", value, match.end(), extra=("possessive",), strength=0.95))
    for match in _MY_YOUNGEST.finditer(ctx.text):
        out.append(ctx.fact("kids", "several", match.end(), strength=0.9))
    return out


_SIB_NONE = re.compile(r"\bi (?:do not|never|did not) (?:have|had)(?: any)? (siblings|brothers or sisters|"
                       r"brothers|sisters|a brother|a sister)\b|\bi have no (siblings|brothers or sisters|"
                       r"brothers|sisters)\b|\b(?:i am|as|being) an only child\b")
_SIB_HAVE = re.compile(r"\bi (?:also )?have (" + COUNT + r") (?:(older|younger|little|big|twin|half|step|"
                       r"baby|kid|half-|step-)[ -]?)?(siblings|brothers|sisters|brother|sister)\b")
_MY_SIB = re.compile(r"\bmy (?:(only|older|younger|little|big|baby|twin|kid|eldest|oldest|"
                     r"youngest) )?(brother|sister|siblings|brothers|sisters|bro|sis)\b(?!-in-law| in law|"
                     r"'s? (?:husband|wife))")


_ONE_OF = re.compile(r"\bi am (?:the )?(?:\w+ )?one of (" + NUM + r") (?:kids|children|siblings)\b")


def _siblings(ctx: _Ctx) -> list[Fact]:
    out = []
    for match in _ONE_OF.finditer(ctx.text):
        count = parse_number(match.group(1))
        if count:
            out.append(ctx.fact("siblings", "some" if count >= 2 else "0", match.end()))
    for match in _SIB_NONE.finditer(ctx.text):
        noun = match.group(1) or match.group(2) or "siblings"
        kind = "brothers" if "brother" in noun and "sister" not in noun else \
            "sisters" if "sister" in noun and "brother" not in noun else "siblings"
        out.append(ctx.fact(kind, "0", match.end()))
    for match in _SIB_HAVE.finditer(ctx.text):
        count = parse_number(match.group(1))
        if count is None or match.group(2) in ("half", "step", "half-", "step-"):
            continue
        noun = match.group(3)
        kind = "siblings" if noun == "siblings" else "brothers" if noun.startswith("brother") else "sisters"
        value = str(count) if (count != 1 or match.group(1) in ("one", "1")) else "some"
        out.append(ctx.fact(kind, value, match.end()))
        if count:
            out.append(ctx.fact("siblings", "some", match.end()))
    for match in _MY_SIB.finditer(ctx.text):
        noun = match.group(2)
        kind = "brothers" if noun in ("brother", "brothers", "bro") else \
            "sisters" if noun in ("sister", "sisters", "sis") else "siblings"
        if match.group(1) == "only":
            out.append(ctx.fact(kind, "1", match.end(), extra=("only",)))
        else:
            out.append(ctx.fact(kind, "some", match.end(), extra=("possessive",), strength=0.95))
        out.append(ctx.fact("siblings", "some", match.end(), extra=("possessive",), strength=0.95))
    return out


_MARITAL = re.compile(r"\b(?:i am|we are) (?:currently |still |happily |recently |newly |"
                      r"now )?(not )?(single|married|divorced|widowed|engaged|separated|a widow|a widower|"
                      r"a bachelor|a single (?:mom|mum|dad|mother|father|parent))\b")
_NEVER_MARRIED = re.compile(r"\b(?:i have )?never (?:been )?married\b|\bi have never had a (?:wife|"
                            r"husband)\b")
_MY_SPOUSE = re.compile(r"\b(?:my|our) ex-(?:wife|husband|spouse)\b|\b(?<!ex-)(?<!ex )(?:my|our) (?:(late|"
                        r"ex|former|future|first|second|dead|deceased|soon-to-be|new|dear|lovely) )?(wife|"
                        r"husband|spouse)\b(?![- ]to[- ]be)|\b(?:my (?:wife|husband) and i)\b|"
                        r"\bmarried for (?:\w+ ){1,2}years\b")


def _marital(ctx: _Ctx) -> list[Fact]:
    out = []
    for match in _MARITAL.finditer(ctx.text):
        word = match.group(2)
        value = "widowed" if "wid" in word else "single" if ("bachelor" in word or "single" in word) else word
        out.append(ctx.fact("marital", value, match.end(), polarity=not match.group(1)))
    for match in _NEVER_MARRIED.finditer(ctx.text):
        if re.search(r"\b(?:i|have)\b", ctx.text[max(0, match.start() - 12):match.end()]):
            out.append(ctx.fact("marital", "married", match.end(), polarity=False, extra=("lifetime",)))
    for match in _MY_SPOUSE.finditer(ctx.text):
        modifier = (match.group(1) if match.lastindex else None) or ("ex" if "ex-" in match.group() else None)
        if modifier in ("late", "dead", "deceased"):
            out.append(ctx.fact("marital", "widowed", match.end(), strength=0.8))
        elif modifier in ("ex", "former", "first"):
            out.append(ctx.fact("marital", "was_married", match.end(), strength=0.85))
        elif modifier in ("future", "soon-to-be"):
            continue
        else:
            spouse = re.search(r"\b(wife|husband)\b", match.group())
            if spouse:
                out.append(ctx.fact("spouse", spouse.group(1), match.end(), extra=("possessive",),
                                    strength=0.9))
            out.append(ctx.fact("marital", "married", match.end(), strength=0.9,
                                extra=("possessive", "new") if modifier == "new" else ("possessive",)))
    return out


_PET_HAVE = re.compile(r"\b(?:i|we) (?:also |both )?(?:have|have got|own|got|adopted|rescued|keep) (" + COUNT
                       + r") (?:(?:[\w-]+) ){0,2}?" + _PET_RE + r"\b")
_PET_NONE = re.compile(r"\b(?:i|we) (?:do not|did not|never|have never|have not ever|have not) (?:have|had|"
                       r"own|owned|got)(?: any| a| an)? " + _PET_RE + r"\b|\b(?:i|we) have no " + _PET_RE
                       + r"\b")
_PET_NONE_ANAPHOR = re.compile(r"\b(?:i|we) (?:have )?never (?:had|owned) (?:one|any|them)\b")
_MY_PET = re.compile(r"\b(?:my|our) ((?:[\w-]+ ){0,2}?)" + _PET_RE + r"\b")
_PET_MODIFIER_STOP = frozenset("hot corn top sea copy fat alley scaredy party lucky under big guard service "
                               "future dream next friend friend's neighbor neighbour's parents stuffed toy "
                               "old late previous childhood".split())


def _pets(ctx: _Ctx) -> list[Fact]:
    out = []
    for match in _PET_HAVE.finditer(ctx.text):
        count, kind = parse_number(match.group(1)), _PETS[match.group(2)]
        if count is None:
            continue
        value = str(count) if count >= 2 or count == 0 else "some"
        out.append(ctx.fact("pet:" + kind, value, match.end()))
        if count and kind != "pet":
            out.append(ctx.fact("pet:pet", "some", match.end()))
    for match in _PET_NONE.finditer(ctx.text):
        kind = _PETS[match.group(1) or match.group(2)]
        out.append(ctx.fact("pet:" + kind, "0", match.end(),
                            extra=("lifetime",) if "never" in match.group() else ()))
    for match in _PET_NONE_ANAPHOR.finditer(ctx.text):
        earlier = re.findall(_PET_RE, ctx.before + " " + ctx.text[:match.start()])
        if earlier:
            out.append(ctx.fact("pet:" + _PETS[earlier[-1]], "0", match.end(), extra=("lifetime",)))
    for match in _MY_PET.finditer(ctx.text):
        modifiers = match.group(1).split()
        if any(m in _PET_MODIFIER_STOP or "'" in m for m in modifiers) or match.group(2) == "animals":
            continue
        kind = _PETS[match.group(2)]
        extra = ("past",) if any(m in ("old", "late", "previous", "childhood") for m in modifiers) else ()
        count = next((parse_number(m) for m in modifiers if (parse_number(m) or 0) >= 2), None)
        value = str(count) if count and match.group(2).endswith("s") else "some"
        out.append(ctx.fact("pet:" + kind, value, match.end(), extra=extra + ("possessive",), strength=0.95))
        if kind != "pet":
            out.append(ctx.fact("pet:pet", "some", match.end(), extra=extra + ("possessive",), strength=0.95))
    return out


_NP = r"((?:[\w-]+ ){0,2}?[\w-]+)"
_NP_END = (r"(?= *(?:[,.;!?)\u2014-]|$| and | but | so | at all| yet| either| anymore| or | because| since|"
           r" in | on | at | for | to | with | right now| now| here| there))")
_POS_NONE = (
    re.compile(r"(?:\b(?:i|we) |^|, )(?:do not|did not|never|have never|have not|no longer|"
               r"still do not) (?:have|own|drive|had|owned|got|buy|bought|take|use|play|keep|get)(?: a| an|"
               r" any| my own| a single| our own)? (?!to )" + _NP
               + _NP_END),
    re.compile(r"\b(?:i|we) have (?:no|zero) " + _NP + _NP_END),
    re.compile(r"(?:^|, )no " + _NP + r"(?=,|$| or | and )"),
)
_POS_SOME = (
    re.compile(r"\b(?:my|our) ((?:[\w-]+ ){0,2})([\w-]+)\b"),
    re.compile(r"\bthe ((?:[\w-]+ ){0,2})([\w-]+) (?:i|we) (?:had|have|take|took|bought|own|use|play|got)\b"),
    re.compile(r"\b(?:i|we) (?:take|use|play|drive|own) (?:my |our |a |an |"
               r"the )?((?:[\w-]+ ){0,2}?)([\w-]+)\b"),
    re.compile(r"\b(?:i|we) (?:have|have got|also have|still have) (?!to\b|been\b|had\b|never\b|no\b|"
               r"not\b)(?:a |an |one |two |three |some |my own |our own )?((?:[\w-]+ ){0,1}?)([\w-]+)\b"),
)
_HYPERNYMS = {
    "instrument": "guitar piano cello violin drums drum bass flute saxophone sax trumpet ukulele clarinet "
    "harp keyboard viola banjo trombone accordion harmonica",
    "smartphone": "iphone android pixel galaxy smartphone",
    "medication": "pill meds medication medicine inhaler insulin prescription antidepressant statin tablet",
    "debt": "loan mortgage debt",
    "car": "car vehicle suv sedan hatchback minivan",
    "allergy": "allergy",
}
_MEMBER_OF = {member: category for category, members in _HYPERNYMS.items() for member in members.split()}
_ABSTRACT = frozenset("""time idea clue problem plan issue choice chance energy patience reason interest
experience luck opinion preference desire way need doubt worry complaint regret excuse word sense say
control access power right life memory appetite motivation space room help support money cash budget
intention thing stuff one anything anyone everything something nothing someone friend family kid child
hour day week favorite favourite answer question reply concern feeling strength voice option limit rule
restriction pet sibling brother sister job biggie offense rush pressure matter kidding thanks worries
problem way sugar meat fish dairy gluten alcohol caffeine coffee kids children pets siblings plans idea
ideas point points news luck clue doubt fun prob probs sweat hassle hurry""".split())


def _head(phrase: str) -> str:
    word = phrase.split()[-1] if phrase.split() else ""
    if word.endswith("ies") and len(word) > 4:
        word = word[:-3] + "y"
    elif word.endswith("s") and not word.endswith(("ss", "us", "is")) and len(word) > 3:
        word = word[:-1]
    return {"licence": "license"}.get(word, word)


_WISH_HAD = re.compile(r"\bi wish i (?:had|owned|could have) (?:a |an |any |"
                       r"some )?((?:[\w-]+ ){0,1}?)([\w-]+)\b|\bi would (?:love|like) to (?:have|own|"
                       r"get) (?:a |an |some )?((?:[\w-]+ ){0,1}?)([\w-]+)\b")


def _wished(ctx: _Ctx) -> list[Fact]:
    """'I wish I had a sibling' / 'I'd love to have a dog one day' say the speaker has none now."""
    out = []
    if re.search(r"\b(?:another|too|more|also|second|other|again|back)\b", ctx.text):
        return out
    for match in _WISH_HAD.finditer(ctx.text):
        head = _head(match.group(2) or match.group(4))
        if not head or head in _ABSTRACT - {"pet", "sibling", "brother", "sister", "kid", "child"} or \
                head in _STOP_HEADS:
            continue
        slot, value = _absence_slot(head)
        fact = ctx.fact(slot, value, match.end(), strength=0.85)
        quals = fact.qualifiers - {"hypothetical", "modal"}
        out.append(Fact(fact.slot, fact.value, True, fact.subject, quals,
                        fact.evidence, fact.strength))
    return out


def _absence_slot(head: str) -> tuple[str, str]:
    if head in ("sibling", "brother", "sister"):
        return ("siblings" if head == "sibling" else head + "s"), "0"
    if head in ("kid", "child", "baby"):
        return "kids", "0"
    if head in _PETS:
        return "pet:" + _PETS[head], "0"
    return "has:" + _MEMBER_OF.get(head, head), "0:" + head


def _possessions(ctx: _Ctx) -> list[Fact]:
    out = _wished(ctx)
    for pattern in _POS_NONE:
        for match in pattern.finditer(ctx.text):
            head = _head(match.group(1))
            if not head or head in _ABSTRACT or head in _STOP_HEADS:
                continue
            extra = ("lifetime",) if "never" in match.group() else ()
            out.append(ctx.fact("has:" + _MEMBER_OF.get(head, head), "0:" + head, match.end(), extra=extra))
    for pattern in _POS_SOME:
        for match in pattern.finditer(ctx.text):
            words = match.group(1).split() + [match.group(2)]
            if "'" in match.group() or any(w in _POSSESSION_MODIFIER_STOP for w in words):
                continue
            extra = ("past",) if any(w in ("old", "former", "previous", "last", "ex") for w in words) else ()
            for word in words:
                head = _head(word)
                if head and head not in _ABSTRACT and head not in _STOP_HEADS:
                    out.append(ctx.fact("has:" + _MEMBER_OF.get(head, head), "some:" + head, match.end(),
                                        extra=extra + ("possessive",), strength=0.95))
    if re.search(r"\b(?:i|we) (?:am|are) (?:\w+ )?allergic to\b|\bmy (?:\w+ )?allerg(?:y|ies)\b", ctx.text):
        out.append(ctx.fact("has:allergy", "some:allergy", len(ctx.text), extra=("possessive",)))
    if re.search(r"\bi live (?:alone|by myself|on my own)\b", ctx.text):
        out.append(ctx.fact("has:roommate", "0:roommate", len(ctx.text)))
    return out


_STOP_HEADS = frozenset("""a an the my our your his her their it this that these those own new old first
last next whole entire same other own mind head heart hand hands eye eyes way part bit lot kind sort type
be been being do doing did go going get getting make making take taking say said think know want like need
am is are was were will would can could should might must may have has had not no yes own best worst
favorite own""".split())
_POSSESSION_MODIFIER_STOP = frozenset("future dream next ideal rental hire loaner company work friend "
                                      "friend's parents mom dad brother sister wife husband neighbor "
                                      "neighbour imaginary fake hypothetical".split())


def _possession_pair(old: Fact, new: Fact) -> tuple[str, str, float] | None:
    """'I don't have a car' vs 'my car'; 'no instruments' vs 'my cello' (category vs member)."""
    (old_state, old_head), (new_state, new_head) = old.value.split(":", 1), new.value.split(":", 1)
    if old_state == new_state:
        return "consistent", "negation", 0.0
    negative, positive = (old_head, new_head) if old_state == "0" else (new_head, old_head)
    if negative == positive or negative == _MEMBER_OF.get(positive) == negative:
        return "conflict", "negation", 0.88
    return None


# --------------------------------------------------------------------------- extractors: food, drink, habits

_DIET_IS = re.compile(
    r"\b(?:i am|i were|i have been|i have become|i became|we are|i went|i have gone|i have always been|"
    r"i remain|"
    r"i stay|we have been|i have been a|i am still)(?: an?)?(?: (?:strict|strictly|lifelong|full[- ]time|"
    r"committed|proud|ethical|total|complete|100%|pretty strict|very strict|practicing|observant|devout|"
    r"also))? (vegetarian|vegan|pescatarian|pescetarian|veggie|plant[- ]based|halal|"
    r"kosher)\b(?! (?:restaurant|place|option|options|menu|dish|dishes|recipe|recipes|food|friend|friends|"
    r"cafe|spot|meal|meals|version|burger|sausage))")
_DIET_KEEP = re.compile(r"\bi (?:keep|eat (?:only )?|only eat) (halal|kosher)\b")
_GROUP_RE = r"(" + "|".join(sorted(map(re.escape, _FOOD_GROUPS), key=len, reverse=True)) + r")"
_DIET_NOT = re.compile(r"\b(?:i|we) (?:do not|never|no longer|cannot|can not|will not|refuse to|"
                       r"do not ever) (?:eat|touch|consume|drink|have)(?: any)? " + _GROUP_RE + r"\b")
_NO_GROUP = re.compile(r"(?:^|\b(?:and|so|remember|please|just|but|,)\s)no " + _GROUP_RE
                       + r"(?: (?:at all|whatsoever|for me|ever|of any kind|or \w+))?\b(?! (?:allowed|"
                       r"needed|required))")
_NOT_VEG = re.compile(r"\bi am not (?:an? )?(vegetarian|vegan|pescatarian)\b|\bi (?:eat|love) meat\b|"
                      r"\bi (?:eat|will eat) (?:pretty much )?(?:anything|everything)\b|\bi am a (?:big |"
                      r"huge )?(?:meat[- ]eater|carnivore|meat lover)\b|\bi prefer real meat\b")


def _restriction_tag(group: str) -> str:
    """How a 'no X' restriction reads in reasons: drinks are abstentions, foods are diet."""
    drinks = {"alcohol": "alcohol", "booze": "alcohol", "coffee": "coffee", "caffeine": "coffee"}
    return "abstain:" + drinks[group] if group in drinks else "diet:no " + group


def _diet(ctx: _Ctx) -> list[Fact]:
    out = []
    for match in list(_DIET_IS.finditer(ctx.text)) + list(_DIET_KEEP.finditer(ctx.text)):
        diet = match.group(1).replace(" ", "-")
        out.append(ctx.fact("diet", diet, match.end()))
        out.append(ctx.fact("avoids", _DIETS[diet.replace("-", " ") if diet not in _DIETS else diet],
                            match.end(), extra=("diet:" + diet,)))
    for match in _DIET_NOT.finditer(ctx.text):
        out.append(ctx.fact("avoids", _FOOD_GROUPS[match.group(1)], match.end(),
                            extra=(_restriction_tag(match.group(1)),)))
    for match in _NO_GROUP.finditer(ctx.text):
        if not re.search(r"\b(?:you|he|she|they|them|him|her|guests|kids)\b", ctx.text[:match.start()]):
            out.append(ctx.fact("avoids", _FOOD_GROUPS[match.group(1)], match.end(),
                                extra=(_restriction_tag(match.group(1)),), strength=0.9))
    for match in _NOT_VEG.finditer(ctx.text):
        out.append(ctx.fact("diet", "omnivore", match.end()))
    return out


_HANDED = re.compile(r"\bi am (?:a )?(left-handed|right-handed|left handed|right handed|lefty|righty|"
                     r"southpaw|a lefty|a righty)\b")
_RENT = re.compile(r"\bi (?:rent|am renting|lease) (?:my|an|a|the|this) (?:apartment|flat|house|place|home|"
                   r"condo|unit|studio)\b|\bi am a (?:renter|tenant)\b|\bwe rent\b")
_OWN = re.compile(r"\b(?:i|we) own (?:my|our|the|a|an|this) (?:apartment|flat|house|place|home|condo|"
                  r"unit)\b|\bi am (?:a |the )?(?:homeowner|owner of (?:the|this|my) (?:unit|apartment|flat|"
                  r"house|condo|place))\b")
_CARB_DIET = re.compile(r"\b(?:i am|i have been|i eat|i follow|i do|eats|i am on) (?:an? )?(?:strict |"
                        r"pretty strict |strictly )?(keto|low-carb|low carb|high-carb|high carb|carnivore|"
                        r"paleo)(?: diet)?\b")


def _lifestyle(ctx: _Ctx) -> list[Fact]:
    out = []
    for match in _HANDED.finditer(ctx.text):
        side = "left" if re.search(r"left|lefty|southpaw", match.group(1)) else "right"
        out.append(ctx.fact("handedness", side,
                            match.end()))
    for match in _RENT.finditer(ctx.text):
        out.append(ctx.fact("housing", "rent", match.end()))
    if re.search(r"\bmy landlord\b", ctx.text):
        out.append(ctx.fact("housing", "rent", len(ctx.text), strength=0.85))
    for match in _OWN.finditer(ctx.text):
        out.append(ctx.fact("housing", "own", match.end()))
    for match in _CARB_DIET.finditer(ctx.text):
        value = match.group(1).replace(" ", "-")
        out.append(ctx.fact("carbs", "low" if value in ("keto", "low-carb", "carnivore", "paleo") else "high",
                            match.end()))
    return out


_ALLERGEN_RE = r"(" + "|".join(sorted(map(re.escape, _ALLERGENS), key=len, reverse=True)) + r")"
_ALLERGIC = re.compile(r"\b(i|we|my \w+|he|she)(?: \w+){0,3}? allergic to (?:all |any |most |tree )?"
                       + _ALLERGEN_RE + r"\b")
_ALLERGY = re.compile(r"\b(i have|my|i got)(?: \w+){0,2}? " + _ALLERGEN_RE + r" allerg(?:y|ies)\b")
_INTOLERANT = re.compile(r"\bi am (lactose|gluten|dairy) intolerant\b|\bi (?:am|have) (?:a )?(?:celiac|"
                         r"coeliac)\b|\bi have (?:celiac|coeliac) disease\b")


def _allergies(ctx: _Ctx) -> list[Fact]:
    out = []
    for match in _ALLERGIC.finditer(ctx.text):
        who, allergen = match.group(1), match.group(2)
        subject = _subject_of(who)
        if subject is None or re.search(r"\b(?:not|never|no longer)\b", match.group()):
            continue
        out.append(ctx.fact("avoids", _ALLERGENS[allergen], match.end(), subject=subject,
                            extra=("allergy:" + allergen,)))
    for match in _ALLERGY.finditer(ctx.text):
        if match.group(1) in ("i have", "my", "i got"):
            out.append(ctx.fact("avoids", _ALLERGENS[match.group(2)], match.end(),
                                extra=("allergy:" + match.group(2),)))
    bare = re.search(r"\bi am (?:\w+ )?allergic\b(?! to)", ctx.text)
    if bare:
        earlier = re.findall(r"\b" + _ALLERGEN_RE + r"\b", ctx.before + " " + ctx.text[:bare.start()])
        if earlier:
            out.append(ctx.fact("avoids", _ALLERGENS[earlier[-1]], bare.end(),
                                extra=("allergy:" + earlier[-1],)))
    for match in _INTOLERANT.finditer(ctx.text):
        kind = match.group(1) or "gluten"
        out.append(ctx.fact("avoids", "dairy" if kind in ("lactose", "dairy") else "gluten", match.end(),
                            extra=("allergy:" + kind,)))
    return out


def _subject_of(who: str) -> str | None:
    if who in ("i", "we"):
        return "self"
    if who.startswith("my "):
        relation = who[3:]
        return "other:" + relation if relation in _RELATIONS else None
    return "other:unknown"


_ABSTAIN = re.compile(r"\b(?:i|we) (?:do not|never|no longer|cannot|can not|will not|gave up|quit|stopped|"
                      r"have stopped|have quit|have given up|have never) (drink|drinking|drank|drunk|smoke|"
                      r"smoking|smoked)\b(?: (alcohol|booze|coffee|caffeine|at all|anymore|any more|"
                      r"socially|either|cigarettes|weed|pot|marijuana|soda|tea))?")
_TEETOTAL = re.compile(r"\bi am (?:a |an )?(?:completely |totally |strictly )?(teetotal|teetotaler|"
                       r"teetotaller|tee-total|tee-totaler|sober|non-drinker|nondrinker|straight edge|"
                       r"non-smoker|nonsmoker|non smoker)\b|\bi have never (?:had a drink|had a sip|"
                       r"touched alcohol|touched a drop|been drunk)\b|(?:^|, )(?:a )?(non-?smoker|nonsmoker|"
                       r"teetotal|sober)(?=,|$| and\b)")
_DRINKER = re.compile(r"\bi (?:used to |still )?(drink|smoke)(?= (?:with|socially|occasionally|a lot|every|"
                      r"on|at|when|too|"
                      r"sometimes|regularly|heavily|daily|a pack|like a|quite a bit|a bit|more|less)\b|"
                      r"\s*[,.!;]|$)|\bi am a (?:heavy |social |chain |big |casual |light |"
                      r"regular )?(drinker|smoker)\b|\bi (?:got|was|am) (?:so |really |pretty |"
                      r"very )?(drunk|hungover|tipsy|wasted)\b|\bmy (hangover)\b|\b(?:my|a) (smoke) break\b|"
                      r"\bmy (?:[\w-]+ ){0,3}(smoking|drinking) habit\b|\b(pack[- ]a[- ]day) (?:smoker|"
                      r"habit)\b")


def _habits(ctx: _Ctx) -> list[Fact]:
    out = []
    for match in _ABSTAIN.finditer(ctx.text):
        verb, obj = match.group(1), match.group(2) or ""
        if obj in ("soda", "tea", "weed", "pot", "marijuana"):
            continue
        group = "tobacco" if verb.startswith("smok") else "alcohol"
        group = "coffee" if obj in ("coffee", "caffeine") else group
        stopped = re.search(r"\b(?:gave up|quit|stopped|given up)\b", match.group())
        lifetime = ("lifetime",) if "never" in match.group() and "have never" in match.group() else ()
        out.append(ctx.fact("avoids", group, match.end(), extra=("abstain:" + group,) + lifetime))
        if stopped:
            out.append(ctx.fact("consumes", group, match.end(), extra=("past", "habit")))
    for match in _TEETOTAL.finditer(ctx.text):
        word = match.group(1) or match.group(2) or "never had a drink"
        group = "tobacco" if "smok" in word else "alcohol"
        extra = ("lifetime",) if "never" in match.group() else ()
        out.append(ctx.fact("avoids", group, match.end(), extra=("abstain:" + group,) + extra))
    for match in _DRINKER.finditer(ctx.text):
        word = next(g for g in match.groups() if g)
        group = "tobacco" if word.startswith(("smok", "pack")) else "alcohol"
        out.append(ctx.fact("consumes", group, match.end(), extra=("habit",), strength=0.9))
    return out


def _consumption(ctx: _Ctx) -> list[Fact]:
    """Self consumption of a lexicon item ("I had a great steak", "my usual shrimp scampi")."""
    out = []
    for match in _CONSUME.finditer(ctx.text):
        prefix = ctx.text[match.start():match.start(1)]
        if re.search(r"\b(?:not|never|no longer|cannot|can not|rarely|hardly|barely)\b", prefix):
            continue
        item = match.group(3)
        between = match.group(2) or ""
        fact = _item_fact(ctx, item, match.start(3), match.end(), between, match.group(1))
        if fact:
            out.append(fact)
    what = re.search(r"\b(?:that|this|it|those|these|which) (?:is|are) what i (?:eat|have|drink|cook|"
                     r"order)\b", ctx.text)
    if what:
        earlier = _ITEM_RE.findall(ctx.before + " " + ctx.text[:what.start()])
        if earlier:
            out.append(ctx.fact("consumes", " ".join(sorted(_ITEMS[earlier[-1]])), what.end(),
                                extra=("item:" + earlier[-1],)))
    for match in _MY_USUAL.finditer(ctx.text):
        fact = _item_fact(ctx, match.group(2), match.start(2), match.end(), match.group(1) or "", "usual")
        if fact:
            out.append(fact)
    return out


def _item_fact(ctx: _Ctx, item: str, item_start: int, end: int, between: str, verb: str) -> Fact | None:
    before = ctx.text[max(0, item_start - 30):item_start]
    after = ctx.text[end:end + 25]
    if _SUBSTITUTE_BEFORE.search(before) or _SUBSTITUTE_AFTER.search(after):
        return None
    if re.search(r"\b(?:no|not|without|instead of|never|zero|free|avoid|skip|except)\b", between):
        return None
    if item == "rose" and not re.search(r"\b(?:glass|bottle|drink|sip)", between + " " + verb):
        return None
    prepared = bool(re.fullmatch(_PREP_VERBS, verb))
    if prepared and _FOR_OTHERS.search(ctx.text):
        return None
    extra = ("prepared",) if prepared else ()
    groups = " ".join(sorted(_ITEMS[item]))
    return ctx.fact("consumes", groups, end, extra=extra + ("item:" + item,),
                    strength=0.8 if prepared else 1.0)


# --------------------------------------------------------------------------- extractors: work, languages

_SKILL_ADJECTIVES = frozenset("good great terrible bad decent amazing awesome fantastic big huge keen avid "
                              "passionate amateur aspiring wannabe hobby self-taught home natural better "
                              "lousy fair pretty fine horrible excellent wonderful fan lazy picky messy "
                              "budding would-be".split())
_JOB_IS = re.compile(r"\b(?:i am|i work as|i have been|i have worked as|i am working as|"
                     r"i have been working as|i am employed as|my job is|i make a living as|i am currently|"
                     r"i work full[- ]time as|i work part[- ]time as)(?: an?| the)? ((?:[\w-]+ ){0,3}?)"
                     + _OCC_RE + r"\b(?!'s| assistant| aide| friend| fan| show| game| program| course|"
                     r" degree|"
                     r" school| student)")
_WORKPLACES = {"grocery store": "retail", "supermarket": "retail", "book store": "retail",
               "bookstore": "retail",
               "retail store": "retail", "department store": "retail", "mall": "retail", "hospital": "health",
               "clinic": "health", "doctor's office": "health", "pharmacy": "health", "vet's office": "vet",
               "animal hospital": "vet", "school": "education", "high school": "education",
               "university": "education",
               "elementary school": "education", "bank": "finance", "credit union": "finance",
               "law firm": "law",
               "restaurant": "food", "cafe": "food", "coffee shop": "food", "bakery": "food", "bar": "food",
               "fast food place": "food", "construction site": "trades", "factory": "manufacturing",
               "warehouse": "logistics", "post office": "logistics", "fire station": "fire",
               "police station": "police", "library": "library", "farm": "farming", "gym": "sports"}
_WORKPLACE_RE = r"(" + "|".join(sorted(map(re.escape, _WORKPLACES), key=len, reverse=True)) + r")"
_WORK_AT = re.compile(r"\bi (?:work|have worked|am working) (?:at|in|for) (?:a|an|the|my local|our local|"
                      r"this|that)? ?(?:[\w-]+ )?" + _WORKPLACE_RE + r"\b(?: as (?:an? )?((?:[\w-]+ "
                      r"){0,2}?)" + _OCC_RE + r"\b)?")
_TEACH = re.compile(r"\bi teach(?:es)?\b(?! (?:myself|me)\b)")
_RETIRED = re.compile(r"\bi am (?:now |happily |semi-|semi )?retired\b|\bi retired\b")
_JOBLESS = re.compile(r"\bi (?:do not|did not) (?:have|hold) (?:a|any) (?:job|paid job|work)\b|"
                      r"\bi am (?:currently )?(?:unemployed|jobless|out of work|between jobs|not working|"
                      r"not employed|looking for (?:a )?(?:job|work))\b|\bi do not work\b(?! (?:on|at|for|"
                      r"in|with|weekends|fridays|mondays|here|there|much|that|late|well))|"
                      r"\bi have never (?:had a (?:real )?job|worked)\b(?! (?:in|at|as|with|for|on))")
_NEVER_DID = re.compile(r"\bi (?:have )?never (taught|nursed|practiced law|practised law|coded|"
                        r"worked in (?:health ?care|a hospital|education|a school|tech|finance|retail|"
                        r"construction|a restaurant))\b")
_NOT_OCC = re.compile(r"\bi am not an? (?:[\w-]+ )?" + _OCC_RE + r"\b")
_WORKING = re.compile(r"\b(?:got (?:home|back|off) from work|(?:i am|i was) (?:at|still at) work|(?:before|"
                      r"after|off) work\b|my (?:boss|coworkers?|co-workers?|colleagues?|shift|manager|"
                      r"workplace|job)\b|i (?:work|worked) (?:at|for|in|as|from home|full[- ]time|"
                      r"part[- ]time|nights|weekends|long hours|two jobs)\b|(?:i|we) have to work\b|"
                      r"i am working (?:at|for|today|tonight|late)\b|going to work\b|on my way to work\b|"
                      r"(?:at|from) the office\b)")
_SCHOOL = re.compile(r"\bi am (?:still |currently |now )?(?:in|at) (high school|middle school|college|"
                     r"university|uni|grad school|law school|med school|medical school|junior high|"
                     r"elementary school)\b|\bi am an? (high school|college|university|grad|"
                     r"graduate) (?:student|senior|junior|freshman|sophomore)\b|\bi am (?:currently |still )?"
                     r"an? "
                     r"(?:senior|junior|freshman|sophomore|student) (?:in|at) (high school|college|"
                     r"university)\b")
_SCHOOL_LEVEL = {"high school": "school", "middle school": "school", "junior high": "school",
                 "elementary school": "school", "college": "college", "university": "college",
                 "uni": "college",
                 "grad school": "grad", "graduate": "grad", "grad": "grad", "law school": "grad",
                 "med school": "grad", "medical school": "grad"}


def _jobs(ctx: _Ctx) -> list[Fact]:
    facts = _job_facts(ctx)
    if re.search(r"\bfull[- ]time\b", ctx.before + " " + ctx.text):
        facts = [Fact(f.slot, f.value, f.polarity, f.subject, f.qualifiers | {"fulltime"}, f.evidence,
                      f.strength)
                 if f.slot == "job" else f for f in facts]
    return facts


def _job_facts(ctx: _Ctx) -> list[Fact]:
    out = []
    for match in _JOB_IS.finditer(ctx.text):
        modifiers = match.group(1).split()
        if any(m in _SKILL_ADJECTIVES for m in modifiers) or re.search(r"\bnot\b", match.group()):
            continue
        occupation = match.group(2)
        out.append(ctx.fact("job", _OCCUPATIONS[occupation], match.end(), extra=("occ:" + occupation,)))
    for match in re.finditer(r"\bmy (?:[\w-]+ )?" + _OCC_RE + r" (?:job|work|career|gig|shifts?)\b",
                             ctx.text):
        occupation = match.group(1)
        tags = ("occ:" + occupation, "possessive")
        out.append(ctx.fact("job", _OCCUPATIONS[occupation], match.end(), extra=tags))
    for match in _TEACH.finditer(ctx.text):
        out.append(ctx.fact("job", "education", match.end(), extra=("occ:teacher",), strength=0.9))
    for match in _WORK_AT.finditer(ctx.text):
        occupation = match.group(3)
        field_ = _OCCUPATIONS[occupation] if occupation else _WORKPLACES[match.group(1)]
        tag = "occ:" + (occupation or match.group(1))
        out.append(ctx.fact("job", field_, match.end(), extra=(tag,), strength=1.0 if occupation else 0.9))
    for match in _RETIRED.finditer(ctx.text):
        out.append(ctx.fact("job", "retired", match.end()))
    for match in _JOBLESS.finditer(ctx.text):
        lifetime = ("lifetime",) if "never" in match.group() else ()
        out.append(ctx.fact("job", "none", match.end(), extra=lifetime))
    for match in _NEVER_DID.finditer(ctx.text):
        field_ = _ACTIVITY_FIELD.get(match.group(1).replace("healthcare", "health care"))
        if field_:
            out.append(ctx.fact("job", field_, match.end(), polarity=False, extra=("lifetime",)))
    for match in _NOT_OCC.finditer(ctx.text):
        out.append(ctx.fact("job", _OCCUPATIONS[match.group(1)], match.end(), polarity=False,
                            extra=("occ:" + match.group(1),)))
    for match in _WORKING.finditer(ctx.text):
        out.append(ctx.fact("job", "working", match.end(), strength=0.8))
    for match in _SCHOOL.finditer(ctx.text):
        level = _SCHOOL_LEVEL[match.group(1) or match.group(2) or match.group(3)]
        out.append(ctx.fact("school", level, match.end()))
    return out


_SPEAK = re.compile(r"\bi (?:also )?(?:speak|am fluent in|can speak|speak fluent|am learning to speak|"
                    r"grew up speaking) (?:some |a little |fluent |basic |decent |good |perfect )?" + _LANG_RE
                    + r"((?:,? (?:and |or )?" + _LANG_RE + r")*)\b")
_SPEAK_ONLY = re.compile(r"\bi (?:only|just) speak " + _LANG_RE + r"\b|\bi speak only " + _LANG_RE + r"\b|\b"
                         + _LANG_RE + r" is the only language i (?:speak|know)\b")
_NATIVE = re.compile(r"\bmy (?:native|first|mother) (?:language|tongue) is " + _LANG_RE + r"\b|\b" + _LANG_RE
                     + r" is my (?:native|first|mother) (?:language|tongue)\b|\bi am a native " + _LANG_RE
                     + r" speaker\b")
_NO_SPEAK = re.compile(r"\bi (?:do not|cannot|can not|never learned to|could never) speak (?:any |"
                       r"a word of )?"
                       + _LANG_RE + r"\b|\bi do not know (?:any |a word of )" + _LANG_RE + r"\b")
_CITIZEN = re.compile(r"\bi am (?:an? )?(us|u\.s\.|uk|u\.k\.|eu) (?:citizen|national)\b")
_NATIONALITY = re.compile(r"\bi am (?:an? )?(?:proud |born )?" + _DEMONYM_RE + r"(?: citizen| national|"
                          r" by birth)?(?=\s*(?:[,.;!?]|$|and\b|but\b|so\b|too\b|myself\b|born\b|by birth\b|"
                          r"citizen\b|with\b|living\b|who\b|here\b|currently\b))")


def _languages(ctx: _Ctx) -> list[Fact]:
    out = []
    for match in _SPEAK.finditer(ctx.text):
        if "learning" in match.group():
            continue
        for lang in [match.group(1)] + re.findall(_LANG_RE, match.group(2) or ""):
            out.append(ctx.fact("speaks:" + lang, "yes", match.end()))
    for match in _SPEAK_ONLY.finditer(ctx.text):
        lang = next(g for g in match.groups() if g)
        out.append(ctx.fact("speaks_only", lang, match.end()))
        out.append(ctx.fact("speaks:" + lang, "yes", match.end()))
    for match in _NATIVE.finditer(ctx.text):
        lang = next(g for g in match.groups() if g)
        out.append(ctx.fact("native_language", lang, match.end()))
        out.append(ctx.fact("speaks:" + lang, "yes", match.end()))
    for match in _NO_SPEAK.finditer(ctx.text):
        lang = next(g for g in match.groups() if g)
        out.append(ctx.fact("speaks:" + lang, "yes", match.end(), polarity=False))
    only = ("only",) if re.search(r"\bno other (?:citizenship|nationality|passport)|\bonly (?:citizenship|"
                                  r"passport|nationality)\b", ctx.text) else ()
    for match in _NATIONALITY.finditer(ctx.text):
        out.append(ctx.fact("nationality", _DEMONYMS[match.group(1)], match.end(), extra=only))
    for match in _CITIZEN.finditer(ctx.text):
        code = {"us": "US", "u.s.": "US", "uk": "GB", "u.k.": "GB"}.get(match.group(1))
        if code:
            out.append(ctx.fact("nationality", code, match.end(), extra=only))
    return out


# --------------------------------------------------------------------------- extractors: instructions

_INSTRUCTION_START = re.compile(
    r"^(?:please |pls |kindly |always |never |from now on,? |going forward,? |for this chat,? |"
    r"for the rest of (?:this|the) (?:chat|conversation),? |remember(?: to)?,? |make sure (?:to |you )?|"
    r"i want you to |i would like you to |i need you to |i would prefer (?:you to |it if you )?|can you |"
    r"could you |you should |you must |do not |no |keep |use |give |answer |reply |respond |write |talk |"
    r"speak |be |stop |avoid |switch |add |include |put |format |only |just |limit |rule |quick rule|"
    r"one rule|ditch |skip |drop |lose |less |more |important|all code |cite |address me )")
_INSTRUCTION_ANYWHERE = re.compile(
    r"\b(?:from now on|going forward|for this chat|for the rest of (?:this|the) (?:chat|conversation)|"
    r"every answer|each answer|all answers|every reply|every response|your (?:answers|replies|responses)|"
    r"in this chat|from here on|i (?:only )?want(?:ed)? (?:answers|replies|everything|all|it|them|you)|"
    r"i prefer answers|as i (?:said|asked|told you|mentioned|requested|wrote)|like i (?:said|asked|"
    r"told you)|i (?:asked|told you)\b|i asked for|(?:remember|you know),? (?:that )?i (?:only )?(?:wanted|"
    r"want|asked|said)|you know my rule|my (?:original |standing |first )?(?:instruction|rule|request)|"
    r"per my|i (?:only )?want|i told you|i said|throughout|for me\b)")
_NEGATOR = re.compile(r"(?:\b(?:no|not|never|without|stop|avoid|instead of|rather than|ditch|drop|skip|"
                      r"lose)\b(?: [\w-]+){0,2} ?$)")
_ASPECTS: dict[str, tuple[tuple[str, str], ...]] = {
    "emoji": (("emoji", r"\bemojis?\b"),),
    "citations": (("citations", r"\b(?:cite|citations?|sources|links|references)\b"),),
    "bullets": (("bullets", r"\bbullet(?:ed)?(?: points?| lists?)?\b|\bbulleted\b"),
                ("prose", r"\b(?:normal |plain |full |flowing )(?:prose|paragraphs)\b|\bprose only\b")),
    "units": (("metric", r"\b(?:metric|grams|celsius|millilit(?:re|er)s|kilograms|kilomet(?:re|er)s)\b"),
              ("imperial", r"\b(?:imperial|cups|ounces|fahrenheit|pounds|inches|miles|feet)\b")),
    "time_format": (("24h", r"\b24[- ]?h(?:ou)?r\b|\b24[- ]hour\b|\bmilitary time\b"),
                    ("12h", r"\b12[- ]?h(?:ou)?r\b|\b12[- ]hour\b")),
    "spelling": (("british", r"\b(?:british|uk|english|australian) spelling\b"),
                 ("american", r"\b(?:american|us) spelling\b")),
    "person": (("first", r"\bfirst[- ]person\b"), ("second", r"\bsecond[- ]person\b"),
               ("third", r"\bthird[- ]person\b")),
    "code": tuple((lang, r"\b" + re.escape(lang) + r"\b") for lang in (
        "typescript", "javascript", "python", "rust",
                                                                       "golang", "kotlin", "swift", "ruby",
                                                                       "php")),
    "solutions": (("hints", r"\bhints?\b"),
                  ("full", r"\b(?:complete|full|entire|whole) (?:solutions?|answers?|code)\b")),
    "tone": (("formal", r"\b(?:formal|professional)\b"),
             ("casual", r"\b(?:casual|informal|chill|relaxed)\b")),
}
_POLAR_ASPECTS = frozenset({"emoji", "citations"})
_SHORT = re.compile(r"\b(?:keep|make)\b(?: \w+){0,4} (?:short|brief|concise|succinct|tight|"
                    r"under \w+ (?:sentences|words|lines|paragraphs)|to \w+ (?:sentences?|lines?|words))\b|"
                    r"\b(?:short|brief|concise|one-line|one-sentence|shorter|quick) (?:answers|replies|"
                    r"responses)\b|\bno more than \w+ (?:sentences|words|lines)\b|\bbe (?:brief|concise|"
                    r"succinct)\b|\btl;?dr\b|\bunder \w+ (?:sentences|words)\b")
_LONG = re.compile(r"\b(?:long|detailed|in-depth|thorough|comprehensive|lengthy|extensive|longer|"
                   r"more detailed|exhaustive) (?:answers|replies|responses|explanations)\b|\bin (?:great |"
                   r"full |more )?detail\b|\bas detailed as possible\b|\bnever want short\b|\bno (?:short|"
                   r"brief) (?:answers|replies)\b|\belaborate\b|\bat least \w+ paragraphs\b|"
                   r"\bworked examples\b|\b\d,?\d00\+? words\b")
_REPLY_LANG = re.compile(r"\b(?:answer|reply|respond|write|talk|speak|communicate|answers|replies|responses|"
                         r"everything|text)\b(?: \w+){0,3}? (?:in|using) " + _LANG_RE + r"\b|\b(?:only "
                         r")?in " + _LANG_RE
                         + r" (?:only|please|from now on|going forward)\b|\bswitch (?:back )?to " + _LANG_RE
                         + r"\b|\b(?:asked for|want|wanted) " + _LANG_RE + r"\b|\b" + _LANG_RE + r" only\b")


def _aspect_values(text: str, options: tuple[tuple[str, str], ...]) -> tuple[set[str], set[str]]:
    """(asked-for values, refused values) of one instruction aspect, negation-aware."""
    wanted: set[str] = set()
    refused: set[str] = set()
    for value, pattern in options:
        for match in re.finditer(pattern, text):
            before = text[max(0, match.start() - 30):match.start()]
            (refused if _NEGATOR.search(before) else wanted).add(value)
    return wanted, refused


def _instructions(ctx: _Ctx) -> list[Fact]:
    text = ctx.text
    if ctx.mood == "question" or not (_INSTRUCTION_START.search(text) or _INSTRUCTION_ANYWHERE.search(text)):
        return []
    out = []
    for aspect, options in _ASPECTS.items():
        wanted, refused = _aspect_values(text, options)
        if aspect in _POLAR_ASPECTS:
            value = options[0][0]
            if wanted and not refused:
                out.append(ctx.fact("instr:" + aspect, value, len(text)))
            elif refused and not wanted:
                out.append(ctx.fact("instr:" + aspect, value, len(text), polarity=False))
        elif len(wanted) == 1:
            out.append(ctx.fact("instr:" + aspect, wanted.pop(), len(text)))
        elif not wanted and len(refused) == 1 and len(options) == 2:
            other = next(v for v, _ in options if v not in refused)
            out.append(ctx.fact("instr:" + aspect, other, len(text), strength=0.9))
    lang = _REPLY_LANG.search(text)
    if lang and not re.search(r"\btranslat", text):
        out.append(ctx.fact("instr:language", next(g for g in lang.groups() if g), len(text)))
    short, long_ = _SHORT.search(text), _LONG.search(text)
    if short and not long_:
        out.append(ctx.fact("instr:length", "short", len(text)))
    elif long_ and not short:
        out.append(ctx.fact("instr:length", "long", len(text)))
    return out


# --------------------------------------------------------------------------- extractors: values

_EVENT_NOUNS = ("wedding birthday flight surgery operation interview exam anniversary graduation dentist "
                "doctor's appointment dentist appointment doctor appointment standup stand-up recital "
                "concert closing due date check-in checkout rehearsal dinner party move").split()
_EVENT_PHRASES = set(_EVENT_NOUNS) | {"doctor's appointment", "dentist appointment", "rehearsal dinner",
                                      "due date"}
_EVENT_NOUN_RE = r"(" + "|".join(sorted(map(re.escape, _EVENT_PHRASES), key=len, reverse=True)) + r")"
_EVENT_VERBS = {"land": "arrival", "landing": "arrival", "arrive": "arrival", "arriving": "arrival",
                "fly out": "departure", "flying out": "departure", "fly home": "return",
                "flying home": "return",
                "fly back": "return", "flying back": "return", "getting married": "wedding",
                "get married": "wedding", "check in": "check-in", "checking in": "check-in",
                "check out": "checkout", "checking out": "checkout"}
_EVENT_MENTION = re.compile(
    r"\b(?:(my|our|the|his|her|their|[a-z]+'s) )?(?:(return|outbound|connecting|morning|evening|afternoon|"
    r"final|team|daily|weekly) )?" + _EVENT_NOUN_RE + r"\b|\b(?:i|we) (?:are |am |will )?("
    + "|".join(sorted(_EVENT_VERBS, key=len, reverse=True)) + r")\b")
_TIME_VALUE = re.compile(r"\b(?:at |@ )?(\d{1,2})(?::(\d{2}))? ?(am|pm|a\.m\.|p\.m\.|in the morning|"
                         r"in the afternoon|in the evening|at night|o'clock)\b|\bat (\d{1,2}):(\d{2})\b|"
                         r"\b(\d{1,2}):(\d{2})\b")
_DATE_VALUE = re.compile(_DATE_RE)
_WEEKDAY_VALUE = re.compile(r"\b" + _WEEKDAY_RE)
_EVENT_WINDOW_STOP = re.compile(r"[;!?]|\.(?!\d)|\b(?:and then|but|because|while|so)\b")


def _events(ctx: _Ctx) -> list[Fact]:
    out = []
    for match in _EVENT_MENTION.finditer(ctx.text):
        owner, modifier = match.group(1), match.group(2)
        event = match.group(3) or _EVENT_VERBS[match.group(4)]
        event = {"stand-up": "standup", "dentist appointment": "dentist", "doctor appointment": "doctor's "
                 "appointment"
                 }.get(event, event)
        subject = "self" if owner in (None, "my", "our", "the") else "other:" + owner
        window = ctx.text[match.end():match.end() + 60]
        stop = _EVENT_WINDOW_STOP.search(window)
        window = window[:stop.start()] if stop else window
        if _EVENT_MENTION.search(window):
            window = window[:_EVENT_MENTION.search(window).start()]
        key = ((modifier + " ") if modifier in ("return", "outbound", "connecting") else "") + event
        for value in _event_values(window):
            out.append(ctx.fact("when:" + key, value, match.end(), subject=subject))
    return out


def _event_values(window: str) -> list[str]:
    values = []
    date = _DATE_VALUE.search(window)
    if date:
        g = date.groups()
        month_word = g[0] or g[3]
        short = _MONTH_ABBR.get(month_word[:4].rstrip("."), _MONTH_ABBR.get(month_word[:3]))
        month = month_word if month_word in _MONTHS else short
        day = int(g[1] or g[2])
        if month and 1 <= day <= 31:
            values.append(f"date:{_MONTHS.index(month) + 1:02d}-{day:02d}")
    days = sorted({m.group(1) for m in _WEEKDAY_VALUE.finditer(window)})
    if days:
        values.append("weekday:" + ",".join(days))
    time = _TIME_VALUE.search(window)
    if time:
        values.append(_clock(time.groups()))
    return [v for v in values if v]


def _clock(g: tuple[str | None, ...]) -> str:
    if g[0]:
        hour, minute, half = int(g[0]), int(g[1] or 0), g[2]
        afternoon = half and (half.startswith("p") or half in ("in the afternoon", "in the evening",
                                                               "at night"))
        if afternoon and hour < 12:
            hour += 12
        elif half and (half.startswith("a") or half == "in the morning") and hour == 12:
            hour = 0
    else:
        hour, minute = int(g[3] or g[5]), int(g[4] or g[6])
    return f"time:{hour:02d}:{minute:02d}" if hour < 24 and minute < 60 else ""


_PARTY = re.compile(r"\b(" + NUM + r") (?:including me|of us|people total|people in total|in total|total)\b|"
                    r"\bthe ("
                    + NUM + r") of us\b|\b(?:a )?party of (" + NUM + r")\b|\b(?:a )?group of (" + NUM
                    + r")\b|"
                    r"\bwe are (?:a )?(?:family of )?(" + NUM + r")\b(?! (?:years|minutes|hours|days|weeks|"
                    r"months|"
                    r"miles))|\bthere (?:are|will be) (" + NUM + r") of us\b|\btable for (" + NUM + r")\b|"
                    r"\bfamily of ("
                    + NUM + r")\b")
_PARTY_CHANGE = re.compile(r"\b(?:more|extra|additional|joining|also coming|plus|another|dropped out|"
                           r"can not make it|cannot make it|now)\b")


def _party(ctx: _Ctx) -> list[Fact]:
    out = []
    for match in _PARTY.finditer(ctx.text):
        count = parse_number(next(g for g in match.groups() if g))
        if count and count >= 2 and not _PARTY_CHANGE.search(ctx.text):
            out.append(ctx.fact("party_size", str(count), match.end(), strength=0.85))
    return out


_UNIT_DAYS = {"day": 1, "week": 7, "month": 30, "year": 365}
_AGO = re.compile(r"\b(?:i|we) (?:only |just )?(bought|got|started|moved|adopted|signed|joined|began|"
                  r"ordered|booked|met|married)\b(?: [\w']+){0,3}? (" + COUNT + r") (day|week|month|"
                  r"year)s? ago\b")
_SINCE = re.compile(r"\b(?:it has been|it is been|been|after) (?:about |almost |over |nearly )?(" + COUNT
                    + r") (day|week|month|year)s? since (?:i|we) (bought|got|started|moved|adopted|signed|"
                    r"joined|"
                    r"began|ordered|booked|met|married)\b")
_HAD_FOR = re.compile(r"\b(?:i|we) (?:have had|have been having|had|have been dealing with) (?:a |an |this |"
                      r"my |the )?((?:[\w-]+ ){0,2}?)(cough|fever|pain|rash|headache|headaches|symptoms|"
                      r"problem|issue|injury|infection|cold|flu|migraine|migraines|insomnia) for (?:about |"
                      r"almost |over |nearly |the (?:last|past) )?(" + COUNT + r") (day|week|month|year)s?\b")
_OF_THIS = re.compile(r"\b(?:after |for )?(?:about |almost |over |nearly )?(" + COUNT + r") (day|week|month|"
                      r"year)s? of (?:this|my|the) (cough|fever|pain|rash|headache|headaches|symptoms|"
                      r"problem|issue|injury|infection|cold|flu|migraine|migraines|insomnia)\b")
_TERM = re.compile(r"\b(" + NUM + r")[- ](month|year)s?[- ](lease|contract|mortgage|loan|warranty|"
                   r"subscription|membership|term)\b")


def _durations(ctx: _Ctx) -> list[Fact]:
    out = []
    for match in _AGO.finditer(ctx.text):
        days = _days(match.group(2), match.group(3))
        if days:
            out.append(ctx.fact("ago:" + match.group(1), str(days), match.end()))
    for match in _SINCE.finditer(ctx.text):
        days = _days(match.group(1), match.group(2))
        if days:
            out.append(ctx.fact("ago:" + match.group(3), str(days), match.end()))
    for match in _HAD_FOR.finditer(ctx.text):
        days = _days(match.group(3), match.group(4))
        if days:
            out.append(ctx.fact("lasting:" + _head(match.group(2)), str(days), match.end()))
    for match in _OF_THIS.finditer(ctx.text):
        days = _days(match.group(1), match.group(2))
        if days:
            out.append(ctx.fact("lasting:" + _head(match.group(3)), str(days), match.end()))
    for match in _TERM.finditer(ctx.text):
        count = parse_number(match.group(1))
        if count and re.search(r"\b(?:i|we|my|our)\b", ctx.text):
            months = count * (12 if match.group(2) == "year" else 1)
            out.append(ctx.fact("term:" + match.group(3), str(months), match.end()))
    return out


def _days(count: str, unit: str) -> int | None:
    number = parse_number(count)
    return number * _UNIT_DAYS[unit] if number else None


_MONEY = (r"([$€£]\s?\d[\d,]*(?:\.\d+)?\s?k?\b|\d[\d,]*(?:\.\d+)?\s?k?\s?(?:dollars|bucks|euros|pounds|"
          r"usd|eur|"
          r"gbp)\b)")
_BUDGET_CAP = re.compile(r"\b(?:(?:hard |strict |total |max(?:imum)? |overall |firm |tight )*budget(?: is|"
                         r" of|:| was| around| about| limit(?: is| of)?| at| to)?|max(?:imum)?(?: of| is)?|"
                         r"a cap of|cap(?: it)? at|up to|no more than|not more than|at most|"
                         r"can (?:only )?(?:afford|spend|go up to|stretch to)|willing to (?:spend|pay|"
                         r"go up to)|spend(?:ing)? (?:up to|at most|no more than))\s*" + _MONEY)
_SPEND = re.compile(r"\b(?:spend|pay|paying|spending|closer to)\s*(?:about |around |roughly )?" + _MONEY)


def _money_value(text: str) -> tuple[str, float] | None:
    currency = "$" if "$" in text or "dollar" in text or "usd" in text or "bucks" in text else \
        "€" if "€" in text or "euro" in text or "eur" in text else "£"
    number = re.search(r"\d[\d,]*(?:\.\d+)?", text)
    if not number:
        return None
    amount = float(number.group().replace(",", ""))
    if re.search(r"\d\s?k\b", text):
        amount *= 1000
    return currency, amount


def _budget(ctx: _Ctx) -> list[Fact]:
    out = []
    for pattern, slot in ((_BUDGET_CAP, "budget"), (_SPEND, "spend")):
        for match in pattern.finditer(ctx.text):
            parsed = _money_value(match.group(1))
            if parsed and parsed[1] > 0:
                out.append(ctx.fact(slot, f"{parsed[0]}{parsed[1]:.0f}", match.end()))
    return out


_INCOME = re.compile(r"\b(?:take home|take-home|net|earn|make|gross|salary(?: is)?|income(?: is)?|"
                     r"paycheck(?: is)?|bring home)\b[^.$\u20ac\u00a3\d]{0,20}" + _MONEY + r"(?:\s*(?:a|per|"
                     r"/|each|every)\s*(month|year|week|yr|mo)\b)?|" + _MONEY + r"\s*(?:a|per|/)\s*(month|"
                     r"year|week)\s*(?:after tax(?:es)?|take[- ]home|net|salary|income|before tax(?:es)?|"
                     r"gross)|" + _MONEY + r" (monthly|yearly|annual|weekly) (?:take[- ]home|income|salary|"
                     r"pay)")
_AREA = re.compile(r"\b(\d[\d,]*) ?(sq\.? ?ft|square feet|square foot|sqft|m2|m\u00b2|square met(?:er|re)s|"
                   r"sq m)\b")
_SIZE = re.compile(r"\bi (?:wear|take|am) (?:a |an )?((?:(?:men's|women's|mens|womens|us|uk|"
                   r"eu) ){0,2})(?:size )(\d{1,2}(?:\.5)?)\b|\bi (?:wear|take) (?:a |an )?((?:(?:men's|"
                   r"women's|mens|womens|us|uk|eu) ){1,2})(?:size )?(\d{1,2}(?:\.5)?)\b")


def _amounts(ctx: _Ctx) -> list[Fact]:
    out = []
    for match in _INCOME.finditer(ctx.text):
        money = match.group(1) or match.group(3) or match.group(5)
        period = match.group(2) or match.group(4) or match.group(6) or "month"
        period = {"yr": "year", "mo": "month", "monthly": "month", "yearly": "year", "annual": "year",
                  "weekly": "week"}.get(period, period)
        parsed = _money_value(money)
        net = "net" if re.search(r"take[- ]home|after tax|net\b|bring home", match.group()) else "gross" \
            if re.search(r"gross|before tax|salary", match.group()) else "any"
        if parsed and re.search(r"\b(?:i|my|we|our)\b", ctx.text):
            out.append(ctx.fact(f"income:{period}:{net}", f"{parsed[0]}{parsed[1]:.0f}", match.end()))
    for match in _AREA.finditer(ctx.text):
        if re.search(r"\b(?:our|my|it is|the (?:condo|house|apartment|flat|unit|place|home))\b", ctx.text):
            out.append(ctx.fact("area", match.group(1).replace(",", ""), match.end(), strength=0.85))
    for match in _SIZE.finditer(ctx.text):
        system = (match.group(1) or match.group(3) or "").strip()
        value = match.group(2) or match.group(4)
        out.append(ctx.fact("size", value, match.end(), extra=("system:" + system,) if system else ()))
    return out


_FAVOURITE = re.compile(r"(?<!one of )(?<!another )\bmy (?:absolute |all[- ]time |very |"
                        r"current )?(?:favou?rite|fave|fav) ([a-z]+)(?: [a-z]+){0,2}? (?:is|has to be|"
                        r"would be|would have to be|is probably|is definitely|of all time is) ([\w' -]+)")
_MINE_IS = re.compile(r"^mine (?:is|has to be|would be|would have to be) ([\w' -]+)")
_FAV_QUESTION = re.compile(r"\bfavou?rite ([a-z]+)\b")


def _favourites(ctx: _Ctx) -> list[Fact]:
    out = []
    for match in _FAVOURITE.finditer(ctx.text):
        value = _short_value(match.group(2))
        if value:
            out.append(ctx.fact("fav:" + _category(match.group(1)), value, match.end()))
    mine = _MINE_IS.search(ctx.text)
    asked = _FAV_QUESTION.findall(ctx.before)
    if mine and asked:
        value = _short_value(mine.group(1))
        if value:
            out.append(ctx.fact("fav:" + _category(asked[-1]), value, mine.end(), strength=0.9))
    return out


def _category(word: str) -> str:
    word = {"colour": "color", "films": "movie", "film": "movie", "movies": "movie"}.get(word, word)
    return word[:-1] if word.endswith("s") and not word.endswith("ss") else word


def _short_value(text: str) -> str:
    text = re.split(r"\b(?:and|but|because|since|though|which|who|so|too|also|i|it|at|by|from|for)\b|"
                    r"[,.!?;]", text)[0]
    words = [w for w in text.split() if w not in ("the", "a", "an", "probably", "definitely", "either")]
    return " ".join(words[:4])


_CLOSED = re.compile(r"^(?:the )?([a-z][\w'-]*)\b[^,;]*?\b(?:(?:is|are) (?:always |usually )?closed|(?:does|"
                     r"do) not (?:run|operate|open|sail|fly|go)|(?:is|are) not (?:open|running|"
                     r"operating)) (?:on )?(?:" + _WEEKDAY_RE + ")")
_VISIT_ON = re.compile(r"\b(?:the )?([a-z][\w'-]*) (?:on|this|next) (?:a )?" + _WEEKDAY_RE
                       + r"|\b(?:the|a) " + _WEEKDAY_RE + r" (?:\d{1,2}:\d{2} |morning |afternoon |evening |"
                       r"early )?([a-z][\w'-]*)")


def _opening(ctx: _Ctx) -> list[Fact]:
    """'The Louvre is closed on Tuesdays' vs 'the Louvre on Tuesday morning' (same place, same day)."""
    out = []
    for match in _CLOSED.finditer(ctx.text):
        out.append(ctx.fact("closed:" + match.group(1), match.group(2), match.end(), subject="generic"))
    if "closed" in ctx.text or re.search(r"\bnot\b", ctx.text):
        return out
    for match in _VISIT_ON.finditer(ctx.text):
        entity, day = (match.group(1), match.group(2)) if match.group(1) else (match.group(4), match.group(3))
        if entity not in _PLACE_STOP and entity not in _WEEKDAYS and entity not in _STOP_HEADS:
            out.append(ctx.fact("visit_on:" + entity, day, match.end(), subject="generic"))
    return out


_VERB_FORMS = {
    "play": "play played playing plays", "read": "read reading reads", "watch": "watch watched watching "
    "watches",
    "see": "see seen saw seeing", "ride": "ride ridden rode riding rides", "try": "try tried trying",
    "drive": "drive driven drove driving", "fly": "fly flown flew flying", "swim": "swim swam swum swimming",
    "ski": "ski skied skiing", "surf": "surf surfed surfing", "hike": "hike hiked hiking",
    "cook": "cook cooked cooking",
    "bake": "bake baked baking", "paint": "paint painted painting", "knit": "knit knitted knitting",
    "sing": "sing sang sung singing", "dance": "dance danced dancing", "write": "write wrote written writing",
    "climb": "climb climbed climbing", "camp": "camp camped camping", "fish": "fish fished fishing",
    "learn": "learn learned learnt learning", "study": "study studied studying", "use": "use used using",
    "listen": "listen listened listening", "meet": "meet met meeting", "run": "run ran running",
    "smoke": "smoke smoked smoking", "golf": "golf golfed golfing", "skate": "skate skated skating",
}
_VERB_LEMMA = {form: lemma for lemma, forms in _VERB_FORMS.items() for form in forms.split()}
_VERB_ALT = r"(" + "|".join(sorted(_VERB_LEMMA, key=len, reverse=True)) + r")"
_INTRANSITIVE = frozenset({"ski", "surf", "hike", "swim", "camp", "fish", "skate", "golf", "dance", "climb",
                           "knit",
                           "run"})
_NEVER_ACT = re.compile(r"\b(?:i|we) (?:have )?(?:never|not ever|never once) (?:been |gone |went )?"
                        + _VERB_ALT + r"\b(?: (?:a|an|any|the|to|in|on|with)\b)?((?: [\w&'-]+){0,3})")
_DID_ACT = re.compile(r"\b(?:i|we) (?:have been |am |was |used to |also |often |still |really |usually |"
                      r"always |love |like |enjoy |love to |like to |go |went |started |have |had )?"
                      + _VERB_ALT
                      + r"\b(?: (?:a|an|the|some|lots of|a lot of|with|on|in|to)\b)?((?: [\w&'-]+){0,3})")
_ACTIVITY_STOP = frozenset("it that this them one any anything much more again before lot often well very "
                           "all myself home there here too so for with and but".split())


def _activities(ctx: _Ctx) -> list[Fact]:
    """'I've never played a tabletop RPG' vs 'I've been playing D&D' (same verb, same object head)."""
    out = []
    negatives = list(_NEVER_ACT.finditer(ctx.text))
    for match in negatives:
        lemma, head = _VERB_LEMMA[match.group(1)], _activity_object(match.group(2))
        if head or lemma in _INTRANSITIVE:
            out.append(ctx.fact(f"did:{lemma}:{head}", "0", match.end(), extra=("lifetime",)))
    spans = [(m.start(), m.end()) for m in negatives]
    for match in _DID_ACT.finditer(ctx.text):
        if any(a <= match.start() < b for a, b in spans) or re.search(r"\b(?:not|never|no)\b", match.group()):
            continue
        lemma, head = _VERB_LEMMA[match.group(1)], _activity_object(match.group(2))
        if head or lemma in _INTRANSITIVE:
            out.append(ctx.fact(f"did:{lemma}:{head}", "some", match.end(), strength=0.9))
    return out


def _activity_object(words: str) -> str:
    tokens = []
    for word in words.split():
        if word in _ACTIVITY_STOP or word in _PLACE_STOP or not re.match(r"^[a-z&]", word):
            break
        tokens.append(word)
    return _head(" ".join(tokens)) if tokens else ""


_EXTRACTORS = (_ages, _activities, _names, _organisations, _lifestyle, _amounts, _party, _durations, _places,
               _kids, _siblings, _marital, _pets, _possessions, _diet, _allergies, _habits,
               _consumption, _jobs, _languages, _instructions, _events, _budget, _favourites, _opening)
_HABIT_PRESUPPOSED = re.compile(r"\bmy (?:[\w-]+ ){0,3}(smoking|drinking) habit\b|\bmy (hangover)\b|"
                                r"\bmy (smoke) break\b")


def _presupposed_habits(ctx: _Ctx) -> list[Fact]:
    """'Will my pack-a-day smoking habit ...?' asks a question but presupposes the habit."""
    out = []
    for match in _HABIT_PRESUPPOSED.finditer(ctx.text):
        word = next(g for g in match.groups() if g)
        group = "tobacco" if word.startswith("smok") else "alcohol"
        out.append(ctx.fact("consumes", group, match.end(), extra=("habit", "possessive")))
    return out


def _job_presupposed(ctx: _Ctx) -> list[Fact]:
    """'Would it clash with my paramedic job?' presupposes the job."""
    return [ctx.fact("job", _OCCUPATIONS[m.group(1)], m.end(), extra=("occ:" + m.group(1), "possessive"))
            for m in re.finditer(r"\bmy (?:[\w-]+ )?" + _OCC_RE + r" (?:job|work|career|gig|shifts?)\b",
                                 ctx.text)]


_PRESUPPOSITION_EXTRACTORS = (_job_presupposed, _kids, _siblings, _pets, _possessions, _marital,
                              _presupposed_habits, _names,
                              _organisations, _party)


# --------------------------------------------------------------------------- conflicts

@dataclass(frozen=True)
class Relation:
    """How an older and a newer fact relate: ``conflict``, ``consistent`` or ``guarded``."""

    older: Fact
    newer: Fact
    status: str
    kind: str = ""
    score: float = 0.0
    guard: str = ""


# Slots that describe a standing state: a future or hypothetical mention of them commits to nothing.
_STATE_FAMILIES = frozenset({"age", "residence", "origin", "visited", "kids", "siblings", "brothers",
                             "sisters",
                             "marital", "pet", "has", "job", "school", "speaks", "speaks_only",
                             "native_language", "nationality", "name", "diet", "avoids", "fav"})
_EXISTENCE_FAMILIES = frozenset({"kids", "siblings", "brothers", "sisters", "pet", "has", "marital", "job"})
_SIDE_JOB = re.compile(r"\b(?:volunteer|part[- ]time|on weekends|side (?:job|gig|hustle)|moonlight\w*|"
                       r"also|too|"
                       r"as well|freelance|in summers?|on the side)\b")
_PERMANENT_FAMILIES = frozenset({"origin", "alma_mater", "handedness"})
_GENERIC_JOBS = frozenset({"student", "homemaker", "business", "working", "retired", "none", "childcare"})


def _family(slot: str) -> str:
    return slot.split(":", 1)[0]


def _guard(older: Fact, newer: Fact) -> str:
    """Why a would-be conflict is not one ('' when nothing excuses it)."""
    family = _family(newer.slot)
    if "hypothetical" in older.qualifiers or "hypothetical" in newer.qualifiers:
        return "hypothetical"
    for fact in (older, newer):
        if "modal" in fact.qualifiers and not {"possessive",
                                               "presupposed"} & fact.qualifiers and family != "instr":
            return "hypothetical"
    if "update" in newer.qualifiers:
        return "update announced"
    if "new" in newer.qualifiers and family in _EXISTENCE_FAMILIES | {"residence", "diet", "avoids"}:
        return "newly changed"
    if family in _STATE_FAMILIES and any("future" in f.qualifiers and "possessive" not in f.qualifiers
                                         for f in (older, newer)):
        return "future"
    if family in _PERMANENT_FAMILIES:
        return ""
    old_past = bool({"past", "bounded"} & older.qualifiers)
    new_past = bool({"past", "bounded"} & newer.qualifiers)
    if old_past != new_past:
        present = newer if old_past else older
        if "lifetime" not in present.qualifiers:
            return "time-qualified"
    elif old_past and new_past:
        return "time-qualified"
    if ({"habitual"} & older.qualifiers and {"occasion"} & newer.qualifiers) or \
            ({"occasion"} & older.qualifiers and {"habitual"} & newer.qualifiers):
        return "habit vs exception"
    return ""


def relations(older: list[Fact], newer: list[Fact]) -> list[Relation]:
    """Every comparable (older, newer) fact pair with its status."""
    out = []
    for old in older:
        for new in newer:
            outcome = _compare(old, new)
            if outcome is None:
                continue
            status, kind, score = outcome
            if old.subject != new.subject:
                out.append(Relation(old, new, "guarded", kind, 0.0, "different subject"))
                continue
            if status == "conflict":
                guard = _guard(old, new)
                if guard:
                    out.append(Relation(old, new, "guarded", kind, 0.0, guard))
                    continue
                score *= min(old.strength, new.strength) ** 0.5
                if "presupposed" in new.qualifiers:
                    score *= 0.95
            out.append(Relation(old, new, status, kind, score))
    return out


def conflict(older: list[Fact], newer: list[Fact]) -> Conflict | None:
    """The most confident conflict between older and newer facts of one speaker, if any."""
    best: Relation | None = None
    for relation in relations(older, newer):
        if relation.status == "conflict" and (best is None or relation.score > best.score):
            best = relation
    if best is None:
        return None
    older_value, newer_value = display(best.older), display(best.newer)
    slot = _slot_name(best.older, best.newer)
    reason = f'{slot}: "{older_value}" earlier, "{newer_value}" now'
    return Conflict(best.kind, slot, best.older, best.newer, round(min(best.score, 1.0), 3), reason)


def _slot_name(older: Fact, newer: Fact) -> str:
    if older.slot == newer.slot:
        return older.slot
    families = {_family(older.slot), _family(newer.slot)}
    if families == {"closed", "visit_on"}:
        return "opening:" + older.slot.split(":", 1)[1]
    if families == {"avoids", "consumes"} or "avoids" in families:
        tags = [q for q in older.qualifiers | newer.qualifiers if q.startswith(("diet:", "allergy:",
                                                                                  "abstain:"))]
        tag = tags[0] if tags else "diet:"
        return {"diet": "diet", "allergy": "allergies", "abstain": "abstention"}[tag.split(":")[0]]
    return f"{older.slot}/{newer.slot}"


def display(fact: Fact) -> str:
    """A short human form of a fact's value for reasons."""
    tags = {q.split(":", 1)[0]: q.split(":", 1)[1] for q in fact.qualifiers if ":" in q}
    for key in ("item", "diet", "allergy", "abstain", "occ"):
        if key in tags:
            value = tags[key]
            if key == "allergy":
                value = "allergic to " + value
            elif key == "abstain":
                value = "no " + value
            return value if fact.polarity else "not " + value
    value = fact.value
    if value.startswith(("0:", "some:")):
        state, head = value.split(":", 1)
        value = ("no " if state == "0" else "my ") + head
    elif fact.slot == "age":
        low, high = value.split("-")
        value = low if low == high else f"{low}-{high}"
    elif value == "0":
        value = "none"
    elif value.startswith("?"):
        value = value[1:]
    elif ":" in value:
        value = value.split(":", 1)[1]
    return value if fact.polarity else "not " + value


def comparable(older: str, newer: str) -> bool:
    """Whether any fact of ``older`` and any of ``newer`` are compared at all (the same slot,
    or families ``_ACROSS`` relates). False settles a pair without running the comparisons:
    the call path checks a new message against hundreds of earlier ones, most about other
    things."""
    have, _ = _fact_keys(older)
    _, want = _fact_keys(newer)
    return not have.isdisjoint(want)


@lru_cache(maxsize=8192)
def _fact_keys(text: str) -> tuple[frozenset[str], frozenset[str]]:
    """(what the text's facts are: slots and families; what they are compared with: the same
    slots and the partner families)."""
    have: set[str] = set()
    want: set[str] = set()
    for fact in _cached_facts(text):
        family = _family(fact.slot)
        have |= {"slot:" + fact.slot, "family:" + family}
        want |= {"slot:" + fact.slot, *("family:" + p for p in _PARTNERS.get(family, ()))}
    return frozenset(have), frozenset(want)


def _compare(old: Fact, new: Fact) -> tuple[str, str, float] | None:
    """(status, kind, score) for a comparable pair, None when unrelated: facts of one slot
    by that slot's checker, facts of two families by ``_ACROSS``'s."""
    if old.slot == new.slot:
        checker = _SAME_SLOT.get(_family(old.slot))
    else:
        checker = _ACROSS.get(frozenset((_family(old.slot), _family(new.slot))))
    return checker(old, new) if checker else None


def _closed_vs_visit(old: Fact, new: Fact) -> tuple[str, str, float] | None:
    if old.slot.split(":", 1)[1] != new.slot.split(":", 1)[1]:
        return None
    return ("conflict", "world_knowledge", 0.8) if old.value == new.value else ("consistent", "", 0.0)


def _budget_then_spend(old: Fact, new: Fact) -> tuple[str, str, float] | None:
    """A budget stated, then a spend: only in that order."""
    return _budget_pair(old, new) if _family(old.slot) == "budget" else None


def _ranges(value: str) -> tuple[int, int]:
    low, high = value.split("-")
    return int(low), int(high)


def _age(old: Fact, new: Fact) -> tuple[str, str, float]:
    (a_low, a_high), (b_low, b_high) = _ranges(old.value), _ranges(new.value)
    if a_high < b_low - 1 or b_high < a_low - 1:
        if old.subject.startswith("other:") and old.subject[6:] not in _UNIQUE_RELATIONS and \
                "only" not in old.qualifiers | new.qualifiers:
            return "consistent", "value", 0.0
        return "conflict", "value", 0.95 if old.subject == "self" else 0.8
    return "consistent", "value", 0.0


def _count(old: Fact, new: Fact) -> tuple[str, str, float]:
    """Counts and existence: '0', 'some' (>=1), 'several' (>=2) or an exact number."""
    a, b = old.value, new.value
    if old.polarity != new.polarity:
        return "consistent", "", 0.0
    zero_a, zero_b = a == "0", b == "0"
    if zero_a != zero_b:
        return "conflict", "negation", 0.92
    if a.isdigit() and b.isdigit() and a != b:
        pet = _family(old.slot) == "pet"
        return "conflict", "value", 0.8 if pet else 0.9
    if {a, b} == {"several", "1"}:
        return "conflict", "value", 0.8
    return "consistent", "value", 0.0


_MARITAL_CLASH = {
    frozenset({"single", "married"}): 0.88, frozenset({"married", "divorced"}): 0.8,
    frozenset({"married", "widowed"}): 0.7, frozenset({"single", "was_married"}): 0.0,
}


def _marital_pair(old: Fact, new: Fact) -> tuple[str, str, float]:
    if old.value == new.value:
        if old.polarity == new.polarity:
            return "consistent", "profile", 0.0
        return "conflict", "negation", 0.9
    if not old.polarity or not new.polarity:
        negated, other = (old, new) if not old.polarity else (new, old)
        if negated.value == "married" and "lifetime" in negated.qualifiers and other.polarity and \
                other.value in ("divorced", "widowed", "was_married", "married"):
            return "conflict", "profile", 0.88
        return "consistent", "profile", 0.0
    score = _MARITAL_CLASH.get(frozenset({old.value, new.value}), 0.0)
    return ("conflict", "profile", score) if score else ("consistent", "profile", 0.0)


def _name_pair(old: Fact, new: Fact) -> tuple[str, str, float]:
    if set(old.value.split(",")) & set(new.value.split(",")):
        return "consistent", "name_place", 0.0
    if "all" in old.qualifiers | new.qualifiers:
        return "conflict", "name_place", 0.8
    relation = old.slot.split(":", 1)[1]
    if relation == "self":
        return "conflict", "name_place", 0.9
    if relation in _UNIQUE_RELATIONS or relation == "partner":
        return "conflict", "name_place", 0.85
    if "only" in old.qualifiers | new.qualifiers:
        return "conflict", "name_place", 0.9
    return "consistent", "name_place", 0.0


def _place_pair(old: Fact, new: Fact) -> tuple[str, str, float] | None:
    a, b = _resolved(old.value), _resolved(new.value)
    family = _family(old.slot)
    if a is None or b is None:
        if old.value.startswith("?") and old.value == new.value and old.polarity != new.polarity:
            return "conflict", "negation", 0.85
        return None
    same_name = places.fold(a.name) == places.fold(b.name)
    kind = "name_place" if same_name or a.kind == b.kind else "world_knowledge"
    if family == "visited":
        if old.polarity == new.polarity:
            return "consistent", kind, 0.0
        negated, positive = (old, new) if not old.polarity else (new, old)
        outer, inner = (a, b) if negated is old else (b, a)
        if places.contains(outer, inner):
            return "conflict", "negation" if same_name else "world_knowledge", \
                0.9 if "implied" not in positive.qualifiers else 0.88
        return "consistent", kind, 0.0
    if old.polarity != new.polarity:
        if places.compatible(a, b):
            return "conflict", "negation" if same_name else "world_knowledge", 0.88
        return "consistent", kind, 0.0
    if places.compatible(a, b):
        return "consistent", kind, 0.0
    return "conflict", kind, 0.9 if family == "residence" else 0.85


def _resolved(value: str) -> places.Place | None:
    if not value or value.startswith("?"):
        return None
    return places.resolve(value)


def _items_overlap(avoid: Fact, use: Fact) -> bool:
    avoided = set(avoid.value.split())
    if _family(use.slot) == "pet":
        return "pet_" + use.slot.split(":", 1)[1] in avoided and use.value != "0"
    return bool(avoided & set(use.value.split()))


def _avoid_vs_use(old: Fact, new: Fact) -> tuple[str, str, float] | None:
    avoid, use = (old, new) if _family(old.slot) == "avoids" else (new, old)
    if not avoid.polarity or not use.polarity or not _items_overlap(avoid, use):
        return None
    score = 0.92 if avoid is old else 0.8
    if "prepared" in use.qualifiers:
        score = min(score, 0.78)
    if _family(use.slot) == "pet":
        score = 0.85
    return "conflict", "profile", score


def _avoids_pair(old: Fact, new: Fact) -> tuple[str, str, float]:
    return "consistent", "profile", 0.0


def _consumes_pair(old: Fact, new: Fact) -> tuple[str, str, float] | None:
    return None


def _diet_pair(old: Fact, new: Fact) -> tuple[str, str, float]:
    values = {old.value, new.value}
    if "omnivore" in values and len(values) == 2:
        return "conflict", "profile", 0.85
    return "consistent", "profile", 0.0


def _job_pair(old: Fact, new: Fact) -> tuple[str, str, float] | None:
    a, b = old.value, new.value
    if old.polarity != new.polarity:
        return ("conflict", "negation", 0.9) if a == b else None
    if a == b:
        old_tags = {q for q in old.qualifiers if q.startswith("occ:")}
        new_tags = {q for q in new.qualifiers if q.startswith("occ:")}
        return ("consistent", "profile", 0.0) if old_tags == new_tags or not (old_tags and new_tags) else None
    values = {a, b}
    if "none" in values:
        other = (values - {"none"}).pop()
        if other in ("student", "retired", "homemaker", "childcare"):
            return "consistent", "profile", 0.0
        return "conflict", "profile", 0.85 if other != "working" else 0.8
    if "retired" in values:
        other = (values - {"retired"}).pop()
        return ("conflict", "profile", 0.7) if other == "working" else None
    if values & _GENERIC_JOBS or _SIDE_JOB.search(old.evidence + " " + new.evidence):
        return None
    if {"lifetime", "only"} & (old.qualifiers | new.qualifiers):
        return "conflict", "profile", 0.88
    return "conflict", "profile", 0.62


def _job_vs_school(old: Fact, new: Fact) -> tuple[str, str, float] | None:
    """A high-school student does not teach, nurse or practise law."""
    job, school = (old, new) if old.slot == "job" else (new, old)
    if school.value != "school" or not job.polarity or job.value in _GENERIC_JOBS or job.value == "retail":
        return None
    return "conflict", "profile", 0.75


def _school_pair(old: Fact, new: Fact) -> tuple[str, str, float]:
    return ("consistent", "profile", 0.0) if old.value == new.value else ("conflict", "profile", 0.8)


def _polarity_pair(old: Fact, new: Fact) -> tuple[str, str, float]:
    if old.value != new.value:
        return "consistent", "", 0.0
    return ("consistent", "profile", 0.0) if old.polarity == new.polarity else ("conflict", "negation", 0.9)


def _value_pair(kind: str, score: float):
    def check(old: Fact, new: Fact) -> tuple[str, str, float] | None:
        if old.polarity != new.polarity:
            return None
        if old.value == new.value:
            return "consistent", kind, 0.0
        if ":" in old.value and old.value.split(":")[0] != new.value.split(":")[0]:
            return None
        return "conflict", kind, score
    return check


def _instruction_pair(old: Fact, new: Fact) -> tuple[str, str, float]:
    if old.value == new.value and old.polarity == new.polarity:
        return "consistent", "instruction_reversal", 0.0
    return "conflict", "instruction_reversal", 0.9


def _favourite_pair(old: Fact, new: Fact) -> tuple[str, str, float]:
    if set(old.value.split()) & set(new.value.split()):
        return "consistent", "value", 0.0
    return "conflict", "value", 0.75


def _only_language(old: Fact, new: Fact) -> tuple[str, str, float] | None:
    only, spoken = (old, new) if old.slot == "speaks_only" else (new, old)
    language = spoken.slot.split(":", 1)[1]
    if not spoken.polarity or language == only.value:
        return None
    return "conflict", "profile", 0.85


def _budget_pair(old: Fact, new: Fact) -> tuple[str, str, float] | None:
    if old.value[0] != new.value[0]:
        return None
    cap, amount = float(old.value[1:]), float(new.value[1:])
    if amount > cap * 1.1:
        return "conflict", "value", 0.85
    return "consistent", "value", 0.0


def _same_budget(old: Fact, new: Fact) -> tuple[str, str, float] | None:
    return _budget_pair(old, new)


def _when_pair(old: Fact, new: Fact) -> tuple[str, str, float] | None:
    kind_a, value_a = old.value.split(":", 1)
    kind_b, value_b = new.value.split(":", 1)
    if kind_a != kind_b:
        return None
    if kind_a == "weekday":
        same = bool(set(value_a.split(",")) & set(value_b.split(",")))
    else:
        same = value_a == value_b
    return ("consistent", "value", 0.0) if same else ("conflict", "value", 0.85)


def _ratio_pair(threshold: float, score: float):
    """Numeric values that clash when one is more than ``threshold`` times the other."""
    def check(old: Fact, new: Fact) -> tuple[str, str, float] | None:
        try:
            a, b = float(old.value.lstrip("$\u20ac\u00a3")), float(new.value.lstrip("$\u20ac\u00a3"))
        except ValueError:
            return None
        if old.value[:1] != new.value[:1] and not (old.value[:1].isdigit() and new.value[:1].isdigit()):
            return None
        if min(a, b) <= 0:
            return None
        if max(a, b) / min(a, b) > threshold:
            return "conflict", "value", score
        return "consistent", "value", 0.0
    return check


def _size_pair(old: Fact, new: Fact) -> tuple[str, str, float] | None:
    systems = {q for q in old.qualifiers | new.qualifiers if q.startswith("system:")}
    regions = {w for q in systems for w in q[7:].split() if w in ("us", "uk", "eu")}
    if len(regions) > 1:
        return None
    if abs(float(old.value) - float(new.value)) >= 1:
        return "conflict", "value", 0.8
    return "consistent", "value", 0.0


def _org_pair(old: Fact, new: Fact) -> tuple[str, str, float]:
    if old.value == new.value or old.value in new.value or new.value in old.value:
        return "consistent", "name_place", 0.0
    score = 0.85 if "only" in old.qualifiers | new.qualifiers or old.slot == "employer" else 0.7
    return "conflict", "name_place", score


def _nationality_pair(old: Fact, new: Fact) -> tuple[str, str, float]:
    if old.value == new.value:
        return "consistent", "profile", 0.0
    return "conflict", "profile", 0.9 if "only" in old.qualifiers | new.qualifiers else 0.75


# Facts of two different families that are compared, and how; every other pair of facts is
# unrelated unless the two slots are equal. ``comparable`` reads the same table.
_ACROSS = {
    frozenset({"avoids", "consumes"}): _avoid_vs_use, frozenset({"avoids", "pet"}): _avoid_vs_use,
    frozenset({"closed", "visit_on"}): _closed_vs_visit,
    frozenset({"speaks_only", "speaks"}): _only_language,
    frozenset({"budget", "spend"}): _budget_then_spend,
    frozenset({"job", "school"}): _job_vs_school,
}
_PARTNERS: dict[str, frozenset[str]] = {
    family: frozenset(other for pair in _ACROSS if family in pair for other in pair - {family})
    for pair in _ACROSS for family in pair}

_SAME_SLOT = {
    "age": _age, "kids": _count, "siblings": _count, "brothers": _count, "sisters": _count, "pet": _count,
    "has": _possession_pair, "did": _count, "marital": _marital_pair, "name": _name_pair,
    "residence": _place_pair, "origin": _place_pair,
    "visited": _place_pair, "avoids": _avoids_pair, "consumes": _consumes_pair, "diet": _diet_pair,
    "job": _job_pair, "school": _school_pair, "speaks": _polarity_pair,
    "speaks_only": _value_pair("profile", 0.85), "native_language": _value_pair("profile", 0.85),
    "nationality": _nationality_pair, "instr": _instruction_pair, "when": _when_pair,
    "party_size": _value_pair("value", 0.8), "ago": _ratio_pair(2.5, 0.8), "lasting": _ratio_pair(3.0, 0.8),
    "term": _value_pair("value", 0.8), "income": _ratio_pair(1.15, 0.8), "area": _ratio_pair(1.2, 0.75),
    "size": _size_pair, "handedness": _value_pair("profile", 0.9), "housing": _value_pair("profile", 0.8),
    "employer": _org_pair, "alma_mater": _org_pair, "spouse": _value_pair("profile", 0.8),
    "carbs": _value_pair("profile", 0.85),
    "budget": _same_budget, "fav": _favourite_pair,
}
