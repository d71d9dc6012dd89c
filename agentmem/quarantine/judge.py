"""An optional LLM judge for clash candidates, through litellm (any model a user pays for).

Only pairs the cascade could not settle reach it: the rules were silent and the NLI model
scored the pair above ``judge_threshold``. It runs after the reply, never on the call path:
all of a turn's candidates go in one request, verdicts are cached in Redis by a hash of
(model, older, newer) so a pair is never asked twice, and a per-session budget caps how many
pairs one session may send. An answer that cannot be read counts as "no verdict" (the NLI
backstop decides those pairs as it would without a judge).
"""

from __future__ import annotations

import hashlib
import logging
import re
from typing import Any

from agentmem.store.keys import PREFIX

log = logging.getLogger("agentmem.quarantine")

SYSTEM = (
    "You check a chat for self-contradictions. For each numbered pair, both statements come "
    "from the same speaker, A said earlier and B later. Answer 'yes' if B contradicts A (both "
    "cannot be true of that speaker at the same time), 'no' if they are compatible, or if B "
    "announces a change, is about someone else, is hypothetical, or is about another time. "
    "Reply with one line per pair: '<number>: yes' or '<number>: no'. Nothing else.")
VERDICT = re.compile(r"^\s*(\d+)\s*[:.)-]\s*(yes|no)\b", re.IGNORECASE | re.MULTILINE)
CACHE_TTL_S = 30 * 24 * 3600


def pair_key(model: str, older: str, newer: str) -> str:
    digest = hashlib.sha256(f"{model}\x00{older}\x00{newer}".encode()).hexdigest()[:32]
    return f"{PREFIX}:judge:{digest}"


def prompt(pairs: list[tuple[str, str]]) -> list[dict[str, str]]:
    lines = [f"{n}. A: {older!r}\n   B: {newer!r}" for n, (older, newer) in enumerate(pairs, 1)]
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "\n".join(lines)}]


def parse(text: str, count: int) -> list[bool | None]:
    found: dict[int, bool] = {}
    for number, answer in VERDICT.findall(text or ""):
        found.setdefault(int(number), answer.lower() == "yes")
    return [found.get(n) for n in range(1, count + 1)]


class Judge:
    """Verdicts for (older, newer) pairs from ``model`` through an upstream, cached and budgeted."""

    def __init__(self, model: str, upstream: Any, redis: Any, *, budget: int,
                 budget_key: str, ttl: int | None = None) -> None:
        self.model = model
        self.upstream = upstream
        self.redis = redis
        self.budget = budget
        self.budget_key = budget_key
        self.ttl = ttl

    async def verdicts(self, pairs: list[tuple[str, str]]) -> list[bool | None]:
        if not pairs:
            return []
        keys = [pair_key(self.model, a, b) for a, b in pairs]
        async with self.redis.pipeline(transaction=False) as pipe:  # valid on a Cluster too
            for key in keys:
                pipe.get(key)
            cached = await pipe.execute()
        out: list[bool | None] = [None if v is None else v in (b"1", "1") for v in cached]
        missing = [i for i, v in enumerate(cached) if v is None]
        if not missing:
            return out
        spent = int(await self.redis.incrby(self.budget_key, len(missing)))
        if self.ttl:
            await self.redis.expire(self.budget_key, self.ttl)
        allowed = max(0, len(missing) - max(0, spent - self.budget))
        if allowed < len(missing):
            log.info("judge budget reached: %d of %d pairs left to NLI", len(missing) - allowed,
                     len(missing))
        asked = missing[:allowed]
        if not asked:
            return out
        try:
            response = await self.upstream.complete(
                {"model": self.model, "messages": prompt([pairs[i] for i in asked]),
                 "temperature": 0})
            text = response.choices[0].message.content or ""
        except Exception as error:  # noqa: BLE001 - a judge fault leaves NLI's decision
            log.warning("judge %s failed: %s", self.model, error)
            return out
        answers = parse(text, len(asked))
        async with self.redis.pipeline(transaction=False) as pipe:
            for i, answer in zip(asked, answers):
                out[i] = answer
                if answer is not None:
                    pipe.set(keys[i], "1" if answer else "0", ex=CACHE_TTL_S)
            await pipe.execute()
        return out
