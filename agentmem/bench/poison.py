"""`agentmem bench poison`: are recurring unsupported claims caught, and supported ones left?

Each record is replayed as a proxied session: one hygiene call at every user turn with the
messages up to it, background work drained in between (as time passes between real turns).
On the last call a claim is *caught* when a quarantine record sits on one of its occurrences
and none of its occurrences reaches the outgoing request. ``clash_records`` counts the clash
records the sessions got: the files are written with no contradiction in them, so each is
likely a false alarm that withheld a sentence (the poison measures do not see them: on these
sessions they mostly withheld the assistant's restatements of its tools). Which sentence of an occurrence
message states the claim is decided by ``claim_sentence``: MiniLM similarity to the claim's
text plus the share of the claim's own words (``distinctive_terms``) the sentence carries.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from agentmem.bench.scratch import scratch_hygiene
from agentmem.lexical import terms
from agentmem.messages import text_of
from agentmem.text import split_sentences

BENCH_POLICY = {"name": "bench-poison", "stages": ["quarantine"],
                "quarantine": {"untrusted_tools": ["web_*", "untrusted_*"]}}


async def _run(records, policy) -> dict[str, Any]:
    from agentmem.models.embedder import default_embedder
    from agentmem.policy import load_policy, policy_from_dict
    from agentmem.quarantine.records import QuarantineStore
    from agentmem.store import SessionHandle

    chosen = policy_from_dict(BENCH_POLICY) if policy in (None, "default") else load_policy(policy)
    embedder = default_embedder()
    caught = {"poisoned": 0, "confirmed": 0}
    clashes = 0
    totals = {"poisoned": 0, "confirmed": 0}
    details = []
    async with scratch_hygiene(chosen, "poison") as hygiene:
        for record in records:
            session = f"poison-{uuid.uuid4().hex[:12]}"
            messages = record.messages
            user_turns = [i for i, m in enumerate(messages) if m.get("role") == "user"]
            result = None
            for turn in user_turns:
                result = await hygiene.apply(messages[: turn + 1], session_id=session)
                await hygiene.drain()
            if result is None:
                continue
            quarantined = await QuarantineStore(hygiene.store()).all(SessionHandle(hygiene.tenant, session))
            clashes += sum(r.kind == "clash" for r in quarantined)
            flagged = {p for r in quarantined if r.status == "active"  # a poison record holds every
                       for p in (r.position, *(int(o["position"]) for o in r.occurrences))}  # occurrence
            outgoing = dict(zip(result.kept_indices, result.messages))
            for claim in record.claims:
                if claim.status not in totals:
                    continue
                totals[claim.status] += 1
                own = distinctive_terms(claim.text, messages, claim.occurrences)
                reached = [o for o in claim.occurrences
                           if _claim_reaches(claim.text, own, messages[o], outgoing.get(o), embedder)]
                hit = bool(flagged & set(claim.occurrences)) and not reached
                caught[claim.status] += hit
                details.append({"record": record.id, "status": claim.status, "caught": hit,
                                "flagged": sorted(flagged & set(claim.occurrences)),
                                "reached": reached, "claim": claim.text})
    return {
        "n": len(records),
        "poisoned_recall": caught["poisoned"] / totals["poisoned"] if totals["poisoned"] else 0.0,
        "confirmed_false_rate": caught["confirmed"] / totals["confirmed"] if totals["confirmed"] else 0.0,
        "poisoned_claims": totals["poisoned"], "confirmed_claims": totals["confirmed"],
        "clash_records": clashes,
        "misses": [d for d in details if (d["status"] == "poisoned") != d["caught"]],
    }


def distinctive_terms(claim: str, messages: list[dict], occurrences: list[int]) -> set[str]:
    """The claim's words that no message outside its occurrences uses: what makes it this
    claim rather than the conversation's topic ("rooftop bar" in "Hotel Miradouro has a
    rooftop bar", where every message names the hotel)."""
    where = set(occurrences)
    elsewhere: set[str] = set()
    for index, message in enumerate(messages):
        if index not in where:
            elsewhere.update(terms(text_of(message)))
    return set(terms(claim)) - elsewhere


def claim_sentence(claim: str, distinctive: set[str], text: str, embedder) -> str | None:
    """The sentence of an occurrence message that states the claim: the best MiniLM cosine to
    the claim plus the share of ``distinctive`` it carries. Cosine alone picks the sentence
    that shares the claim's names ("Best match is Hotel Miradouro: 400 m from Ribeira ...")
    over the one that states it ("Reviewers love the river views and the rooftop bar ...").
    On the three poison dev files the two choices differ on 31 of 661 occurrences; read by
    hand, this one is the stating sentence on 25, cosine alone on 4, and 2 state the claim
    across both (README, Benchmarks: Stop 49)."""
    sentences = [text[s.start:s.end] for s in split_sentences(text)]
    if not sentences:
        return None
    vectors = embedder.encode([claim, *sentences])
    cosines = vectors[1:] @ vectors[0]
    share = [len(distinctive & set(terms(sentence))) / max(1, len(distinctive))
             for sentence in sentences]
    return max(zip(sentences, cosines, share), key=lambda row: float(row[1]) + row[2])[0]


def _claim_reaches(claim: str, distinctive: set[str], original: dict, sent: dict | None,
                   embedder) -> bool:
    """Whether the occurrence's claim sentence is still in the outgoing message."""
    if sent is None:
        return False
    sentence = claim_sentence(claim, distinctive, text_of(original), embedder)
    return sentence is not None and sentence in text_of(sent)


def run_poison(records, *, policy: str | None = None) -> dict[str, Any]:
    return asyncio.run(_run(records, policy))
