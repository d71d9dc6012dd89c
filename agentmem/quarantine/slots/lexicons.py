"""The small curated lexicons the extractors match: food and drink items, diets,
allergens, relations, pets, occupations, languages, demonyms, months and weekdays."""

from __future__ import annotations

import re

from agentmem.dates import DATE_RE, MONTH_ABBR, MONTH_RE, MONTHS
from agentmem.quarantine.slots.qualifiers import _WEEKDAYS


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
           "eggs benedict, boiled eggs, mayo, mayonnaise, aioli, hollandaise, carbonara, eggnog, egg salad, "
           "deviled eggs, french toast, shakshuka")
_add_items("nuts", "nuts, almonds, almond, walnuts, walnut, cashews, cashew, pecans, pecan pie, pistachios, "
           "hazelnuts, macadamia, nutella, marzipan, praline, pesto, almond croissant, pine nuts, trail mix")
_add_items("peanuts nuts", "peanut, peanuts, peanut butter, satay, pad thai, peanut butter cookies, reese's")
_add_items("gluten", "bread, pasta, spaghetti, pizza, bagel, bagels, croissant, croissants, sourdough, "
           "wheat, barley, rye, couscous, baguette, noodles, ramen, lasagna, lasagne, pancakes, waffles, "
           "donuts, doughnuts, cake, muffins, cookies, crackers, toast, sandwich, sandwiches, burrito, "
           "dumplings, seitan, seitan tacos")
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
_add_items("caffeine", "red bull, red bulls, energy drink, energy drinks, monster energy, pre-workout, espresso shot, "
           "espresso shots, matcha, black tea, green tea, yerba mate, cola, diet coke, coke, mountain dew, "
           "iced tea, chai")
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
               r"whip up|wrap|wrapped|top|topped|put|puts|putting|stuff|stuffed|pack|packed|slather|slathered|spread|"
               r"stir in|add|added)")
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
_MONTHS, _MONTH_ABBR, _MONTH_RE, _DATE_RE = MONTHS, MONTH_ABBR, MONTH_RE, DATE_RE  # agentmem.dates
_TIME_RE = r"(\d{1,2})(?::(\d{2}))? ?(am|pm|a\.m\.|p\.m\.)?"
_WEEKDAY_RE = r"(" + "|".join(_WEEKDAYS) + r")s?\b"
