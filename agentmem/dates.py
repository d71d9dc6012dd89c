"""Month names and the written day-and-month date ("8 May", "May 8th", "the 3rd of June"), as
regular-expression source: one vocabulary for the clash rules' date slot
(``agentmem.quarantine.slots``) and the sitting stamps of long chats (``agentmem.episodes``).

Lowercase: compile with ``re.IGNORECASE`` or match lowercased text. ``DATE_RE``'s groups: the
month and day of "May 8", then the day and month of "8 May".
"""

from __future__ import annotations

MONTHS = ("january february march april may june july august september october november "
          "december").split()
MONTH_ABBR = {m[:3]: m for m in MONTHS} | {"sept": "september"}
MONTH_RE = r"(" + "|".join(MONTHS + sorted(MONTH_ABBR)) + r")\.?"
DATE_RE = (r"(?:" + MONTH_RE + r" (\d{1,2})(?:st|nd|rd|th)?\b|(?:the )?(\d{1,2})(?:st|nd|rd|th)? "
           r"(?:of )?" + MONTH_RE + r"\b)")
