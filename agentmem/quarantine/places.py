"""Places: resolve a place name and decide whether two places can both be true.

"I've never been to Japan" and "when I was in Osaka last year" only clash if you know
Osaka is in Japan; "I live in Canada" and "my flat in Madrid" only if you know Madrid is
not. That is world knowledge a rule layer can hold cheaply: a gazetteer of countries, US
states and cities (GeoNames data, CC BY 4.0: ``gazetteer.py``), loaded lazily once per
process (~34k cities of 15,000+ people).

Resolution is deliberately conservative: common English words that are also towns
("nice", "reading", "bath"), small towns, and names shared by comparable cities in several
countries resolve to nothing, so a rule never fires on a guess.
"""

from __future__ import annotations

import math
import unicodedata
from dataclasses import dataclass
from functools import lru_cache

from agentmem.quarantine import gazetteer


@dataclass(frozen=True)
class Place:
    """A resolved place. ``kind`` is country, state (US) or city."""

    name: str
    kind: str
    country: str  # ISO-2
    state: str = ""  # US state code for US cities and states
    lat: float = 0.0
    lon: float = 0.0
    population: int = 0


# Aliases people write for countries; GeoNames has only the official short names.
_COUNTRY_ALIASES = {
    "usa": "US", "us": "US", "u.s.": "US", "u.s.a.": "US", "america": "US", "the us": "US", "the usa": "US",
    "the states": "US", "united states of america": "US", "the united states": "US", "uk": "GB", "u.k.": "GB",
    "the uk": "GB", "britain": "GB", "great britain": "GB", "england": "GB", "scotland": "GB", "wales": "GB",
    "northern ireland": "GB", "holland": "NL", "the netherlands": "NL", "netherlands": "NL",
    "czech republic": "CZ", "korea": "KR", "south korea": "KR", "uae": "AE", "the uae": "AE",
    "the philippines": "PH", "russia": "RU", "vietnam": "VN", "ivory coast": "CI",
}
_STATE_ALIASES = {"cali": "CA", "socal": "CA", "norcal": "CA", "jersey shore": "NJ", "upstate new york": "NY"}
# Town names that are everyday words (or too ambiguous in chat) never resolve as cities.
_CITY_STOPWORDS = frozenset("""
nice bath reading mobile split orange florence victoria eagle darwin pueblo plymouth hope lincoln
ontario march may june august university college school home work town city country village beach
church hospital bed love centre center downtown here there union page aurora independence liberty
concord york dover jackson clinton franklin madison marion salem troy chester kent essex surrey st
""".split())
_AMBIGUOUS_NAMES = frozenset({"georgia", "jersey", "guinea", "congo", "washington", "victoria", "granada",
                              "cordoba", "valencia", "santiago", "san jose", "hyderabad", "kingston",
                              "newcastle", "perth", "cambridge", "birmingham", "portland", "richmond",
                              "springfield", "columbus", "arlington", "alexandria"})
_LOWERCASE_MIN_POPULATION = 250000  # lowercase text (persona chat): only well-known cities


def fold(text: str) -> str:
    """Lowercase ASCII fold: 'Zürich' -> 'zurich'."""
    decomposed = unicodedata.normalize("NFKD", text)
    return "".join(c for c in decomposed if not unicodedata.combining(c)).lower().strip()


@lru_cache(maxsize=1)
def _gazetteer() -> tuple[dict[str, Place], dict[str, list[Place]]]:
    """(countries and US states by name, cities by name); empty when the data is missing."""
    regions: dict[str, Place] = {}
    cities: dict[str, list[Place]] = {}
    for kind, name, country, state, lat, lon, population in gazetteer.rows():
        if kind == "city":
            cities.setdefault(fold(name), []).append(
                Place(name, "city", country, state, float(lat), float(lon), int(population)))
        else:
            regions[fold(name)] = Place(name, kind, country, state)
    if regions:
        for alias, code in _COUNTRY_ALIASES.items():
            regions[alias] = Place(alias, "country", code)
        for alias, code in _STATE_ALIASES.items():
            regions[alias] = Place(alias, "state", "US", code)
    return regions, cities


def resolve(name: str, proper: bool = True) -> Place | None:
    """The place a name most likely means, or None when unknown or ambiguous.

    ``proper`` says the writer capitalised it (or the text is not lowercase chat); without
    it only countries, US states and big cities resolve.
    """
    key = fold(name).strip(" .,!?")
    if key.startswith("the ") and key not in _COUNTRY_ALIASES:
        key = key[4:]
    if not key or key in _AMBIGUOUS_NAMES:
        return None
    regions, cities = _gazetteer()
    if key in regions:
        return regions[key]
    if key in ("nyc", "new york city"):
        key = "new york city"
        return Place("New York City", "city", "US", "NY", 40.71427, -74.00597, 8175133)
    if (key in _CITY_STOPWORDS and not proper) or key not in cities:
        return None
    candidates = sorted(cities[key], key=lambda p: -p.population)
    best = candidates[0]
    if len(candidates) > 1 and candidates[1].population * 2.5 > best.population:
        return None  # two comparable cities share the name
    if not proper and best.population < _LOWERCASE_MIN_POPULATION:
        return None
    return best


def resolve_prefix(words: list[str], proper_flags: list[bool]) -> tuple[Place | None, int]:
    """Longest resolvable prefix (up to four words) of a word list: (place, words used)."""
    for size in range(min(4, len(words)), 0, -1):
        place = resolve(" ".join(words[:size]), all(proper_flags[:size]) if proper_flags else True)
        if place is not None:
            return place, size
    return None, 0


def distance_km(a: Place, b: Place) -> float:
    """Great-circle distance between two cities."""
    lat1, lon1, lat2, lon2 = map(math.radians, (a.lat, a.lon, b.lat, b.lon))
    h = math.sin((lat2 - lat1) / 2) ** 2 + math.cos(lat1) * math.cos(lat2) * math.sin((lon2 - lon1) / 2) ** 2
    return 6371.0 * 2 * math.asin(math.sqrt(h))


def contains(outer: Place, inner: Place) -> bool:
    """True when ``inner`` lies in ``outer`` (or they are the same place)."""
    if outer.kind == "country":
        return inner.country == outer.country
    if outer.kind == "state":
        return inner.country == "US" and inner.state == outer.state
    if inner.kind == "city":
        return distance_km(outer, inner) < 35.0  # same metro area: Brooklyn is in New York
    return False


def compatible(a: Place, b: Place) -> bool:
    """Can someone be in both at once (one contains the other, or the same metro)?"""
    return contains(a, b) or contains(b, a)
