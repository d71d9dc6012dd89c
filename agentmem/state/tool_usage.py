"""Tool usage memory: which queries led the model to call which tool, kept in Redis.

Why: one-line tool descriptions cap what text similarity can find (MetaTool: a tool's gold is
in the top 10 for 84% of queries from descriptions alone), while the queries a tool was
actually called for describe it the way its users ask. The proxy sees every request and every
reply, so after a reply the tools stage records the query it scored with each tool the model
called, and later calls compare their query with each tool's past queries.

Redis layout, one *scope* at a time (a tenant, or a catalogue an operator shares on purpose;
the scope is the hash tag, so its keys share a Redis Cluster slot):

- ``agentmem:toolmem:{SCOPE}:ex:<id>``: list, newest first, of the last ``examples`` distinct
  queries that led to one tool identity, each with its float16 vector (JSON, base64);
- ``agentmem:toolmem:{SCOPE}:tools``: hash, ``<id>`` -> ``{name, schema, updated_at}``.

Both expire ``ttl_days`` after the scope's last write. A tool identity is its name plus the
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
from agentmem.store.keys import ID_PATTERN, tool_usage_examples, tool_usage_index

if TYPE_CHECKING:
    from agentmem.state.toolcat import Catalogue

log = logging.getLogger("agentmem")

MODEL_STEPS = 200  # Adam steps per training: converged on 900 queries x 200 tools (CV)
MODEL_RATE = 0.05
ANY_SCHEMA = "*"  # an example labelled by tool name alone holds for every schema of that name
EVERY_TENANT = "*"


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
class Example:
    """One labelled example: the model (or an operator) picked ``name`` for ``query``."""

    name: str
    schema: str  # toolcat.schema_hash of the tool's parameters, or ANY_SCHEMA
    query: str
    vector: np.ndarray  # unit MiniLM vector of the query, float32


@dataclass
class Offer:
    """What one call offered, kept until its reply says which tools the model called."""

    scope: str
    query: str
    vector: np.ndarray | None  # the query's vector when the stage computed it
    functions: list[dict[str, Any]]


@dataclass
class ToolExamples:
    """One tool identity's past queries, newest first."""

    name: str
    schema: str
    updated_at: float
    queries: list[str]
    vectors: np.ndarray  # (n, DIMENSION) float32, rounded through float16 like the stored ones


@dataclass
class ScopeMemory:
    tools: dict[str, ToolExamples] = field(default_factory=dict)  # by identity_key
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
        """Each distinct query once, labelled with every offered tool it led to."""
        rows: dict[str, int] = {}
        owner = np.repeat(self.tools, self.counts[self.tools])
        for row, query in enumerate(self.queries):
            rows.setdefault(query, row)
        labels = np.zeros((len(rows), len(self.counts)), dtype=bool)
        position = {query: index for index, query in enumerate(rows)}
        for row, query in enumerate(self.queries):
            labels[position[query], owner[row]] = True
        return TrainingSet(self.vectors[list(rows.values())], list(rows), labels)

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
        if stale or gone:
            memory.generation += 1

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
        now = time.time()
        ttl = settings.ttl_s
        async with redis.pipeline(transaction=False) as pipe:
            for ident, items in groups.items():
                key = tool_usage_examples(scope, ident)
                for example in items[-settings.examples:]:
                    value = _pack(example)
                    pipe.lrem(key, 0, value)
                    pipe.lpush(key, value)
                pipe.ltrim(key, 0, settings.examples - 1)
                pipe.expire(key, ttl)
                pipe.hset(index, ident, orjson.dumps(
                    {"name": items[0].name, "schema": items[0].schema, "updated_at": now}))
            pipe.expire(index, ttl)
            await pipe.execute()
        memory = self._scopes.get(scope)
        if memory is not None:  # this process sees its own writes at once
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
    tools: list[int] = []
    counts = np.zeros(len(catalogue.names), dtype=np.int64)
    schemas = catalogue.schemas or [ANY_SCHEMA] * len(catalogue.names)
    for index, (name, schema) in enumerate(zip(catalogue.names, schemas)):
        found = [memory.tools.get(identity_key(name, schema)),
                 memory.tools.get(identity_key(name, ANY_SCHEMA)) if schema != ANY_SCHEMA else None]
        present = [t for t in found if t is not None and len(t.queries)]
        rows = [t.vectors for t in present]
        if rows:
            texts += [query for t in present for query in t.queries]
            matrix = rows[0] if len(rows) == 1 else np.vstack(rows)
            parts.append(matrix)
            tools.append(index)
            counts[index] = len(matrix)
    return Evidence.stacked(parts, tools, counts, texts)


def _pack(example: Example) -> bytes:
    """The stored form: deterministic, so LREM removes an earlier copy of the same query."""
    return orjson.dumps({"q": example.query,
                         "v": base64.b64encode(to_bytes(example.vector.reshape(1, -1))).decode()})


def _examples(name: str, schema: str, updated_at: float, raw: list[bytes]) -> ToolExamples:
    queries, rows = [], []
    for value in raw:
        try:
            item = orjson.loads(value)
            rows.append(from_bytes(base64.b64decode(item["v"]))[0])
            queries.append(str(item["q"]))
        except (ValueError, KeyError, TypeError):  # a foreign or damaged entry: skip it
            continue
    vectors = np.vstack(rows) if rows else np.zeros((0, DIMENSION), dtype=np.float32)
    return ToolExamples(name, schema, updated_at, queries, vectors)


def _merged(old: ToolExamples | None, new: list[Example], now: float, limit: int) -> ToolExamples:
    """What Redis holds after ``record``: the new queries first (newest first), then the old
    ones, each query once, at most ``limit``."""
    pairs = [(e.query, from_bytes(to_bytes(e.vector.reshape(1, -1)))[0]) for e in reversed(new)]
    if old is not None:
        pairs += list(zip(old.queries, old.vectors))
    seen: set[str] = set()
    queries, rows = [], []
    for query, vector in pairs:
        if query in seen:
            continue
        seen.add(query)
        queries.append(query)
        rows.append(vector)
        if len(queries) >= limit:
            break
    return ToolExamples(new[0].name, new[0].schema, now, queries, np.vstack(rows))


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
