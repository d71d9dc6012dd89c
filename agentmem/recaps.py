"""Does the user ask about the whole conversation ("Can you summarise everything we discussed?")?

The prune stage keeps the older turns a question needs. A recap needs all of them: scored
against "summarise everything we discussed so far", a long chat's older turns all look
equally (ir)relevant, and the share the budget keeps (a sixth to a third of the chat under
`default`) is what the summary would then cover (README, Benchmarks: Stop 65). So a request
to summarise, recap or write up the conversation itself leaves the history whole; the
budget stage still holds it to the model's window.

Both halves must be there: an act of summing up ("summarise", "recap", "sum up", "write up",
"go over", "overview", "notes", "tl;dr") and the conversation as its object ("our
conversation", "this chat", "everything we discussed", "so far", "all of the above"). A
question about something said in the conversation ("What did Caroline and Melanie discuss
about the adoption?") names neither act, and is left to the stage. A cheap, precise rule: a
regular expression per call, on the user's newest message only.
"""

from __future__ import annotations

import re

_ACT = re.compile(
    r"\b(?:summari[sz]e|summari[sz]ing|summary|recap|recapitulate|sum (?:it |this |that |things )?up|"
    r"write (?:it |this |that |everything )?up|go (?:back )?over|overview|tl;?dr|notes|"
    r"condense|digest)\b", re.IGNORECASE)
_WHOLE = re.compile(
    r"\b(?:(?:our|this|the|whole|entire|full) (?:whole |entire |full )?"
    r"(?:conversation|chat|discussion|thread|session|exchange)s?|"
    r"so far|up to (?:now|here)|(?:everything|all|what) (?:that )?we(?:'ve| have)? "
    r"(?:discussed|talked about|covered|said|decided|went over|agreed)|"
    r"(?:everything|all) (?:of )?(?:the )?above|everything (?:so far|until now))\b", re.IGNORECASE)


def asks_for_recap(text: str) -> bool:
    """Whether ``text`` (the user's newest message) asks to sum up the conversation itself."""
    return bool(_ACT.search(text)) and bool(_WHOLE.search(text))
