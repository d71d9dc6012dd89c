"""Numbers as chat writes them: digits, words ("thirty-four"), counts ("a couple of")."""

from __future__ import annotations

import re


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
