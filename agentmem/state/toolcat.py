"""Tool catalogues: the query-independent half of tool selection, computed once per tool list.

Agent loops resend the same tools on every call, so everything that does not depend on the
turn (the text that describes each tool, its MiniLM vectors, the BM25 postings) is built once
per distinct tool list and kept in process; a repeat call pays one serialisation and one hash.
Vectors are content-addressed by the exact text embedded, so a tool shared by many lists (or
many tenants, or many proxy replicas through Redis) is embedded once: an in-process LRU in
front of ``agentmem:toolemb:<sha>`` keys (float16, like turn embeddings) keeps the hot path
free of Redis round trips, and a cold replica reads what another one computed. One
``ToolCatalogues`` per engine, bounded in bytes and vectors; it also holds the engine's
``ToolUsage`` (what the model called after which query, see ``agentmem.state.tool_usage``),
since that memory is read per catalogue.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson
from redis.exceptions import RedisError

from agentmem.lexical import BM25Index, terms
from agentmem.models.embedder import DIMENSION, Embedder, from_bytes, to_bytes
from agentmem.models.runtime import run_inference
from agentmem.state.tool_usage import ToolUsage
from agentmem.store.keys import PREFIX

log = logging.getLogger("agentmem")

TEXT_VERSION = "all-MiniLM-L6-v2/tool-text-v1"  # part of every vector's key: change it with the recipe
VECTOR_TTL_S = 30 * 24 * 3600

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_SEPARATORS = re.compile(r"[_\-.:/\s]+")


@dataclass
class Catalogue:
    """One tool list, ready for scoring: row i describes the list's i-th tool."""

    names: list[str]
    vectors: np.ndarray  # unit rows of the whole text (tool_text), float32
    name_vectors: np.ndarray  # unit rows of the name's words alone
    lexical: BM25Index
    schemas: list[str] = field(default_factory=list)  # schema_hash of each tool
    key: bytes = b""  # the digest of the tool list this catalogue describes

    @property
    def nbytes(self) -> int:
        return self.vectors.nbytes + self.name_vectors.nbytes + 250 * len(self.names)


def function_of(tool: dict[str, Any]) -> dict[str, Any]:
    """The function definition of an OpenAI tool, or a legacy ``functions`` entry itself."""
    function = tool.get("function")
    return function if isinstance(function, dict) else tool


def schema_hash(function: dict[str, Any]) -> str:
    """The identity of a tool's parameters schema (key order ignored): usage learned for a tool
    belongs to its name and this hash, so a tool whose parameters change starts fresh, while
    a reworded description keeps what was learned."""
    parameters = function.get("parameters")
    raw = orjson.dumps(parameters if parameters is not None else {}, option=orjson.OPT_SORT_KEYS)
    return hashlib.blake2b(raw, digest_size=8).hexdigest()


def split_name(name: str) -> str:
    """``getWeatherForecast`` / ``get_weather-forecast`` -> ``get Weather Forecast``: embeddings
    and BM25 both need the words that names glue together."""
    return _SEPARATORS.sub(" ", _CAMEL.sub(" ", name)).strip()


def _parameters(function: dict[str, Any]) -> dict[str, Any]:
    parameters = function.get("parameters")
    properties = parameters.get("properties") if isinstance(parameters, dict) else None
    return properties if isinstance(properties, dict) else {}


def tool_text(function: dict[str, Any]) -> str:
    """What a tool is embedded as: its name's words, its description and its parameter names."""
    text = f"{split_name(str(function.get('name') or ''))}: {str(function.get('description') or '').strip()}"
    names = [split_name(str(p)) for p in _parameters(function)]
    return f"{text} Parameters: {', '.join(names)}." if names else text


def lexical_terms(function: dict[str, Any], text: str) -> list[str]:
    """BM25 terms: the embedded text, the name as one word, and the parameter descriptions
    (queries often name a parameter's value, "in Celsius", rather than the parameter)."""
    extra = [str(spec.get("description") or "") for spec in _parameters(function).values()
             if isinstance(spec, dict)]
    name = str(function.get("name") or "").lower()
    return terms(" ".join([text, *extra])) + ([name] if name else [])


class ToolCatalogues:
    """Tool lists and tool-text vectors of one engine, each an LRU with its own bound."""

    def __init__(self, embedder: Embedder, max_bytes: int = 64 * 1024 * 1024,
                 max_vectors: int = 20_000) -> None:
        self.embedder = embedder
        self.max_bytes = max_bytes  # ~100 lists of 200 tools at 64 MB
        self.max_vectors = max_vectors  # ~30 MB at 20,000
        self._catalogues: OrderedDict[bytes, Catalogue] = OrderedDict()
        self._vectors: OrderedDict[str, np.ndarray] = OrderedDict()
        self.usage = ToolUsage()

    async def catalogue_for(self, functions: list[dict[str, Any]], redis: Any = None) -> Catalogue:
        """The catalogue of a tool list (function definitions, in the list's order)."""
        key = hashlib.blake2b(orjson.dumps(functions), digest_size=16).digest()
        catalogue = self._catalogues.get(key)
        if catalogue is not None:
            self._catalogues.move_to_end(key)
            return catalogue
        names = [str(f.get("name") or "") for f in functions]
        texts = [tool_text(f) for f in functions]
        vectors = await self.vectors_for(texts + [split_name(n) for n in names], redis)
        lexical = BM25Index()
        for function, text in zip(functions, texts):
            lexical.add(lexical_terms(function, text))
        catalogue = Catalogue(names, vectors[: len(texts)], vectors[len(texts):], lexical,
                              [schema_hash(f) for f in functions], key)
        self._catalogues[key] = catalogue
        total = sum(c.nbytes for c in self._catalogues.values())
        while total > self.max_bytes and len(self._catalogues) > 1:
            total -= self._catalogues.popitem(last=False)[1].nbytes
        return catalogue

    async def vectors_for(self, texts: list[str], redis: Any = None) -> np.ndarray:
        """Unit MiniLM vectors of tool texts: process LRU, then Redis (one round trip), then the
        embedder for what is still missing (written back to Redis). Fresh vectors go through
        float16 like stored ones, so a score never depends on which cache answered."""
        digests = [hashlib.sha256(f"{TEXT_VERSION}\x00{t}".encode()).hexdigest() for t in texts]
        cache = self._vectors
        found: dict[str, np.ndarray] = {}
        for digest in digests:
            if digest in cache:
                cache.move_to_end(digest)
                found[digest] = cache[digest]
        missing = list(dict.fromkeys(d for d in digests if d not in found))
        if missing and redis is not None:
            found.update(await _read(redis, missing))
            missing = [d for d in missing if d not in found]
        if missing:
            text_of = dict(zip(digests, texts))
            fresh = await run_inference(self.embedder.encode, [text_of[d] for d in missing])
            raw = [to_bytes(row) for row in fresh]
            found.update((d, from_bytes(r)[0]) for d, r in zip(missing, raw))
            if redis is not None:
                await _write(redis, dict(zip(missing, raw)))
        for digest in digests:
            cache[digest] = found[digest]
        while len(cache) > self.max_vectors:
            cache.popitem(last=False)
        if not digests:
            return np.zeros((0, DIMENSION), dtype=np.float32)
        return np.vstack([found[d] for d in digests])


def _key(digest: str) -> str:
    return f"{PREFIX}:toolemb:{digest}"


async def _read(redis: Any, digests: list[str]) -> dict[str, np.ndarray]:
    """Non-transactional pipeline of GETs: one round trip, and valid on a Redis Cluster."""
    try:
        async with redis.pipeline(transaction=False) as pipe:
            for digest in digests:
                pipe.get(_key(digest))
            values = await pipe.execute()
    except (RedisError, OSError) as error:
        log.warning("tool embeddings: Redis read failed (%s); computing them", error)
        return {}
    return {d: from_bytes(v)[0] for d, v in zip(digests, values) if v}


async def _write(redis: Any, raw: dict[str, bytes]) -> None:
    try:
        async with redis.pipeline(transaction=False) as pipe:
            for digest, value in raw.items():
                pipe.set(_key(digest), value, ex=VECTOR_TTL_S)
            await pipe.execute()
    except (RedisError, OSError) as error:
        log.warning("tool embeddings: Redis write failed (%s)", error)
