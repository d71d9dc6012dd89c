"""Labelled tool examples in and out of the usage memory: the library half of the feedback API.

A new deployment has no traffic to learn from, and a team often has a log of which tool
answered which request. ``add_tool_examples`` feeds such examples to the same memory the tools
stage writes after each reply (see agentmem/state/tool_usage.py); ``tool_memory`` shows what a
tenant's memory holds per tool; ``forget_tool`` drops a tool's examples (a wrong label).
``POST/GET/DELETE /v1/tools/...`` (agentmem/proxy/tools_feedback.py) call these.

An example names its tool by ``tool``; ``parameters`` (the tool's JSON schema, as in its
definition) ties it to that version of the tool, exactly like recorded traffic. Without it,
the example holds for every schema of that name. The whole batch is validated before anything
is embedded or stored, so a bad example stores nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from redis.exceptions import RedisError

from agentmem.errors import HygieneUnavailable, InvalidRequest
from agentmem.models.runtime import run_inference
from agentmem.state.tool_usage import ANY_SCHEMA, Example, MemorySettings, memory_scope
from agentmem.state.toolcat import schema_hash
from agentmem.store import StoreUnavailable

if TYPE_CHECKING:
    from agentmem.api import Hygiene
    from agentmem.policy import Policy

MAX_QUERY_CHARS = 8000
MAX_EXAMPLES = 10_000
EMBED_BATCH = 256


class ToolExample(BaseModel):
    """One labelled example: ``tool`` is the right tool for ``query``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    query: str = Field(min_length=1, max_length=MAX_QUERY_CHARS,
                       description="The request, as the tools stage would see it.")
    tool: str = Field(min_length=1, max_length=200, description="The tool's name.")
    parameters: dict[str, Any] | None = Field(
        None, description="The tool's parameters schema: the example then holds for this version "
        "of the tool only (null: for every schema of that name).")

    @field_validator("query", "tool")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be blank")
        return value.strip()

    @property
    def schema_id(self) -> str:
        return ANY_SCHEMA if self.parameters is None else schema_hash({"parameters": self.parameters})


class Feedback(BaseModel):
    """The body of ``POST /v1/tools/feedback``: one example, or ``examples`` (an import)."""

    model_config = ConfigDict(extra="forbid")

    examples: list[ToolExample] | None = Field(None, min_length=1, max_length=MAX_EXAMPLES)
    query: str | None = None
    tool: str | None = None
    parameters: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _one_form(self) -> Feedback:
        single = self.query is not None or self.tool is not None or self.parameters is not None
        if self.examples is not None and single:
            raise ValueError("send either 'examples' or one example's 'query' and 'tool', not both")
        if self.examples is None and (self.query is None or self.tool is None):
            raise ValueError("send 'query' and 'tool' (one example) or 'examples' (a list)")
        return self

    def items(self) -> list[ToolExample]:
        if self.examples is not None:
            return self.examples
        return [ToolExample(query=self.query or "", tool=self.tool or "", parameters=self.parameters)]


def parse_feedback(body: Any) -> list[ToolExample]:
    """Validate a feedback body; InvalidRequest names the first bad field (OpenAI's ``param``)."""
    if not isinstance(body, dict):
        raise InvalidRequest("The body must be a JSON object: {query, tool[, parameters]} or "
                             "{examples: [...]}.")
    try:
        return Feedback.model_validate(body).items()
    except ValidationError as error:
        first = error.errors(include_url=False)[0]
        param = ".".join(str(p) for p in first["loc"]) or None
        raise InvalidRequest(f"Invalid feedback{f' at {param!r}' if param else ''}: "
                             f"{first['msg']}.", param=param) from None


def _memory(hygiene: Hygiene, policy: Policy | str | None) -> MemorySettings:
    return hygiene.policy_named(policy).tools.memory


def _redis(hygiene: Hygiene) -> Any:
    try:
        return hygiene.store().redis
    except StoreUnavailable as error:
        raise HygieneUnavailable(f"session store unavailable: {error}") from None


async def add_tool_examples(hygiene: Hygiene, examples: list[ToolExample], *,
                            tenant: str | None = None, policy: Policy | str | None = None
                            ) -> dict[str, Any]:
    """Embed and store labelled examples in the tenant's usage memory (or the catalogue its
    policy shares). Returns counts; raises HygieneUnavailable when Redis is."""
    settings = _memory(hygiene, policy)
    scope = memory_scope(tenant or hygiene.tenant, settings)
    redis = _redis(hygiene)
    stored: list[Example] = []
    for start in range(0, len(examples), EMBED_BATCH):
        batch = examples[start:start + EMBED_BATCH]
        vectors = await run_inference(hygiene.embedder.encode, [e.query for e in batch])
        stored += [Example(e.tool, e.schema_id, e.query, v) for e, v in zip(batch, vectors)]
    try:
        tools = await hygiene.state.catalogues.usage.record(redis, scope, stored, settings)
    except (RedisError, OSError) as error:
        raise HygieneUnavailable(f"session store unavailable: {error}") from None
    return {"added": len(stored), "tools": tools}


async def tool_memory(hygiene: Hygiene, *, tenant: str | None = None, tool: str | None = None,
                      limit: int = 20, policy: Policy | str | None = None) -> list[dict[str, Any]]:
    """What the tenant's usage memory holds: per tool identity, its newest ``limit`` queries."""
    scope = memory_scope(tenant or hygiene.tenant, _memory(hygiene, policy))
    try:
        listed = await hygiene.state.catalogues.usage.listing(_redis(hygiene), scope, tool)
    except (RedisError, OSError) as error:
        raise HygieneUnavailable(f"session store unavailable: {error}") from None
    return [{"object": "tool.memory", "tool": t.name,
             "schema": None if t.schema == ANY_SCHEMA else t.schema, "examples": len(t.queries),
             "updated_at": round(t.updated_at, 3), "queries": t.queries[:limit]} for t in listed]


async def forget_tool(hygiene: Hygiene, tool: str, *, tenant: str | None = None,
                      policy: Policy | str | None = None) -> int:
    """Drop what the tenant's memory learned about a tool name (every schema); how many."""
    scope = memory_scope(tenant or hygiene.tenant, _memory(hygiene, policy))
    try:
        return await hygiene.state.catalogues.usage.forget(_redis(hygiene), scope, tool)
    except (RedisError, OSError) as error:
        raise HygieneUnavailable(f"session store unavailable: {error}") from None
