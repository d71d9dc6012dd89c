"""Context clash: a statement that contradicts an earlier one from the same source.

A cascade, cheapest and most precise first:
1. **Rules** (``quarantine.rules``): typed slot/value conflicts (ages, amounts, dates, names,
   places, diet, allergies, family, standing instructions...) with guards for updates that
   announce themselves, other people, hypotheticals and time-qualified statements. Claims
   inside questions and subordinate clauses count ("as a 52-year-old, should I...?"). Every
   earlier statement of the same source is checked: a rule costs microseconds.
2. **NLI backstop**: where the rules are silent (and no guard explained the pair), the most
   similar earlier statements (cosine above ``clash_similarity``) go to the NLI cross-encoder,
   but for pairs it is known to misread (``_PairFilter``: a task assistant restating its tools,
   counters), and only a high contradiction probability makes a clash. The same model in int8 screens
   the pairs first (``nli_screen``): at a third of the cost it lets go the ~90% of chat pairs
   it scores low, and the float model decides the rest, so decisions are the float model's.
3. **Judge** (optional, ``judge_model``): NLI candidates above ``judge_threshold`` are asked of
   an LLM through litellm, after the reply (``quarantine.judge``); its verdict replaces NLI's.

Resolution is the policy's: the newer statement wins by default (people change their minds,
facts get updated), or the more trusted source wins, or both stay with a short factual note.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from agentmem.models.runtime import pause_point
from agentmem.quarantine.rules import RuleVerdict, rule_clash, rule_silent_ok, time_qualified
from agentmem.quarantine.slots import announces_update, comparable, extract_facts
from agentmem.quarantine.statements import (TRUST_RANK, Statements, is_claim, only_asks,
                                            presupposes_about_self, speaks_of_self)

MAX_RULE_CANDIDATES = 400  # earlier statements of the source the rules look at, newest first
# Pairs per NLI forward pass. A reply's ~10 pairs in one batch are padded to the longest: in
# batches of 4 (sorted by length) a pair costs the float model 4.6 ms instead of 5.5 (LoCoMo
# text, one core). The int8 screen scores pairs one at a time whatever this says.
NLI_BATCH = 4


@dataclass
class Clash:
    newer: int  # statement rows
    older: int
    probability: float  # the deciding layer's confidence that (older, newer) contradict
    detector: str = "nli"  # "rule:<kind>", "nli", "judge:<model>"
    reason: str = ""  # a rule's explanation, when a rule decided

    def loser(self, statements: Statements, resolution: str) -> int | None:
        """The statement to withhold; None keeps both (with a note). A question that only
        asks never makes the model's clash withhold what it asks about."""
        if resolution == "keep_both" or (
                not self.detector.startswith("rule") and only_asks(statements.texts[self.newer])):
            return None
        if resolution == "trust_wins":
            newer_rank = TRUST_RANK[statements.trust[self.newer]]
            older_rank = TRUST_RANK[statements.trust[self.older]]
            if newer_rank != older_rank:
                return self.newer if newer_rank < older_rank else self.older
        return self.older


@dataclass
class Candidate:
    """A pair the rules left to the models: its NLI probability once scored."""

    older: int
    newer: int
    probability: float = 0.0


def load_nli(settings: Any) -> Any:
    """The policy's NLI model (the shipped one, a local folder, or with allow_hub a hub name),
    behind its screen when the policy names one (``nli_screen``), its scores remembered per
    pair (one memory per distinct model setting, for the whole process)."""
    threshold = settings.nli_screen_threshold
    if settings.judge_model:  # the judge reads candidates from judge_threshold up: pass those on
        threshold = min(threshold, settings.judge_threshold)
    return _remembered(settings.nli_model if settings.allow_hub else None,
                       None if settings.allow_hub else settings.nli_model,
                       settings.nli_screen or None, threshold if settings.nli_screen else None)


@lru_cache(maxsize=16)
def _remembered(hub: str | None, path: str | None, screen: str | None,
                threshold: float | None) -> Any:
    from agentmem.models.nli import RememberedNLI, ScreenedNLI, cached_nli

    model = _hub_model(hub) if hub else cached_nli(path)
    if screen is not None and threshold is not None:
        model = ScreenedNLI(cached_nli(screen), model, threshold)
    return RememberedNLI(model)


_HUB: dict[str, object] = {}


def _hub_model(name: str) -> Any:
    from agentmem.models.backend import runtime
    from agentmem.models.nli import NLIModel

    if runtime() == "onnx":
        raise RuntimeError(f"nli_model {name!r} from the hub runs on torch only (ONNX files exist "
                           "for the shipped checkpoints): use model_runtime: torch")
    if name not in _HUB:
        _HUB[name] = NLIModel.load(name, allow_hub=True)
    return _HUB[name]


@lru_cache(maxsize=65536)
def _rule_verdict(older: str, newer: str, records: bool) -> RuleVerdict | None:
    return rule_clash(older, newer, records=records)


def _may_clash(newer: str, source: str) -> bool:
    """Whether any rule can fire on a pair with this newer side: tool outputs are compared as
    records; people's text only by typed facts (see ``_rule``)."""
    return source.startswith("tool:") or bool(extract_facts(newer))


def _rule(older: str, newer: str, source: str) -> RuleVerdict | None:
    """A rule verdict, where it applies: record comparisons ("key: value" lines read twice)
    are for tool outputs only; in people's text "Step 1" and "Step 3" are not one record.
    People's rules compare typed facts, so a pair whose facts are about different things
    (or that has none on one side) is settled by two cached lookups, without comparing them
    (98% of the same-speaker pairs of the clash dev sets; at 600 turns, skipping pairs with
    no facts took the call path's check of a new message from ~30 ms to ~19 ms, LoCoMo)."""
    records = source.startswith("tool:")
    if not records and not comparable(older, newer):
        return None  # no fact of one is compared with any of the other: no rule can fire
    return _rule_verdict(older, newer, records)


def clash_sources(statements: Statements, settings: Any) -> list[int]:
    """Rows whose source may clash: people and the assistant always; tools only when the policy
    says so (``clash_tools``): a tool's results differ because its calls differ."""
    return [r for r in range(statements.size)
            if settings.clash_tools or not statements.sources[r].startswith("tool:")]


@lru_cache(maxsize=65536)
def _silent(older: str, newer: str) -> bool:
    return rule_silent_ok(older, newer)


def _earlier_same_source(statements: Statements, row: int) -> list[int]:
    """Rows of earlier turns with the row's source, in order. The position test is numpy: a
    scan per row in Python made a 10,000-sentence paste cost minutes (quadratic)."""
    earlier = np.flatnonzero(statements.position < statements.position[row]).tolist()
    return statements.same_voice(earlier, row)


def rule_clashes(statements: Statements, new_rows: list[int]) -> list[Clash]:
    """Step 1: the most confident rule verdict per new statement, against every earlier
    statement of its source (newest first, capped)."""
    out = []
    earlier_of: dict[int, list[int]] = {}  # rows of one turn share their candidates
    updated_after: dict[int, int] = {}  # per turn, the row that announces an update ("slight change: ...")
    for row in new_rows:
        pause_point()
        key = int(statements.position[row])  # a turn has one voice
        if key not in earlier_of:  # once per turn: per row it was 60 ms for a 10,000-line paste
            earlier_of[key] = _earlier_same_source(statements, row)[-MAX_RULE_CANDIDATES:]
            updated_after[key] = _update_row(statements, key)
        earlier = earlier_of[key]
        if row > updated_after[key]:
            continue  # the sentences after an announced change state the new values (as turn level reads them)
        if not earlier or not _may_clash(statements.texts[row], statements.sources[row]):
            continue  # nothing to compare with, or no rule can fire (facts read only then)
        best: tuple[RuleVerdict, int] | None = None
        for number, older in enumerate(reversed(earlier)):
            if number % 32 == 31:
                pause_point()
            verdict = _rule(statements.texts[older], statements.texts[row], statements.sources[row])
            if verdict is not None and (best is None or verdict.score > best[0].score):
                best = (verdict, older)
        if best is not None:
            verdict, older = best
            out.append(Clash(row, older, float(verdict.score), f"rule:{verdict.kind}",
                             verdict.reason))
    return out


def _update_row(statements: Statements, position: int) -> int:
    """The first row of a turn that announces an update, or past the last row when none does."""
    for row in np.flatnonzero(statements.position == position).tolist():
        if announces_update(statements.texts[row]):
            return int(row)
    return statements.size


def turn_rule_clashes(statements: Statements, new_rows: list[int]) -> list[Clash]:
    """Step 1 at turn level, for facts spread over sentences ("I have two kids. They're 5 and
    7."): each new turn of a source against each earlier turn of that source; the clash is
    placed on the sentences that hold the conflicting values."""
    by_position: dict[int, list[int]] = {}
    out = []
    for position in sorted({int(statements.position[r]) for r in new_rows}):
        pause_point()
        if not (statements.position < position).any():
            continue  # a first turn: nothing earlier (never read a paste's facts for nothing)
        rows = np.flatnonzero(statements.position == position).tolist()
        source = statements.sources[rows[0]]
        newer_text = " ".join(statements.texts[r] for r in rows)
        if not _may_clash(newer_text, source):
            continue  # the usual new message: no typed fact, so no rule can fire (no scan)
        if not by_position:
            for row in range(statements.size):
                by_position.setdefault(int(statements.position[row]), []).append(row)
        firsts = [rows_at[0] for p, rows_at in by_position.items() if p < position]
        earlier = [int(statements.position[r])
                   for r in statements.same_voice(firsts, rows[0])][-MAX_RULE_CANDIDATES:]
        best: tuple[RuleVerdict, int] | None = None
        for number, older_position in enumerate(reversed(earlier)):
            if number % 32 == 31:
                pause_point()
            older_text = " ".join(statements.texts[r] for r in by_position[older_position])
            verdict = _rule(older_text, newer_text, source)
            if verdict is not None and (best is None or verdict.score > best[0].score):
                best = (verdict, older_position)
        if best is not None:
            verdict, older_position = best
            out.append(Clash(_holding(statements, rows, verdict.newer),
                             _holding(statements, by_position[older_position], verdict.older),
                             float(verdict.score), f"rule:{verdict.kind}", verdict.reason))
    return out


def _holding(statements: Statements, rows: list[int], evidence: str) -> int:
    """The row whose sentence contains the evidence (case-insensitive), else the first."""
    needle = evidence.lower().strip()
    return next((r for r in rows if needle and needle in statements.texts[r].lower()), rows[0])


def candidate_pairs(statements: Statements, new_rows: list[int], settings: Any,
                    pair_filter: _PairFilter | None = None) -> list[tuple[int, int]]:
    """Step 2's pairs: (older, newer), same source, similar enough, sharing a content word
    (``nli_shared_terms``: "I hate cilantro" and "I love parsley" are about different things,
    which a small NLI model does not see), most similar first; pairs a rule guard already
    explained are left out, and so are reports qualified by a day (``rules.time_qualified``:
    "I ran 5k today" / "Today I ran 10k")."""
    pairs = []
    if pair_filter is None:
        pair_filter = _PairFilter(statements, settings)
    for row in new_rows:
        pause_point()
        text = statements.texts[row]
        if text.rstrip().endswith("?"):
            if not (settings.nli_questions and presupposes_about_self(text)):
                continue  # a question asserts nothing the rules did not already read from it
        elif not is_claim(text) and len(text.split()) < 3:
            continue
        if time_qualified(text):
            continue  # a report of a day ("I ran 5k today") contradicts no other day's, nor a standing fact
        earlier = [i for i in _earlier_same_source(statements, row)
                   if not statements.texts[i].rstrip().endswith("?")
                   and not time_qualified(statements.texts[i])]
        if not earlier:
            continue
        cosine = statements.vectors[earlier] @ statements.vectors[row]
        ranked = np.argsort(-cosine)[: settings.clash_candidates]
        words = set(statements.words[row])
        shared_terms = (settings.nli_shared_terms_assistant
                        if statements.sources[row] == "assistant" else settings.nli_shared_terms)
        pairs += [(earlier[i], row) for i in ranked if cosine[i] >= settings.clash_similarity
                  and len(words.intersection(statements.words[earlier[i]])) >= shared_terms
                  and not pair_filter.excluded(earlier[i], row)
                  and not _silent(statements.texts[earlier[i]], text)]
    return pairs


class _PairFilter:
    """Pairs the small NLI model is known to misread, left out of step 2; what it reads of the
    session (the tools' text, whether tools or a system prompt speak) is read once per call.

    - Two assistant statements that each repeat a tool's text word for word: that is the
      tool's results compared through the assistant, and tool results are not compared unless
      ``clash_tools`` (a tool's results differ because its calls differ). An agent that answers
      each question with a sentence of its search results would otherwise have its earlier
      answers withheld whenever the model reads two sentences of one article as contradicting
      (it does: 0.93 both ways for two unrelated sentences about Kublai Khan).
    - With ``nli_assistant_pairs: persona``, in a task session (a system prompt or a tool's
      result in it), two assistant statements that do not both speak of the assistant itself
      (both do in "I have two cats" / "I've never had a pet", a persona's facts). A task assistant restates its documents and
      tools in other words and works out new values from them ("2 refills left" / "Two
      refills remain", "€25 per wheel" / "costs nothing extra, so €84 in total"), which the
      model reads as contradicting: on the 145 poison sessions (no clash written into them) 33
      of its 39 clash records were such pairs, and none was a contradiction. What a task assistant
      says is checked against its authorities by the poison detector; its typed facts still
      go through the rules.
    - Two statements that are the same words but for their numbers and that do not speak of
      the speaker ("[harness] Turn 1412." / "[harness] Turn 1440.", "Battery at 80%." /
      "Battery at 35%."): a counter or a status line, which changes. What a person says of
      themselves with another number ("I work 40 hours a week" / "I work 60 hours a week")
      still goes to NLI.
    """

    def __init__(self, statements: Statements, settings: Any) -> None:
        self.statements = statements
        self.relays = not settings.clash_tools
        self.persona_only = settings.nli_assistant_pairs == "persona"
        self._tools: str | None = None
        self._seen: dict[int, bool] = {}

    def excluded(self, older: int, newer: int) -> bool:
        """Whether the pair (same voice) is left out of NLI."""
        texts = self.statements.texts
        if _same_but_numbers(texts[older], texts[newer]) and not speaks_of_self(texts[newer]):
            return True
        if self.statements.sources[newer] != "assistant":
            return False
        if self.relays and self._relayed(older) and self._relayed(newer):
            return True
        return (self.persona_only and (self.statements.tools or self.statements.prompted)
                and not (speaks_of_self(texts[older]) and speaks_of_self(texts[newer])))

    def _relayed(self, row: int) -> bool:
        if row not in self._seen:
            if self._tools is None:  # the tools' text, once per call
                self._tools = "\n".join(
                    " ".join(self.statements.texts[r].casefold().split())
                    for r in range(self.statements.size)
                    if self.statements.sources[r].startswith("tool:"))
            text = " ".join(self.statements.texts[row].casefold().split())
            self._seen[row] = len(text) >= 20 and text in self._tools
        return self._seen[row]


_NUMBER = re.compile(r"\d[\d.,:/]*")


@lru_cache(maxsize=65536)
def _same_but_numbers(older: str, newer: str) -> bool:
    """Whether the two texts give numbers and are the same words once their numbers are masked."""
    masked_older, masked_newer = _NUMBER.sub("#", older), _NUMBER.sub("#", newer)
    return masked_older != older and masked_older.casefold().split() == masked_newer.casefold().split()


def nli_candidates(statements: Statements, new_rows: list[int], nli: Any, settings: Any,
                   limit: int | None = None) -> list[Candidate]:
    """Step 2: the NLI probability of every candidate pair, or of the newest statements'
    pairs up to ``limit`` (the rest keep their rule verdicts only)."""
    if limit is None:
        pairs = candidate_pairs(statements, new_rows, settings)
    else:  # newest first, and no pair built past the limit (building them is not free either)
        pairs = []
        pair_filter = _PairFilter(statements, settings)  # the session read once for all rows
        for row in sorted(new_rows, reverse=True):
            if len(pairs) >= limit:
                break
            pairs += candidate_pairs(statements, [row], settings, pair_filter)
        pairs = pairs[:limit]
    if not pairs:
        return []
    texts = [(statements.texts[a], statements.texts[b]) for a, b in pairs]
    probabilities = _contradiction(nli, texts)
    if settings.nli_both_ways:
        bar = settings.contradiction_threshold
        if settings.judge_model:
            bar = min(bar, settings.judge_threshold)
        probabilities = _both_ways(nli, texts, probabilities, bar)
    return [Candidate(a, b, p) for (a, b), p in zip(pairs, probabilities)]


def _both_ways(nli: Any, texts: list[tuple[str, str]], forward: list[float],
               bar: float) -> list[float]:
    """Chit-chat pairs (neither statement states a typed fact: a job, pets, family, a place,
    an amount...) whose forward P reaches ``bar`` are scored again with the two statements
    swapped, and the lower P counts; the rest keep the forward P (below ``bar`` the lower one
    could not reach it anyway, so they are not scored again).

    Why: a contradiction is symmetric, and the small model's false alarms concentrate on
    feelings, compliments and encouragement that share a word ("Thanks, Mel!" / "No worries,
    Mel!": 0.995 one way, 0.865 the other): in 300 turns of real chat, none of its 33 pairs at
    0.98+ had a fact on both sides and 27 had none on either. Pairs about facts are what it
    was trained on and what people contradict ("I work at a book store" / "I work at a grocery
    store"), so they keep one reading: read both ways too, DECODE dev lost 16 of its 50 true
    NLI clashes; this way it loses 6, and drops 14 of 40 false ones."""
    high = [i for i, p in enumerate(forward)
            if p >= bar and not (extract_facts(texts[i][0]) or extract_facts(texts[i][1]))]
    if not high:
        return forward
    backward = _contradiction(nli, [(texts[i][1], texts[i][0]) for i in high])
    out = list(forward)
    for i, p in zip(high, backward):
        out[i] = min(out[i], p)
    return out


def _contradiction(nli: Any, texts: list[tuple[str, str]]) -> list[float]:
    """NLI's contradiction probability per text pair, each distinct pair scored once; a
    statement repeated word for word contradicts nothing (0.0, not scored). Agents repeat
    themselves and their tools: in the overhead bench's 21-turn seed 18% of the pairs
    were repeats and 5% restated the earlier sentence exactly."""
    distinct = list(dict.fromkeys(pair for pair in texts if not _same_words(*pair)))
    scored = (dict(zip(distinct, map(float, nli.contradiction(distinct, batch_size=NLI_BATCH))))
              if distinct else {})
    return [scored.get(pair, 0.0) for pair in texts]


def _same_words(older: str, newer: str) -> bool:
    return older.casefold().split() == newer.casefold().split()


def strongest(clashes: list[Clash]) -> list[Clash]:
    """One clash per new statement: the most confident."""
    best: dict[int, Clash] = {}
    for clash in clashes:
        if clash.newer not in best or clash.probability > best[clash.newer].probability:
            best[clash.newer] = clash
    return sorted(best.values(), key=lambda c: c.newer)


def all_rule_clashes(statements: Statements, new_rows: list[int]) -> list[Clash]:
    """Step 1 whole: sentence pairs first, then whole turns for the turns still undecided."""
    decided = rule_clashes(statements, new_rows)
    done = {int(statements.position[c.newer]) for c in decided}
    return decided + turn_rule_clashes(
        statements, [r for r in new_rows if int(statements.position[r]) not in done])


def undecided(statements: Statements, new_rows: list[int], decided: list[Clash]) -> list[int]:
    done = {int(statements.position[c.newer]) for c in decided}
    return [row for row in new_rows if int(statements.position[row]) not in done]


def settle(decided: list[Clash], scored: list[Candidate], settings: Any,
           verdicts: dict[tuple[int, int], bool | None] | None = None,
           judge: str = "") -> list[Clash]:
    """Rule clashes stand; a judged pair is what the judge said; any other candidate is a
    clash when NLI is confident (``contradiction_threshold``)."""
    out = list(decided)
    for c in scored:
        verdict = (verdicts or {}).get((c.older, c.newer))
        if verdict is None:
            if c.probability >= settings.contradiction_threshold:
                out.append(Clash(c.newer, c.older, c.probability, "nli"))
        elif verdict:
            out.append(Clash(c.newer, c.older, max(c.probability, 0.9), f"judge:{judge}",
                             f"NLI {c.probability:.2f}, confirmed by the judge"))
    return strongest(out)


def find_clashes(statements: Statements, new_rows: list[int], nli: Any, settings: Any) -> list[Clash]:
    """Rules, then the NLI backstop for the statements the rules did not decide."""
    decided = all_rule_clashes(statements, new_rows)
    rest = undecided(statements, new_rows, decided)
    scored = nli_candidates(statements, rest, nli, settings) if nli is not None and rest else []
    return settle(decided, scored, settings)
