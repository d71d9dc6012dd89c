"""Typed facts and the conflicts between them: the precise half of clash detection.

An NLI model reads "I'm 34 ..." / "as a 52-year-old ..." as two loosely related sentences;
a person reads them as two values of one slot (age) of one subject (the speaker). This
module does what the person does, for the slots chat users actually state about themselves
(age, home, diet, allergies, family, pets, job, languages, standing instructions, dates and
amounts), with small curated lexicons instead of a model:

* :func:`extract_facts` turns a text into :class:`Fact` records: slot, normalised value,
  polarity, subject (the speaker, another person, generic) and qualifiers that change what
  the fact commits to (hypothetical, past / "used to", time-bounded, habitual, one-off
  occasion, future, announced update, newly acquired).
* :func:`conflict` compares the facts of an older and a newer text and returns the most
  confident :class:`Conflict`, after the guards: another subject, a hypothetical, a
  past or time-bounded state, a habit versus an exception, an announced update.
* :func:`relations` exposes every comparable pair with its status (conflict, consistent,
  guarded), which the cascade uses to skip the NLI backstop when a guard has already
  explained the pair.

The package's modules, in the order a text goes through them: ``numbers``, ``qualifiers`` and
``lexicons`` (what the patterns match), ``context`` (a clause as the extractors read it),
the extractors by kind of fact (``people``, ``food``, ``work``, ``instructions``, ``values``),
``extract`` (all of them over a text, cached) and ``conflicts`` (comparing the facts). Names
with a leading underscore are private to the package, shared between its modules.

Precision is the design goal: every pattern asks for the speaker as subject and a concrete
value, and anything unusual falls through to the NLI layer rather than firing.
"""

from agentmem.quarantine.slots.conflicts import Relation, comparable, conflict, display, relations
from agentmem.quarantine.slots.context import clause_guard
from agentmem.quarantine.slots.extract import extract_facts
from agentmem.quarantine.slots.facts import Conflict, Fact
from agentmem.quarantine.slots.numbers import parse_number
from agentmem.quarantine.slots.qualifiers import announces_update

__all__ = ["Conflict", "Fact", "Relation", "announces_update", "clause_guard", "comparable", "conflict",
           "display", "extract_facts", "parse_number", "relations"]
