"""Names in edited English prose, and the sentences that define them: the link a multi-hop
question's second hop hangs on.

A bridge question ("The author of Where Rainbows End was born in what city?") is answered by
two paragraphs: the first names the bridge ("... is Irish writer Cecelia Ahern's second
novel"), the second is about it and, as encyclopedia text does, opens by defining it ("Cecelia
Ahern (born 30 September 1981) is an Irish novelist"). That second hop shares no words with the
question, so neither the pruner, the query cosine nor BM25 ranks it; a name that the passage's
best sentences mention, and a sentence that opens by defining that name, is the link
(``agentmem.models.keep_rule``'s ``name_bridge``). Capitalisation is the only cue: cheap (a
regular expression per sentence), and silent on lower-case chat.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from agentmem.lexical import STOPWORDS

Name = frozenset[str]  # a name's content words, lower-cased

_WORD = re.compile(r"[^\W_][\w'’.\-]*")
# lower-case words that may sit inside a name ("Bank of England", "Ludwig van Beethoven")
_JOINERS = frozenset({"of", "the", "de", "and", "&", "von", "van", "la", "le", "du", "der", "di",
                      "da", "del"})
# a sentence that opens by defining its subject: "X is/was ...", "X (born ...) ..."
_DEFINES = re.compile(r"^[\"'“‘]?(?:The )?[A-Z0-9][^.;:]{0,80}?"
                      r"(?: \(| is | was | are | were | has been | had been )")


def words(text: str) -> list[str]:
    """The text's words, a trailing full stop dropped ("Inc." -> "Inc")."""
    return [word.rstrip(".") for word in _WORD.findall(text)]


def mentioned_names(text: str) -> list[Name]:
    """Each run of capitalised words (joined by "of", "van", ...) as its content words; a
    sentence's first word counts only if it is no stopword ("The", "In", "He" open sentences,
    not names)."""
    tokens = words(text)
    out: list[Name] = []
    run: list[str] = []
    for position, word in enumerate(tokens):
        lower = word.lower()
        capitalised = word[:1].isupper() and not (position == 0 and lower in STOPWORDS)
        joins = bool(run) and lower in _JOINERS and position + 1 < len(tokens) \
            and tokens[position + 1][:1].isupper()
        if capitalised or joins:
            run.append(lower)
        else:
            _close(run, out)
            run = []
    _close(run, out)
    return out


def defined_name(sentence: str) -> Name:
    """The name a sentence opens by defining ("Mother's Milk is the fourth studio album ..."
    -> {"mother's", "milk"}), or an empty set when it does not open like a definition."""
    if not _DEFINES.match(sentence):
        return frozenset()
    tokens = words(sentence)
    if tokens and tokens[0].lower() == "the":
        tokens = tokens[1:]
    run: list[str] = []
    for word in tokens:
        if word[:1].isupper() or word[:1].isdigit() or (run and word.lower() in _JOINERS):
            run.append(word.lower())
        else:
            break
    return _content(run)


def name_links(question: str, sentences: Sequence[str], anchors: Iterable[int],
               among: Iterable[int]) -> list[int]:
    """The sentences (of ``among``, anchors excepted) that define a name the ``anchors``
    mention and the question does not: the second hop's opening sentence. Names the question
    already gives are left out, since the question's own words find their sentences."""
    asked = {word.lower() for word in words(question)}
    anchors = set(anchors)
    bridges = {name - asked for anchor in anchors for name in mentioned_names(sentences[anchor])}
    bridges.discard(frozenset())
    if not bridges:
        return []
    out = []
    for index in among:
        if index in anchors:
            continue
        defined = defined_name(sentences[index])
        if defined and any(defined & bridge for bridge in bridges):
            out.append(index)
    return out


def _content(run: Sequence[str]) -> Name:
    return frozenset(word for word in run if word not in _JOINERS and word not in STOPWORDS)


def _close(run: list[str], out: list[Name]) -> None:
    name = _content(run)
    if name:
        out.append(name)
