"""Tool usage memory: which queries led the model to call which tool, kept in Redis.

Why: one-line tool descriptions cap what text similarity can find (MetaTool: a tool's gold is
in the top 10 for 84% of queries from descriptions alone), while the queries a tool was
actually called for describe it the way its users ask. The proxy sees every request and every
reply, so after a reply the tools stage records the query it scored with each tool the model
called, and later calls compare their query with each tool's past queries.

Redis layout, one *scope* at a time (a tenant, or a catalogue an operator shares on purpose;
the scope is the hash tag, so its keys share a Redis Cluster slot):

- ``agentmem:toolmem:{SCOPE}:ex:<id>``: list, newest first, of the last ``examples`` distinct
  queries that led to one tool identity, each with its float16 vector (JSON ``{q, v}``, base64)
  and, when the proxy saw the request, what it offered: ``o``, the id of the request's offer
  set, and ``s``, the positions (in that set) of the tools the model was shown, absent when it
  was shown all of them;
- ``agentmem:toolmem:{SCOPE}:tools``: hash, ``<id>`` -> ``{name, schema, updated_at}``;
- ``agentmem:toolmem:{SCOPE}:offers``: hash, offer-set id -> the sorted identity keys of the
  tools one request offered (JSON list; the id is a hash of them, so a client that sends the
  same tool list again reuses it). Most clients send a handful of distinct lists;
- ``agentmem:toolmem:{SCOPE}:offers:used``: sorted set, offer-set id -> when an example last
  named it. Beyond ``offer_sets`` sets, the least recently named leave both keys.

All expire ``ttl_days`` after the scope's last write. Examples without ``o`` (labels from the
feedback API, imports, data written before offer sets were kept), or whose set was dropped,
count as offered with the whole current tool list. A tool identity is its name plus the
hash of its parameters schema (``toolcat.schema_hash``), so a changed tool starts fresh;
``"*"`` instead of a hash is an operator's label that holds for any schema of that name.

Scoring reads this on the call path, so each engine keeps a scope's memory in process and
re-syncs it from Redis at most every ``refresh_s`` seconds (one HGETALL, then a read of only
the tools whose ``updated_at`` changed, which another replica wrote); this engine's own writes
apply at once. The catalogue's tools' examples are stacked into one matrix per tool list and
memory generation, so a call pays one matrix product. Once a scope has enough distinct past
queries for a tool list, a small model (agentmem/state/tool_model.py) is trained for that
(scope, list) in a worker thread after the memory changes; it lives in process only (retrained
from Redis by any replica that serves the scope) and the call path just reads the last one.
Offer sets matter to that training only: each past query's softmax runs over the tools the
model was shown with it, so a tool added to the list later (or one the stage did not show in
that request) gets no negative evidence from a query it was never offered for.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson
from pydantic import BaseModel, ConfigDict, Field, field_validator
from redis.exceptions import RedisError

from agentmem.models.embedder import DIMENSION, from_bytes, to_bytes
from agentmem.state.tool_model import ToolModel, TrainingSet, train
from agentmem.store.keys import (
    ID_PATTERN,
    tool_usage_examples,
    tool_usage_index,
    tool_usage_offers,
    tool_usage_offers_used,
)

if TYPE_CHECKING:
    from agentmem.state.toolcat import Catalogue

log = logging.getLogger("agentmem")

MODEL_STEPS = 200  # Adam steps per training: converged on 900 queries x 200 tools (CV)
MODEL_RATE = 0.05
ANY_SCHEMA = "*"  # an example labelled by tool name alone holds for every schema of that name
EVERY_TENANT = "*"
MAX_OFFERED = 1000  # a request offering more tools keeps no offer set (its examples: all offered)
CACHED_OFFER_SETS = 1024  # offer sets one process keeps per scope before dropping unused ones

# Add one tool identity's new examples (newest last). An earlier entry of the same query is
# removed first, whatever offer it carries: every entry's JSON starts with '{"q":<query>,'.
# KEYS: the tool's example list. ARGV: entries kept, TTL (s), then per example its prefix and
# its entry.
_ADD_EXAMPLES = """
local key = KEYS[1]
for i = 3, #ARGV, 2 do
  local prefix = ARGV[i]
  for _, old in ipairs(redis.call('LRANGE', key, 0, -1)) do
    if string.sub(old, 1, #prefix) == prefix then
      redis.call('LREM', key, 0, old)
    end
  end
  redis.call('LPUSH', key, ARGV[i + 1])
end
redis.call('LTRIM', key, 0, tonumber(ARGV[1]) - 1)
redis.call('EXPIRE', key, tonumber(ARGV[2]))
return 1
"""


class MemorySettings(BaseModel):
    """Usage memory of the tools stage (``tools.memory`` in a policy)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = Field(True, description="Score tools with what was learned (false: today's "
                          "text score alone).")
    learn: bool = Field(True, description="After each reply, record the query that led to each "
                        "tool the model called (false: the memory is read, never written).")
    weight: float = Field(
        2.0, ge=0, description="Weight of (cosine to the tool's nearest past query - neutral), "
        "added to the text score of a tool with past queries.")
    neutral: float = Field(
        0.3, ge=-1, le=1, description="Cosine to a tool's nearest past query at which the memory "
        "neither lifts nor lowers it (unrelated queries score about 0.1, a tool's own 0.6).")
    evidence: float = Field(
        1.0, ge=0, description="Past queries at which the memory counts half: the weight is "
        "scaled by n / (n + evidence), so one example moves a tool less than ten.")
    examples: int = Field(32, ge=1, le=1000, description="Distinct past queries kept per tool "
                          "(the newest).")
    tools_per_scope: int = Field(5000, ge=1, description="Most tool identities one tenant (or "
                                 "shared catalogue) learns about; further new tools are not recorded.")
    ttl_days: float = Field(30, gt=0, description="A scope's memory expires this long after its "
                            "last write.")
    offer_sets: int = Field(
        128, ge=1, description="Most distinct offered tool lists one scope remembers (what each "
        "learned query was offered with); beyond it the least recently used are dropped and "
        "their examples train as if offered with the whole current list.")
    share_as: str | None = Field(
        None, description="Name of a catalogue memory shared by the tenants in share_tenants "
        "(null: every tenant learns alone).")
    share_tenants: list[str] = Field(
        default_factory=list, description="Tenants that read and write the share_as memory "
        "instead of their own ('*': all tenants).")
    model: bool = Field(
        True, description="Train a query-to-tool model per scope and tool list in the background "
        "from the memory, and add its correction to the score (agentmem/state/tool_model.py).")
    model_min_queries: int = Field(
        30, ge=2, description="Distinct past queries (of the offered tools) before a model is "
        "trained; fewer teach a linear model little beyond the nearest-query bonus.")
    model_retrain_s: float = Field(
        60.0, ge=0, description="A model is retrained when the memory changed and its last "
        "training is at least this old (one training runs at a time, in a worker thread).")
    model_l2: float = Field(
        1e-3, ge=0, description="L2 penalty on the model's weights: larger keeps it closer to "
        "the prior (chosen by cross-validation on warm-up traffic).")
    margin: float | None = Field(
        None, ge=0, description="When memory scored the list: keep tools within this of the best "
        "final score instead of the tools.margin from the best text score (null: tools.margin).")
    max_tools: int | None = Field(
        None, ge=1, description="When memory scored the list: most tools kept (null: "
        "tools.max_tools). With margin, confident calls keep few and flat ones more.")
    softness: float | None = Field(
        None, gt=0, description="When memory scored the list and margin is set: count the margin "
        "down from the soft best score, softness x log(sum exp(score / softness)) over the offered "
        "tools, instead of the best (null: the best). Equivalently, keep the tools whose share of "
        "softmax(score / softness) is at least exp(-margin / softness). Why: a crowd of tools "
        "near the top raises the soft best, so a list whose probability is spread over many "
        "tools is cut harder (each extra tool is unlikely to be the one) and the budget goes to "
        "lists where a few tools share it, with a higher cap. 5-fold CV on the MetaTool warm-up "
        "queries: 0.921 at 9.43 of 199 kept (softness 0.21, margin 1.0, at most 16) against "
        "0.914 at 9.46 from the best score (at most 12); mean of 5 fold seeds 0.920 / 0.914 at "
        "9.43 / 9.47.")

    @field_validator("share_as")
    @classmethod
    def _share_name(cls, value: str | None) -> str | None:
        if value is not None and not ID_PATTERN.match(value):
            raise ValueError("use letters, digits and ._:@+=- (at most 200)")
        return value

    @property
    def ttl_s(self) -> int:
        return max(1, int(self.ttl_days * 86400))


def memory_scope(tenant: str, settings: MemorySettings) -> str:
    """Whose memory a tenant reads and writes: its own, unless the operator shares one."""
    if settings.share_as and (tenant in settings.share_tenants
                              or EVERY_TENANT in settings.share_tenants):
        return f"shared:{settings.share_as}"
    return f"tenant:{tenant}"


def identity_key(name: str, schema: str) -> str:
    """The Redis name of one tool identity (names may hold any character)."""
    return hashlib.blake2b(f"{name}\x00{schema}".encode(), digest_size=12).hexdigest()


@dataclass(frozen=True)
class Offered:
    """What one learned query was offered with, as stored with it: the id of its request's offer
    set and the positions in that set of the tools the model was shown (None: all of them)."""

    offer: str
    shown: tuple[int, ...] | None = None


@dataclass(frozen=True)
class OfferSet:
    """The tools one request offered, as sorted identity keys, and which the model was shown."""

    keys: tuple[str, ...]
    shown: tuple[int, ...] | None = None  # positions in ``keys``; None: all of them

    @classmethod
    def of(cls, offered: list[str], shown: list[str] | None) -> OfferSet | None:
        """From the identity keys of the tools a request offered and of those the model was
        shown (None: all); None for a list too long to keep."""
        keys = tuple(sorted(set(offered)))
        if not keys or len(keys) > MAX_OFFERED:
            return None
        if shown is None or set(shown) >= set(keys):
            return cls(keys)
        wanted = set(shown)
        return cls(keys, tuple(i for i, key in enumerate(keys) if key in wanted))

    @property
    def id(self) -> str:
        return offer_id(self.keys)

    @property
    def ref(self) -> Offered:
        return Offered(self.id, self.shown)


def offer_id(keys: tuple[str, ...]) -> str:
    return hashlib.blake2b("\n".join(keys).encode(), digest_size=12).hexdigest()


@dataclass(frozen=True)
class Example:
    """One labelled example: the model (or an operator) picked ``name`` for ``query``."""

    name: str
    schema: str  # toolcat.schema_hash of the tool's parameters, or ANY_SCHEMA
    query: str
    vector: np.ndarray  # unit MiniLM vector of the query, float32
    offer: OfferSet | None = None  # what the request offered (None: unknown, e.g. a label)


@dataclass
class Offer:
    """What one call offered, kept until its reply says which tools the model called."""

    scope: str
    query: str
    vector: np.ndarray | None  # the query's vector when the stage computed it
    functions: list[dict[str, Any]]
    shown: list[bool] | None = None  # per function, whether the model was shown it (None: all)


@dataclass
class ToolExamples:
    """One tool identity's past queries, newest first."""

    name: str
    schema: str
    updated_at: float
    queries: list[str]
    vectors: np.ndarray  # (n, DIMENSION) float32, rounded through float16 like the stored ones
    offers: list[Offered | None] = field(default_factory=list)  # per query; [] or None: unknown


@dataclass
class ScopeMemory:
    tools: dict[str, ToolExamples] = field(default_factory=dict)  # by identity_key
    offer_sets: dict[str, tuple[str, ...]] = field(default_factory=dict)  # id -> identity keys
    synced_at: float = -1e9
    generation: int = 0

    @property
    def vectors(self) -> int:
        return sum(len(t.queries) for t in self.tools.values())


@dataclass
class Evidence:
    """The past queries of one catalogue's tools, stacked for one matrix product."""

    vectors: np.ndarray  # (m, DIMENSION): the examples of tool tools[0], then tools[1], ...
    starts: np.ndarray  # first row of each tool in ``tools``
    tools: np.ndarray  # catalogue index of each tool that has examples
    counts: np.ndarray  # examples per catalogue tool (0 for most in a young memory)
    queries: list[str] = field(default_factory=list)  # the text of each row of ``vectors``
    generation: int = 0  # the scope memory's generation it was stacked from
    offers: list[Offered | None] = field(default_factory=list)  # per row ([]: none known)
    offer_sets: dict[str, tuple[str, ...]] = field(default_factory=dict)  # the ones ``offers`` name
    keys: list[str] = field(default_factory=list)  # identity key of each catalogue tool

    @classmethod
    def stacked(cls, parts: list[np.ndarray], tools: list[int], counts: np.ndarray,
                queries: list[str]) -> Evidence | None:
        """Per tool with examples (catalogue index ``tools[i]``), its example vectors
        ``parts[i]``, stacked in that order; None when no tool has any."""
        if not parts:
            return None
        sizes = [len(p) for p in parts]
        starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
        return cls(np.ascontiguousarray(np.vstack(parts), dtype=np.float32), starts,
                   np.asarray(tools, dtype=np.int64), counts, queries)

    def training_set(self) -> TrainingSet:
        """Each distinct query once, labelled with every offered tool it led to, and the
        catalogue tools it was offered with: the union of what the model was shown with each
        of its examples (the whole list where an example does not say)."""
        rows: dict[str, int] = {}
        owner = np.repeat(self.tools, self.counts[self.tools])
        for row, query in enumerate(self.queries):
            rows.setdefault(query, row)
        labels = np.zeros((len(rows), len(self.counts)), dtype=bool)
        position = {query: index for index, query in enumerate(rows)}
        for row, query in enumerate(self.queries):
            labels[position[query], owner[row]] = True
        return TrainingSet(self.vectors[list(rows.values())], list(rows), labels,
                           self._offered(position, labels))

    def _offered(self, position: dict[str, int], labels: np.ndarray) -> np.ndarray | None:
        """(queries, tools) bool: the tools each query was offered with (None: all, for all)."""
        if not self.keys or not any(o is not None for o in self.offers):
            return None
        column = {key: index for index, key in enumerate(self.keys)}
        masks: dict[Offered, np.ndarray | None] = {}
        offered = np.zeros(labels.shape, dtype=bool)
        unknown = np.zeros(len(labels), dtype=bool)
        for query, ref in zip(self.queries, self.offers):
            row = position[query]
            if ref is not None and ref not in masks:
                masks[ref] = self._mask(ref, column)
            mask = masks[ref] if ref is not None else None
            if mask is None:
                unknown[row] = True
            else:
                offered[row] |= mask
        offered[unknown] = True
        offered |= labels  # a tool the query led to was offered with it, whatever the record says
        return None if offered.all() else offered

    def _mask(self, ref: Offered, column: dict[str, int]) -> np.ndarray | None:
        keys = self.offer_sets.get(ref.offer)
        if keys is None:  # the set was dropped (offer_sets) or expired: as if all were offered
            return None
        shown = keys if ref.shown is None else [keys[i] for i in ref.shown if 0 <= i < len(keys)]
        mask = np.zeros(len(self.keys), dtype=bool)
        mask[[column[key] for key in shown if key in column]] = True
        return mask

    def nearest(self, query: np.ndarray) -> np.ndarray:
        """Cosine between the query and each tool's nearest past query (0 where none).

        ``einsum``, not ``@``: for thousands of rows BLAS wakes its threads, which on a busy
        host cost ~7 ms per call where one core's loop takes ~0.4 ms."""
        out = np.zeros(len(self.counts), dtype=np.float32)
        if len(self.tools):
            sims = np.einsum("ij,j->i", self.vectors, query.astype(np.float32, copy=False))
            out[self.tools] = np.maximum.reduceat(sims, self.starts)
        return out


class ToolUsage:
    """One engine's usage memory: Redis writes and reads, an in-process copy of each scope it
    serves, the stacked examples of recent tool lists, and the offers awaiting their reply."""

    def __init__(self, max_vectors: int = 200_000, max_offers: int = 4096,
                 refresh_s: float = 2.0, max_stacks: int = 64) -> None:
        self.max_vectors = max_vectors
        self.max_offers = max_offers
        self.refresh_s = refresh_s
        self.max_stacks = max_stacks
        self._scopes: OrderedDict[str, ScopeMemory] = OrderedDict()
        self._stacks: OrderedDict[tuple[str, bytes], tuple[int, Evidence | None]] = OrderedDict()
        self._offers: OrderedDict[tuple[str, ...], Offer] = OrderedDict()
        self._models: OrderedDict[tuple[str, bytes], tuple[float, ToolModel | None]] = OrderedDict()
        self._training: asyncio.Task[None] | None = None
        self._add: Any = None  # the _ADD_EXAMPLES script, registered on the first write

    # -- offers: the call path leaves what it scored; the reply's hook takes it ------------------

    def remember_offer(self, key: tuple[str, ...], offer: Offer) -> None:
        self._offers[key] = offer
        while len(self._offers) > self.max_offers:  # replies that never came (or never learn)
            self._offers.popitem(last=False)

    def take_offer(self, key: tuple[str, ...]) -> Offer | None:
        return self._offers.pop(key, None)

    # -- reading ---------------------------------------------------------------------------------

    async def evidence(self, redis: Any, scope: str, catalogue: Catalogue) -> Evidence | None:
        """The catalogue's tools' past queries in ``scope`` (None when none has any)."""
        memory = await self._scope(redis, scope)
        if not memory.tools:
            return None
        key = (scope, catalogue.key)
        cached = self._stacks.get(key)
        if cached is not None and cached[0] == memory.generation:
            self._stacks.move_to_end(key)
            return cached[1]
        evidence = _stack(memory, catalogue)
        if evidence is not None:
            evidence.generation = memory.generation
        self._stacks[key] = (memory.generation, evidence)
        while len(self._stacks) > self.max_stacks:
            self._stacks.popitem(last=False)
        return evidence

    async def _scope(self, redis: Any, scope: str) -> ScopeMemory:
        memory = self._scopes.get(scope)
        if memory is not None:
            self._scopes.move_to_end(scope)
            if time.monotonic() - memory.synced_at < self.refresh_s:
                return memory
        else:
            memory = self._scopes[scope] = ScopeMemory()
        try:
            await self._sync(redis, scope, memory)
        except (RedisError, OSError) as error:
            log.warning("tool usage: Redis read failed (%s); scoring with what this process has",
                        error)
        memory.synced_at = time.monotonic()  # a failed read is retried after refresh_s too
        self._bound()
        return memory

    async def _sync(self, redis: Any, scope: str, memory: ScopeMemory) -> None:
        """Bring the process copy up to Redis: only tools whose ``updated_at`` moved are read."""
        listed = {_text(field): orjson.loads(value)
                  for field, value in (await redis.hgetall(tool_usage_index(scope))).items()}
        stale = [ident for ident, meta in listed.items()
                 if ident not in memory.tools or memory.tools[ident].updated_at != meta["updated_at"]]
        gone = [ident for ident in memory.tools if ident not in listed]
        for ident in gone:
            del memory.tools[ident]
        if stale:
            async with redis.pipeline(transaction=False) as pipe:
                for ident in stale:
                    pipe.lrange(tool_usage_examples(scope, ident), 0, -1)
                lists = await pipe.execute()
            for ident, raw in zip(stale, lists):
                meta = listed[ident]
                memory.tools[ident] = _examples(str(meta["name"]), str(meta["schema"]),
                                                float(meta["updated_at"]), raw)
            await self._offer_sets(redis, scope, memory, stale)
        if stale or gone:
            memory.generation += 1

    @staticmethod
    async def _offer_sets(redis: Any, scope: str, memory: ScopeMemory, idents: list[str]) -> None:
        """Read the offer sets the given tools' examples name that this process lacks (sets
        never change: the id is their hash). Unused ones are dropped past CACHED_OFFER_SETS."""
        wanted = list({ref.offer for ident in idents for ref in memory.tools[ident].offers
                       if ref is not None and ref.offer not in memory.offer_sets})
        if wanted:
            for offer, value in zip(wanted, await redis.hmget(tool_usage_offers(scope), wanted)):
                keys = _offer_keys(value)
                if keys is not None and offer_id(keys) == offer:
                    memory.offer_sets[offer] = keys
        if len(memory.offer_sets) > CACHED_OFFER_SETS:
            used = {ref.offer for tool in memory.tools.values() for ref in tool.offers
                    if ref is not None}
            memory.offer_sets = {k: v for k, v in memory.offer_sets.items() if k in used}

    def _bound(self) -> None:
        total = sum(m.vectors for m in self._scopes.values())
        while total > self.max_vectors and len(self._scopes) > 1:
            total -= self._scopes.popitem(last=False)[1].vectors

    # -- the learned model (agentmem/state/tool_model.py) -----------------------------------------

    def model_for(self, scope: str, catalogue: Catalogue, evidence: Evidence,
                  settings: MemorySettings, text_scores: Callable[[TrainingSet], np.ndarray]
                  ) -> ToolModel | None:
        """The model trained last for this scope and tool list (None before the first), and,
        when the memory moved on since and the last training is ``model_retrain_s`` old, a new
        training started in a worker thread (one at a time): the call path never waits for it."""
        if not settings.model:
            return None
        key = (scope, catalogue.key)
        trained_at, model = self._models.get(key, (-1e9, None))
        if key in self._models:
            self._models.move_to_end(key)
        stale = model is None or model.generation != evidence.generation
        due = time.monotonic() - trained_at >= settings.model_retrain_s
        if (stale and due and len(evidence.queries) >= settings.model_min_queries
                and (self._training is None or self._training.done())):
            self._models[key] = (time.monotonic(), model)  # no second start while this runs
            self._training = asyncio.get_running_loop().create_task(
                self._train(key, evidence, text_scores, settings, model))
        return model

    async def _train(self, key: tuple[str, bytes], evidence: Evidence,
                     text_scores: Callable[[TrainingSet], np.ndarray], settings: MemorySettings,
                     previous: ToolModel | None) -> None:
        def work() -> ToolModel | None:  # the training set too is built off the loop
            data = evidence.training_set()
            if len(data.queries) < settings.model_min_queries:  # repeated queries counted once
                return previous
            return train(data, text_scores, weight=settings.weight, neutral=settings.neutral,
                         evidence=settings.evidence, l2=settings.model_l2, steps=MODEL_STEPS,
                         rate=MODEL_RATE, generation=evidence.generation)

        try:
            model = await asyncio.to_thread(work)
        except Exception:  # a failed training leaves the previous model; the next call retries
            log.exception("tool usage: training the tool model failed")
            return
        self._models[key] = (time.monotonic(), model)
        while len(self._models) > self.max_stacks:
            self._models.popitem(last=False)

    async def trained(self) -> None:
        """Wait for the training under way, if any (benchmarks and tests: what a deployment
        serves once its background training finished)."""
        if self._training is not None:
            await asyncio.shield(self._training)

    # -- writing ---------------------------------------------------------------------------------

    async def record(self, redis: Any, scope: str, examples: list[Example],
                     settings: MemorySettings) -> int:
        """Add examples (newest last in the list); returns how many tool identities took them.
        Raises RedisError/OSError: the caller decides whether a failure matters."""
        groups: dict[str, list[Example]] = {}
        for example in reversed(examples):  # the newest copy of a repeated query wins
            group = groups.setdefault(identity_key(example.name, example.schema), [])
            if all(e.query != example.query for e in group):
                group.append(example)
        groups = {ident: groups[ident][::-1] for ident in reversed(groups)}  # input order again
        if not groups:
            return 0
        index = tool_usage_index(scope)
        groups = await self._room_for(redis, index, groups, settings)
        if not groups:
            return 0
        now = time.time()
        ttl = settings.ttl_s
        offers = {e.offer.id: e.offer.keys for items in groups.values() for e in items
                  if e.offer is not None}
        if self._add is None:
            self._add = redis.register_script(_ADD_EXAMPLES)
        sets, used = tool_usage_offers(scope), tool_usage_offers_used(scope)
        async with redis.pipeline(transaction=False) as pipe:
            for ident, items in groups.items():
                args: list[Any] = [settings.examples, ttl]
                for example in items[-settings.examples:]:
                    args += [_prefix(example.query), _pack(example)]
                await self._add(keys=[tool_usage_examples(scope, ident)], args=args, client=pipe)
                pipe.hset(index, ident, orjson.dumps(
                    {"name": items[0].name, "schema": items[0].schema, "updated_at": now}))
            stored = self._scopes[scope].offer_sets if scope in self._scopes else {}
            for offer, keys in offers.items():
                # An id is its set's hash, so a set this process knows is stored already (one
                # dropped since reads as any dropped set: offered with the whole list).
                if offer not in stored:
                    pipe.hset(sets, offer, orjson.dumps(list(keys)))
            if offers:
                pipe.zadd(used, dict.fromkeys(offers, now))
            pipe.expire(index, ttl)
            pipe.expire(sets, ttl)
            pipe.expire(used, ttl)
            pipe.zcard(used)
            known = int((await pipe.execute())[-1])
        if known > settings.offer_sets:  # the least recently named sets go (with their keys)
            oldest = [_text(o) for o in await redis.zrange(used, 0, known - settings.offer_sets - 1)]
            if oldest:
                async with redis.pipeline(transaction=False) as pipe:
                    pipe.zrem(used, *oldest)
                    pipe.hdel(sets, *oldest)
                    await pipe.execute()
        memory = self._scopes.get(scope)
        if memory is not None:  # this process sees its own writes at once
            memory.offer_sets.update(offers)
            for ident, items in groups.items():
                memory.tools[ident] = _merged(memory.tools.get(ident), items, now, settings.examples)
            memory.generation += 1
            self._bound()
        return len(groups)

    @staticmethod
    async def _room_for(redis: Any, index: str, groups: dict[str, list[Example]],
                        settings: MemorySettings) -> dict[str, list[Example]]:
        """Drop tool identities new to a scope that already knows ``tools_per_scope`` tools."""
        known = await redis.hlen(index)
        if known + len(groups) <= settings.tools_per_scope:
            return groups
        idents = list(groups)
        present = await redis.hmget(index, idents)
        room = settings.tools_per_scope - int(known)
        kept: dict[str, list[Example]] = {}
        for ident, value in zip(idents, present):
            if value is not None:
                kept[ident] = groups[ident]
            elif room > 0:
                kept[ident] = groups[ident]
                room -= 1
        if len(kept) < len(groups):
            log.warning("tool usage: %s knows %d tools (tools_per_scope); %d new ones not recorded",
                        index, known, len(groups) - len(kept))
        return kept

    async def forget(self, redis: Any, scope: str, name: str) -> int:
        """Drop what a scope learned about every identity of one tool name; returns how many."""
        listed = {_text(f): orjson.loads(v)
                  for f, v in (await redis.hgetall(tool_usage_index(scope))).items()}
        idents = [ident for ident, meta in listed.items() if meta.get("name") == name]
        if idents:
            async with redis.pipeline(transaction=False) as pipe:
                for ident in idents:
                    pipe.delete(tool_usage_examples(scope, ident))
                pipe.hdel(tool_usage_index(scope), *idents)
                await pipe.execute()
        memory = self._scopes.get(scope)
        if memory is not None:
            for ident in idents:
                memory.tools.pop(ident, None)
            memory.generation += 1
        return len(idents)

    async def listing(self, redis: Any, scope: str, name: str | None = None) -> list[ToolExamples]:
        """What a scope learned, read from Redis (not this process's copy), by tool name."""
        listed = {_text(f): orjson.loads(v)
                  for f, v in (await redis.hgetall(tool_usage_index(scope))).items()}
        idents = [ident for ident, meta in listed.items() if name is None or meta.get("name") == name]
        if not idents:
            return []
        async with redis.pipeline(transaction=False) as pipe:
            for ident in idents:
                pipe.lrange(tool_usage_examples(scope, ident), 0, -1)
            lists = await pipe.execute()
        out = [_examples(str(listed[i]["name"]), str(listed[i]["schema"]),
                         float(listed[i]["updated_at"]), raw) for i, raw in zip(idents, lists)]
        return sorted((t for t in out if t.queries), key=lambda t: (t.name, t.schema))


def _stack(memory: ScopeMemory, catalogue: Catalogue) -> Evidence | None:
    """One matrix of the catalogue's tools' examples: each tool's own schema's, then the ones
    labelled for any schema of its name."""
    parts: list[np.ndarray] = []
    texts: list[str] = []
    offers: list[Offered | None] = []
    tools: list[int] = []
    keys: list[str] = []
    counts = np.zeros(len(catalogue.names), dtype=np.int64)
    schemas = catalogue.schemas or [ANY_SCHEMA] * len(catalogue.names)
    for index, (name, schema) in enumerate(zip(catalogue.names, schemas)):
        keys.append(identity_key(name, schema))
        found = [memory.tools.get(keys[-1]),
                 memory.tools.get(identity_key(name, ANY_SCHEMA)) if schema != ANY_SCHEMA else None]
        present = [t for t in found if t is not None and len(t.queries)]
        rows = [t.vectors for t in present]
        if rows:
            texts += [query for t in present for query in t.queries]
            offers += [o for t in present for o in (t.offers or [None] * len(t.queries))]
            matrix = rows[0] if len(rows) == 1 else np.vstack(rows)
            parts.append(matrix)
            tools.append(index)
            counts[index] = len(matrix)
    evidence = Evidence.stacked(parts, tools, counts, texts)
    if evidence is not None and any(o is not None for o in offers):  # read by training only
        evidence.offers, evidence.keys = offers, keys
        evidence.offer_sets = dict(memory.offer_sets)  # a snapshot for the training thread
    return evidence


def _pack(example: Example) -> bytes:
    """The stored form: starts with the query (``_prefix``), so an earlier entry of the same
    query is found whatever offer it was stored with."""
    item: dict[str, Any] = {"q": example.query,
                            "v": base64.b64encode(to_bytes(example.vector.reshape(1, -1))).decode()}
    if example.offer is not None:
        item["o"] = example.offer.id
        if example.offer.shown is not None:
            item["s"] = list(example.offer.shown)
    return orjson.dumps(item)


def _prefix(query: str) -> bytes:
    """How every stored entry of ``query`` begins (``_pack`` writes the query first)."""
    return b'{"q":' + orjson.dumps(query) + b","


def _offer_ref(item: dict[str, Any]) -> Offered | None:
    """The offer an entry names; None for entries without one (or a damaged one)."""
    offer, shown = item.get("o"), item.get("s")
    if not isinstance(offer, str):
        return None
    if shown is None:
        return Offered(offer)
    if isinstance(shown, list) and all(isinstance(i, int) for i in shown):
        return Offered(offer, tuple(shown))
    return None


def _offer_keys(value: bytes | str | None) -> tuple[str, ...] | None:
    if value is None:
        return None
    try:
        keys = orjson.loads(value)
    except ValueError:
        return None
    if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
        return None
    return tuple(keys)


def _examples(name: str, schema: str, updated_at: float, raw: list[bytes]) -> ToolExamples:
    """Parse a stored list (newest first); a query stored twice (two replicas racing) once."""
    queries, rows, offers = [], [], []
    seen: set[str] = set()
    for value in raw:
        try:
            item = orjson.loads(value)
            row = from_bytes(base64.b64decode(item["v"]))[0]
            query = str(item["q"])
        except (ValueError, KeyError, TypeError):  # a foreign or damaged entry: skip it
            continue
        if query in seen:
            continue
        seen.add(query)
        rows.append(row)
        queries.append(query)
        offers.append(_offer_ref(item))
    vectors = np.vstack(rows) if rows else np.zeros((0, DIMENSION), dtype=np.float32)
    return ToolExamples(name, schema, updated_at, queries, vectors, offers)


def _merged(old: ToolExamples | None, new: list[Example], now: float, limit: int) -> ToolExamples:
    """What Redis holds after ``record``: the new queries first (newest first), then the old
    ones, each query once, at most ``limit``."""
    triples = [(e.query, from_bytes(to_bytes(e.vector.reshape(1, -1)))[0],
                e.offer.ref if e.offer is not None else None) for e in reversed(new)]
    if old is not None:
        triples += list(zip(old.queries, old.vectors, old.offers or [None] * len(old.queries)))
    seen: set[str] = set()
    queries, rows, offers = [], [], []
    for query, vector, offer in triples:
        if query in seen:
            continue
        seen.add(query)
        queries.append(query)
        rows.append(vector)
        offers.append(offer)
        if len(queries) >= limit:
            break
    return ToolExamples(new[0].name, new[0].schema, now, queries, np.vstack(rows), offers)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
