"""Where a conversation's sittings begin: a turn that opens with a date stamp.

Why: a long chat is a series of sittings ("[1:56 pm on 8 May, 2023] Hey Mel!"), and a question
about one of them names it by something said anywhere in it ("the event at Forest Hills"),
not by the turn that holds the answer. Apps that keep a chat across days commonly write the
sitting's date at its start so the model knows when things were said; that stamp is the one
boundary that is cheap and exact. Topic segmentation of the embeddings (TextTiling) was tried
first and finds sitting boundaries with a precision of 0.15-0.36 on the SGD chat dev set (README,
Benchmarks, Stop 61), so no boundary is guessed: without stamps a conversation is one sitting.
"""

from __future__ import annotations

import re

from agentmem.dates import DATE_RE

# A date inside the stamp: "8 May, 2023", "May 8", "2023-05-08", "08/05/2023".
_DATE = re.compile(DATE_RE + r"|\b\d{4}-\d{1,2}-\d{1,2}|\b\d{1,2}/\d{1,2}/\d{2,4}", re.IGNORECASE)
# The stamp: a bracketed or parenthesised opening of at most 80 characters.
_STAMP = re.compile(r"\s*[\[(]([^\[\]()\n]{4,80})[\])]")


def opens_with_date(text: str) -> bool:
    """Does the turn open with a date stamp ("[1:56 pm on 8 May, 2023] ...", "(2023-05-08) ...")?"""
    stamp = _STAMP.match(text)
    return bool(stamp and _DATE.search(stamp.group(1)))
