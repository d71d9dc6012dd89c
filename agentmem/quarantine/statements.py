"""Statements: every sentence of a session with its source and how far it is trusted.

Trust decides who may assert and who may confirm. The user, the system prompt and trusted
tools are authorities: their sentences can support a claim, and user text is never removed
as poison. The assistant and untrusted tools (web search, scraping, anything the policy's
patterns name) make claims that need support. A trusted tool that relays third-party text
(a forwarded e-mail, a quoted forum post) relays a claim, not a fact.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass

import numpy as np

from agentmem.lexical import terms

# Lines that introduce someone else's words inside a trusted tool's output.
_THIRD_PARTY = re.compile(
    r"(forwarded message|^from:|\bwrote:|\bposted by\b|\bforum\b|\breddit\b|\bblog\b|"
    r"\bcomment(?:s|ed)?\b|\breview(?:er)?s?\b|\bscraped\b|\bsnippet\b|\bquote[sd]?\b|"
    r"\bcustomer note\b|\bsays:|\bclaims?\b|\"source\":\s*\"(?:web|forum|email|user))",
    re.IGNORECASE | re.MULTILINE)

TRUST_RANK = {"system": 4, "user": 3, "tool": 2, "assistant": 1, "untrusted": 0}


def is_untrusted_tool(source: str, patterns: list[str]) -> bool:
    name = source.split(":", 1)[1] if source.startswith("tool:") else ""
    return source.startswith("tool:") and any(fnmatch.fnmatch(name.lower(), p.lower()) for p in patterns)


def trust_class(source: str, patterns: list[str]) -> str:
    """system | user | tool | assistant | untrusted."""
    if source.startswith("tool:"):
        return "untrusted" if is_untrusted_tool(source, patterns) else "tool"
    return source if source in {"system", "user", "assistant"} else "assistant"


@dataclass
class Statements:
    """Row-aligned views of a corpus: position, span, text, vector, source, trust per sentence."""

    position: np.ndarray
    spans: list[tuple[int, int]]
    texts: list[str]
    vectors: np.ndarray
    sources: list[str]
    trust: list[str]
    relayed: np.ndarray  # a trusted tool's sentence that carries third-party text

    @property
    def size(self) -> int:
        return len(self.texts)


def statements_of(corpus, history: list[dict], upto: int, patterns: list[str]) -> Statements:
    """The statements of history[:upto], from a corpus that covers at least that much."""
    from agentmem.messages import text_of

    rows = np.flatnonzero(corpus.position < upto)
    sources_by_position = corpus.sources[:upto]  # computed once per turn when the corpus grew
    texts, sources, trust, relayed = [], [], [], []
    third_party_from: dict[int, int] = {}
    for position in range(upto):
        source = sources_by_position[position]
        if trust_class(source, patterns) == "tool":
            match = _THIRD_PARTY.search(text_of(history[position]))
            if match:
                third_party_from[position] = match.start()
    for row in rows:
        position = int(corpus.position[row])
        a, b = corpus.spans[row]
        text = text_of(history[position])[a:b]
        source = sources_by_position[position]
        texts.append(text)
        sources.append(source)
        trust.append(trust_class(source, patterns))
        start = third_party_from.get(position)
        relayed.append(start is not None and b > start)
    return Statements(corpus.position[rows], [corpus.spans[r] for r in rows], texts,
                      corpus.vectors[rows], sources, trust, np.asarray(relayed, dtype=bool))


def canonical_claim(text: str) -> str:
    """Lower-cased content words in order: the claim's identity across rephrasings' noise."""
    return " ".join(terms(text))


def is_claim(text: str) -> bool:
    """Assertions worth tracking: not questions, not greetings or one-word acknowledgements."""
    stripped = text.strip()
    return not stripped.endswith("?") and len(terms(stripped)) >= 3
