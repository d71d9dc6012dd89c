"""Context poisoning: a claim the assistant (or an untrusted source) keeps repeating, that no
authority ever supported.

An unsupported claim made once is a hallucination; made again and again, it feeds on itself,
because each repetition in the context makes the next one likelier. Detection works on
CLAUSES: a long assistant sentence bundles several claims ("your order shipped on May 3 with
DHL, and it will arrive by Friday"), of which one may come from a tool and the other be
invented. What is withheld is still a whole sentence (a corpus row); clauses decide which.

1. Claims. Every sentence of the assistant, of an untrusted tool, or of third-party text a
   trusted tool relays is cut into clauses at punctuation and connectives (JSON falls apart
   into its string values; an untrusted tool's JSON frame, the keys and short fields around
   its records, is no claim: a search API's keys and URL pattern recur in every answer). A
   clause keeps its *details*: content words folded to a stem,
   numbers as values ("1,940", "$1.28M"), dates and times as tokens whatever their spelling
   ("March 2" = "2024-03-02", "3 pm" = "15:00"), generic conversation words dropped.
2. Support, per clause. An authority unit (a trusted tool's whole result; a user or
   system-prompt sentence with its neighbour) supports a clause when it states most of its
   details *together* (strong), or states every number, date and name and half of the rest,
   or answers a tool call that asked about the rest (weak). A clause that reads like an
   authority sentence (cosine above ``support_similarity``) and repeats its values is
   supported too. "The pass covers the Nozomi" is not supported by a user who mentions a
   pass and a timetable that lists a Nozomi. The user supports only what they said before
   the claim first appeared: an echo confirms nothing.
3. Candidate groups. Clauses without strong support are joined across turns by meaning
   (cosine above ``recurrence_similarity``), by related meaning and a shared specific word,
   or by two shared specific words.
4. Claims that recur. Within a group, a clause's *gap* is what the authority unit closest
   to it does not state; gap words in two turns are the claim's anchors. Members chain when
   they share an anchor and a related meaning, or say the same thing in other words (with the
   same amounts). A chain over ``min_occurrences`` turns, made at least twice without even
   weak support, is poison, if the assistant (or third-party text a trusted tool relays)
   made it in two of those turns at least, or an untrusted source said the same statement
   each time (cosine ``SAME_CLAIM_SIMILARITY``): a search tool's results about one topic
   share its names and words from result to result ("the Jews constituted ..." in four
   passages about Warsaw, each with its own year and share), which is the source's subject,
   not a claim feeding on itself; the assistant repeating one of them is (every poisoned
   claim of the poison dev sets is the assistant's, twice or more). The same call (name and
   arguments) returning the same clause again counts once: an agent re-running a search
   reads one page twice, the page does not say it twice. A mostly supported clause joins it
   only through a detail the chain states most times, never when it gives other, supported
   amounts; clauses elsewhere
   that repeat the chain's novel details (said by no authority) join it too. A chain of more
   than ``LOOSE_CHAIN_TURNS`` turns with no detail said in most of them is links of links
   across a chatty conversation, not one claim.
5. Whose claim. With no tool in the conversation, nothing but the speaker can vouch for the
   speaker's own life: a self-description ("my kids love the beach"; not "I checked: your
   refund went through") is not a claim about the world. Between peers (no tool, no system
   prompt: two people chatting, a persona chat) a claim must also repeat a name, number or
   date of its own; greetings' names and message time stamps are not details. A general
   assistant (no tool; a system prompt that gives a role but no facts, no number but dates
   and times, or no system prompt in a chat that does not read as people talking: no
   date-stamped sittings, nobody named) answers from its own knowledge, which nothing in the
   session could support, and its answers recur with the topic the user asks about: its
   statements are not claims there unless ``poison_open_domain`` asks for them (read as
   claims, 92% of its recurring answers were withheld, and no rule over their words told
   them from an invented fact).

Cost: term sets, clause splits and clause vectors are cached by text (a clause is embedded
once per process; a clause that is its whole sentence reuses the stored sentence vector), and
what a unit states by its words; repeated authority statements are one unit; support uses an
index from details to units (arrays: a long session's common words hold thousands) and
skips user units later than the earliest that already backs the clause; grouping is one
clause-by-clause similarity matrix over the window, carried over with its close pairs from the
previous detection for the clauses the two windows share (``cosines``). What a unit states
of a clause is cached by content (the next reply re-checks almost the same pairs), and the
session-wide tables (the units' index, words' turn counts) are extended by each reply's new
rows, not rebuilt (LoCoMo text, 600+ turns: ~28 -> ~15 ms a detection). The claims are the window's, the
authorities the whole session's (a fact the user gave at turn 5 still backs turn 1,900): on
a 2,000-turn session (window 200) one detection takes ~60 ms on a quiet 2-core box (211 ms
before the index arrays and the skips), ~11 ms at 200 turns.
"""

from agentmem.quarantine.poison.clauses import (
           Clause,
           clauses_of,
           entities_of,
           is_self_description,
           split_clauses,
           without_address,
)
from agentmem.quarantine.poison.details import detail_terms
from agentmem.quarantine.poison.detect import (
           ClaimScan,
           PoisonFinding,
           detect_poison,
           scan_claims,
           unembedded_clauses,
)
from agentmem.quarantine.poison.recurrence import claim_chains, group_clauses
from agentmem.quarantine.poison.support import authority_units, support_level, unsupported_details
from agentmem.quarantine.poison.vectors import remember_clause_vectors

__all__ = ["ClaimScan", "Clause", "PoisonFinding", "authority_units", "claim_chains", "clauses_of",
           "detail_terms", "detect_poison", "entities_of", "group_clauses", "is_self_description",
           "remember_clause_vectors", "scan_claims", "split_clauses", "support_level",
           "unembedded_clauses", "unsupported_details", "without_address"]
