"""JSON tool outputs as units: any subset kept still parses, everything else is verbatim."""

from __future__ import annotations

import json
import random

from agentmem.structured import json_layout, message_units, parses_as_json
from agentmem.text import split_sentences

PRODUCTS = [{"id": i, "name": f"Product {i}", "category": ["shoes", "hats"][i % 2],
             "price_usd": 10 + i} for i in range(6)]
PAGE = ("The museum opened in 1902. Its first director was Anna Berg. The west wing burned in "
        "1951 and was rebuilt. Today it holds \"The Harbour\", a painting by Kees Vos. Entry is "
        "free on Sundays. A cafe on the ground floor serves lunch until three in the afternoon. "
        "Guided tours start at noon. The shop sells prints.")


def test_records_of_an_array_are_units_in_compact_and_pretty_json():
    for indent in (None, 2):
        text = json.dumps({"total": 6, "results": PRODUCTS}, indent=indent)
        layout = json_layout(text)
        assert layout is not None and layout.kinds == ("frame",) + ("record",) * 6
        frame = text[layout.spans[0].start:layout.spans[0].end]
        assert " ".join(frame.split()) == '"total": 6, "results"'  # around the records, trimmed
        assert [json.loads(text[a:b]) for a, b in layout.spans[1:]] == PRODUCTS
        kept = json.loads(layout.keep([False] + [i % 2 == 1 for i in range(6)]))
        assert kept == {"total": 6, "results": [p for p in PRODUCTS if p["category"] == "hats"]}
        assert json.loads(layout.keep([False] * 7)) == {"total": 6, "results": []}  # frame stays
        assert layout.keep([True] * 7) == text  # byte for byte
        reading = layout.reading(1)  # one line, whitespace collapsed
        assert "\n" not in reading and json.loads(reading) == PRODUCTS[0]


def test_a_long_string_gives_its_sentences_and_a_large_record_is_walked_into():
    page = json.dumps({"url": "https://example.org/museum", "content": PAGE})
    layout = json_layout(page)
    assert layout is not None and layout.kinds == ("frame",) + ("sentence",) * 8
    assert layout.reading(0) == '"url": "https://example.org/museum", "content": "'
    assert layout.reading(4) == 'Today it holds "The Harbour", a painting by Kees Vos.'  # unescaped
    kept = json.loads(layout.keep([False, False, True, False, True] + [False] * 4))
    assert kept == {"url": "https://example.org/museum", "content": "Its first director was Anna "
                    "Berg. Today it holds \"The Harbour\", a painting by Kees Vos."}
    hits = json.dumps({"results": [{"title": "Museum", "snippet": f"{PAGE} {PAGE}"},
                                   {"title": "Cafe", "snippet": "Open daily."}]})
    layout = json_layout(hits)
    assert layout.kinds == ("frame",) + ("sentence",) * 16 + ("record",)
    assert hits[layout.spans[0].start:layout.spans[0].end] == '"results": [{"title": "Museum", "snippet": "'
    only_first = json.loads(layout.keep([i == 2 for i in range(18)]))
    assert only_first == {"results": [{"title": "Museum", "snippet": "Its first director was Anna Berg."}]}
    # a hit is kept while one of its sentences is, with its title; a dropped hit goes whole


def test_anything_else_has_no_layout_and_only_tool_json_is_split_by_units():
    for text in ("Plain prose. Two sentences.", "[1]", '{"a": 1}', "[ ]", '{"a": [1, 2]} tail',
                 '{"a": [1, 2', "42", ""):
        assert json_layout(text) is None
    assert parses_as_json('{"a": 1}') and not parses_as_json("[1, 2") and not parses_as_json("12")
    nested = "[" * 5000 + "]" * 5000  # a hostile tool output: past any decoder's depth
    assert json_layout(nested) is None and not parses_as_json(nested)
    assert message_units(nested, "tool") == split_sentences(nested)  # read as text, no crash
    text = json.dumps(PRODUCTS)
    assert [tuple(s) for s in message_units(text, "tool")] == [tuple(u) for u in json_layout(text).spans]
    assert message_units(text, "user") == split_sentences(text)  # a paste is read as written


def test_random_json_any_subset_kept_parses_and_keeps_its_units_verbatim():
    rng = random.Random(7)
    words = ["The", "cat", "sat.", "It", "was", "happy!", "Why?", '"Quoted"', "é", "a\\b",
             "line\nbreak.", "Next", "one", "Mr.", "Smith", "3.5", "kg."]

    def string(long: bool) -> str:
        return " ".join(rng.choice(words) for _ in range(rng.randint(40, 90) if long else 3))

    def value(depth: int):
        pick = rng.random()
        if depth > 3 or pick < 0.3:
            return rng.choice([1, 2.5, None, True, string(False), string(True)])
        if pick < 0.65:
            return [value(depth + 1) for _ in range(rng.randint(0, 6))]
        return {f"k{i}": value(depth + 1) for i in range(rng.randint(0, 5))}

    laid_out = 0
    for _ in range(600):
        data = {"results": value(0)}
        text = json.dumps(data, indent=rng.choice([None, 2]), ensure_ascii=rng.random() < 0.5)
        layout = json_layout(text, record_characters=rng.choice([60, 600]),
                             long_string=rng.choice([60, 300]))
        if layout is None:
            continue
        laid_out += 1
        assert layout.keep([True] * len(layout.spans)) == text
        frames = [text[a:b] for (a, b), kind in zip(layout.spans, layout.kinds) if kind == "frame"]
        for _ in range(4):
            keep = [rng.random() < 0.5 for _ in layout.spans]
            out = layout.keep(keep)
            json.loads(out)  # parses, whatever was dropped
            for (a, b), kept, kind in zip(layout.spans, keep, layout.kinds):
                assert not kept or kind == "frame" or text[a:b] in out  # a kept unit, verbatim
        assert all(frame in layout.keep([True] * len(layout.spans)) for frame in frames)
        assert json.loads(layout.keep([False] * len(layout.spans))).keys() == {"results"}
    assert laid_out > 300

