"""The tools stage (tool loadout): offer the model only the tools the turn needs.

Models pick worse among many tools, and every schema costs prompt tokens on every call. Each
offered tool is scored against the turn: MiniLM cosine between the query (the latest user
message plus the current agent step, the same memoised vector prune uses) and the tool's
name, description and parameter names (and, at a lower weight, its name alone), plus BM25
over the same words (exact names and rare words that embeddings blur), where the previous
exchange's words count at a lower weight so a terse follow-up ("and in Paris?") still finds
its tool. A request in several sentences keeps each sentence's best lexical match, and each
part of a multi-part request ("file a claim and send me a replacement") is also scored on its
own and keeps its own tools under the cap (``parts``, agentmem/stages/tool_parts.py).

Dropping is the only edit: kept schemas are the client's own dicts, in the client's order.
Never dropped: ``always_include``, the tool ``tool_choice`` (or legacy ``function_call``)
names, tools called in the current agent step or within the recent window, and the
``min_tools`` best (so ``tool_choice: "required"`` always has something to call). Requests
with ``tool_choice: "none"``, or fewer than ``min_offered`` tools, are left alone.

The stage also learns from the traffic (``tools.memory``, see agentmem/state/tool_usage.py):
after each reply it records the query it scored with each tool the model called, per tenant
and tool identity (name + parameters hash). A tool with past queries has ``weight x n/(n +
evidence) x (cosine to its nearest past query - neutral)`` added to its text score, so a tool
that served queries like this one rises and one that served only other kinds of queries sinks;
tools never called keep the text score. The floor (``margin``) stays measured from the best
text score: memory moves tools across that line, it does not move the line, so a fresh tool
without history is kept exactly as before while the tools that history vouches for join it.
With each recorded query goes what the request offered and which of those tools the stage
showed the model (only the one ``tool_choice`` forces, when it forces one): the learned model
treats a tool as passed over only where the model saw it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
from pydantic import BaseModel, ConfigDict, Field
from redis.exceptions import RedisError

from agentmem.cache_marks import marks_cache, tools_marked
from agentmem.conversation import (
    agent_step_start,
    continues_step,
    last_user_index,
    query_of,
    recent_start,
    user_indices,
    without_spans,
)
from agentmem.lexical import terms
from agentmem.messages import text_of
from agentmem.report import Action, Decision
from agentmem.stages.base import Draft, Stage, StageContext
from agentmem.stages.tool_parts import part_floors, request_parts, with_parts
from agentmem.state.steps import offered_in_step
from agentmem.state.tool_model import TrainingSet
from agentmem.state.tool_usage import (
    Evidence,
    Example,
    MemorySettings,
    Offer,
    OfferSet,
    identity_key,
    memory_scope,
)
from agentmem.state.toolcat import Catalogue, function_of, schema_hash
from agentmem.text import sentences

if TYPE_CHECKING:
    from agentmem.policy import Policy
    from agentmem.store.sessions import TurnRecord

log = logging.getLogger("agentmem")

CONTEXT_CHARACTERS = 2000
MAX_SENTENCES = 12


class ToolSettings(BaseModel):
    """The tools stage (see agentmem/stages/tools.py)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_tools: int = Field(
        10, ge=1, description="Most tools kept; pinned tools are kept even beyond it.")
    min_tools: int = Field(3, ge=1, description="The best-scored tools always kept (never zero).")
    min_offered: int = Field(6, ge=1, description="Requests offering fewer tools are left alone.")
    respect_cache_marks: bool = Field(
        True, description="A request that marks anything for the provider's prompt cache "
        "(`cache_control`) keeps its tool list as sent: tools come first in the cached prefix, "
        "so a list chosen anew for each query would make the provider bill the whole prompt "
        "again as a cache write on every call (agentmem/cache_marks.py).")
    step_stable: bool = Field(
        True, description="Within an agent step tools are only added: a tool offered on one of "
        "the step's calls stays offered on its later calls (the model keeps what it may need "
        "next, and the tools block, at the head of the prompt, stays the same for provider "
        "prompt caches; agentmem/state/steps.py). May offer more than max_tools when a later "
        "call adds some.")
    threshold: float | None = Field(
        None, description="Beyond min_tools, drop tools scoring below this (null: no floor).")
    margin: float | None = Field(
        None, ge=0, description="Beyond min_tools, drop tools scoring more than this below the "
        "best tool (null: no margin).")
    name_weight: float = Field(
        0.5, ge=0, description="Weight of the cosine to the tool's name alone, next to the "
        "cosine to its name, description and parameter names.")
    lexical_weight: float = Field(
        0.3, ge=0, description="Weight of BM25 (scaled to [0, 1]) next to the embedding cosine.")
    context_weight: float = Field(
        0.3, ge=0, description="Weight of the previous exchange's words in BM25, relative to "
        "the current turn's.")
    sentence_match: float | None = Field(
        3.0, ge=0, description="In a request of several sentences, a sentence's best BM25 match "
        "scoring at least this ranks with the best tool, so each part of a multi-part request "
        "keeps its tool (null: off).")
    parts: int = Field(
        3, ge=0, description="A request of several parts (\"file a claim and send me a "
        "replacement\") has each part, at most this many, scored on its own too, so one part's "
        "strong match does not shut out the others' tools: the whole request keeps the best "
        "half of the cap, then it and each part (its tools within the margin of the part's own "
        "best) take turns until the cap. On an agent step's first call; the step keeps what it "
        "offered (agentmem/stages/tool_parts.py; 0 or 1: off).")
    always_include: list[str] = Field(
        default_factory=list, description="Tool names never dropped.")
    recent_calls_window: int = Field(
        2, ge=0, description="Tools called within this many last user turns are kept (the "
        "current agent step always counts).")
    memory: MemorySettings = Field(
        default_factory=MemorySettings, description="What the stage learns from the tools the "
        "model calls, and how much it counts (agentmem/state/tool_usage.py).")


@dataclass
class Turn:
    """What tools are scored against."""

    query: str  # the latest user message plus the current agent step (prune's query)
    request: str = ""  # the latest user message alone
    context: str = ""  # the exchange before it

    @classmethod
    def of(cls, history: list[dict[str, Any]],
           withheld: dict[int, set[tuple[int, int]]] | None = None) -> Turn:
        """``withheld``: spans an earlier stage withheld, by position (left out of each text)."""
        withheld = withheld or {}
        users = user_indices(history)
        request = (without_spans(text_of(history[users[-1]]), withheld.get(users[-1]))
                   if users else "")
        context = (" ".join(without_spans(text_of(history[i]), withheld.get(i))
                            for i in range(users[-2], users[-1])) if len(users) > 1 else "")
        return cls(query_of(history, withheld), request, context[:CONTEXT_CHARACTERS])


def hybrid_scores(catalogue: Catalogue, vector: np.ndarray, turn: Turn, settings) -> np.ndarray:
    """Cosine to the tool's text, plus ``name_weight`` times the cosine to its name alone
    (names carry the intent that long descriptions dilute), plus ``lexical_weight`` times BM25
    scaled by its best value in this list. Then each sentence of a multi-part request lifts
    its best lexical match to the top score, so no part of the request loses its tool."""
    scores = catalogue.vectors @ vector
    if settings.name_weight:
        scores = scores + settings.name_weight * (catalogue.name_vectors @ vector)
    lexical_weight, context_weight = settings.lexical_weight, settings.context_weight
    if lexical_weight:
        lexical = catalogue.lexical.scores(terms(turn.query))
        if context_weight and turn.context:
            lexical = lexical + context_weight * catalogue.lexical.scores(terms(turn.context))
        best = float(lexical.max()) if len(lexical) else 0.0
        if best > 0:
            scores = scores + lexical_weight * lexical / best
    scores = scores.astype(np.float32)
    if settings.sentence_match is not None and len(scores):
        parts = sentences(turn.request)[:MAX_SENTENCES]
        if len(parts) > 1:
            top = float(scores.max())
            for part in parts:
                lexical = catalogue.lexical.scores(terms(part))
                best = int(np.argmax(lexical))
                if lexical[best] >= settings.sentence_match:
                    scores[best] = max(scores[best], top)
    return scores


def memory_bonus(evidence: Evidence, vector: np.ndarray, settings: MemorySettings
                 ) -> tuple[np.ndarray, np.ndarray]:
    """What usage memory adds to each tool's score, and each tool's nearest past query's
    cosine: ``weight x n/(n + evidence) x (nearest - neutral)`` for a tool with n past
    queries, 0 for a tool with none (it keeps its text score)."""
    nearest = evidence.nearest(vector)
    counts = evidence.counts.astype(np.float32)
    trust = counts / (counts + settings.evidence) if settings.evidence else (counts > 0)
    bonus = np.where(counts > 0, settings.weight * trust * (nearest - settings.neutral), 0.0)
    return bonus.astype(np.float32), nearest


def soft_best(scores: np.ndarray, softness: float | None) -> float:
    """The best score, or with ``softness`` its smooth version ``softness x log(sum
    exp(score / softness))``: at least the best, and higher the more tools crowd near it, so a
    margin counted down from it keeps exactly the tools whose share of softmax(score /
    softness) is at least exp(-margin / softness) (``memory.softness``, README: Tools)."""
    best = float(scores.max())
    if not softness:
        return best
    shifted = (scores.astype(np.float64) - best) / softness
    return best + softness * float(np.log(np.exp(shifted).sum()))


def most_kept(settings, learned: bool) -> int:
    """The cap on kept tools: ``memory.max_tools`` once memory scored the list (with its
    margin), ``max_tools`` otherwise."""
    memory = settings.memory
    if learned and memory.margin is not None and memory.max_tools:
        return int(memory.max_tools)
    return int(settings.max_tools)


def select(scores: np.ndarray, pinned: np.ndarray, settings, top: float | None = None,
           learned: bool = False) -> tuple[np.ndarray, float]:
    """Kept mask: the pinned, the ``min_tools`` best, then the next best above the floor
    until ``max_tools`` are kept. The margin counts down from ``top`` (the best text score
    when memory moved the scores; the best score otherwise). When memory scored the list
    (``learned``) and the policy sets ``memory.margin``, that margin counts down from the best
    final score (the soft best with ``memory.softness``) and ``memory.max_tools`` caps the list
    instead: with a learned model the scores say how sure the stage is, so a confident call
    keeps few tools and a flat one more, within the same mean budget. Returns the mask and the
    floor."""
    order = np.argsort(-scores, kind="stable")
    keep = pinned.copy()
    keep[order[: settings.min_tools]] = True
    floor = -np.inf
    if settings.threshold is not None:
        floor = settings.threshold
    memory = settings.memory
    margin, most = settings.margin, most_kept(settings, learned)
    if learned and memory.margin is not None:
        margin = memory.margin
        top = soft_best(scores, memory.softness) if len(scores) else None
    if margin is not None and len(order):
        best = float(scores[order[0]]) if top is None else top
        floor = max(floor, best - margin)
    # The pinned (tools named by tool_choice, called in the step or in the last turns) come
    # on top of the cap: counted in it, an agent's recent calls took the places of what its
    # new request asks for (audit 10: a read_file ranked 14th of 45 after 5 pinned tools).
    room = most - int((keep & ~pinned).sum())
    for index in order[settings.min_tools:]:
        if room <= 0 or scores[index] < floor:
            break
        if not keep[index]:
            keep[index] = True
            room -= 1
    return keep, float(floor)


def called_tools(history: list[dict[str, Any]], window: int) -> dict[str, str]:
    """Tools called in the current agent step or within the last ``window`` user turns."""
    last = last_user_index(history)
    last_user = -1 if last is None else last
    start = min(recent_start(history, window), last_user + 1)
    out: dict[str, str] = {}
    for index in range(max(start, 0), len(history)):
        message = history[index]
        if message.get("role") != "assistant":
            continue
        calls = [c.get("function") or {} for c in message.get("tool_calls") or ()]
        if isinstance(message.get("function_call"), dict):
            calls.append(message["function_call"])
        why = ("called in the current agent step" if index > last_user
               else f"called within the last {window} user turns")
        for call in calls:
            if call.get("name"):
                out.setdefault(call["name"], why)
    return out


def called_names(message: dict[str, Any]) -> list[str]:
    """The tools an assistant message calls (``tool_calls`` or a legacy ``function_call``)."""
    calls = [c.get("function") or {} for c in message.get("tool_calls") or () if isinstance(c, dict)]
    if isinstance(message.get("function_call"), dict):
        calls.append(message["function_call"])
    return list(dict.fromkeys(str(c["name"]) for c in calls if isinstance(c, dict) and c.get("name")))


class ToolsStage(Stage):
    name: ClassVar[str] = "tools"
    settings_model = ToolSettings
    runs_after = frozenset({"quarantine"})

    def wants_query(self, policy: Policy, request: dict[str, Any]) -> list[str]:
        """The query, embedded while ingest runs, when the request offers enough tools for
        a selection (most chat calls offer none: nothing to embed)."""
        offered = len(request.get("tools") or ()) + len(request.get("functions") or ())
        if offered < policy.tools.min_offered or (policy.tools.respect_cache_marks and marks_cache(
                request["messages"], [*(request.get("tools") or ()), *(request.get("functions") or ())])):
            return []
        return [query_of(request["messages"])]

    async def apply(self, draft: Draft, context: StageContext) -> None:
        settings = context.policy.tools
        pools = []  # (draft attribute, list) of the lists this call may shrink
        if draft.tools and context.channels.tool_choice != "none":
            pools.append(("tools", draft.tools))
        if draft.functions and context.channels.function_call != "none":
            pools.append(("functions", draft.functions))
        entries = [(attr, tool) for attr, tools in pools for tool in tools]
        if not entries:
            return
        history = context.history
        turn = Turn.of(history, context.channels.excluded_spans)
        if not turn.query:
            return
        functions = [function_of(tool) for _, tool in entries]
        if settings.respect_cache_marks and (context.last_cache_mark is not None
                                             or tools_marked([t for _, t in entries])):
            context.run.skipped = CACHED
            self._remember_offer(context, turn.query, None, functions)  # learnt from, not scored
            return
        if len(entries) < settings.min_offered or len(entries) <= settings.min_tools:
            self._remember_offer(context, turn.query, None, functions)  # learnt from, not scored
            return
        names = [str(f.get("name") or "") for f in functions]
        parts = request_parts(turn.request, settings.parts) if _scores_parts(settings, history) else []
        if parts:  # their own batch, padded to the longest part, not to the query
            context.state.queries.prefetch(*parts)
        reasons = self._pins(names, history, context)
        redis = context.store.redis if context.store is not None else None
        catalogue = await context.state.catalogues.catalogue_for(functions, redis)
        vector = await context.query_vector(turn.query)
        offer = self._remember_offer(context, turn.query, vector, functions)
        scores = hybrid_scores(catalogue, vector, turn, settings)
        top = float(scores.max())
        learned = await self._learned(context, catalogue, vector, turn)
        if learned is not None:
            scores = scores + learned[0]
        pinned = np.fromiter((n in reasons or not n for n in names), dtype=bool, count=len(names))
        keep, floor = select(scores, pinned, settings, top=top, learned=learned is not None)
        added = await self._parts(context, catalogue, names, parts, scores, keep, pinned,
                                  most_kept(settings, learned is not None))
        if settings.step_stable:
            keep = np.asarray(await offered_in_step(context, agent_step_start(history), names,
                                                    keep.tolist(), settings.model_dump_json()), bool)
        if offer is not None and offer.shown is None and not keep.all():
            offer.shown = keep.tolist()  # the model chooses among these only
        if not keep.all():
            self._record_drops(context, names, scores, keep, floor,
                               most_kept(settings, learned is not None))
            kept = iter(keep.tolist())
            for attr, tools in pools:
                flags = [next(kept) for _ in tools]
                if not all(flags):
                    setattr(draft, attr, [tool for tool, flag in zip(tools, flags) if flag])
        self._summary(context, names, scores, keep, reasons, learned, added)

    @staticmethod
    async def _parts(context: StageContext, catalogue: Catalogue, names: list[str],
                     parts: list[str], whole: np.ndarray, keep: np.ndarray, pinned: np.ndarray,
                     most: int) -> dict[str, list[str]]:
        """Score each part of a multi-part request on its own and share the ``most`` places
        (besides the pinned) between the whole request's selection ``keep`` (by its ``whole``
        scores; changed in place) and each part's tools within the margin of the part's best:
        the whole request keeps its best half, then they take turns (``with_parts``). Returns
        each part with the tools it brought in."""
        if not parts:
            return {}
        settings = context.policy.tools
        scores = [hybrid_scores(catalogue, await context.query_vector(part), Turn(part, part),
                                settings) for part in parts]
        added = with_parts(keep, pinned, whole, scores, part_floors(scores, settings), most,
                           max(settings.min_tools, most // 2))
        return {part: [names[i] for i in rows] for part, rows in zip(parts, added)}

    @staticmethod
    async def _learned(context: StageContext, catalogue: Catalogue, vector: np.ndarray,
                       turn: Turn) -> tuple[np.ndarray, np.ndarray, np.ndarray, bool] | None:
        """Usage memory's (bonus, nearest cosine, examples, model used) per tool, or None
        without any. The bonus includes the scope's learned model's correction once one has
        been trained (in the background; this only reads it)."""
        settings = context.policy.tools
        memory = settings.memory
        if not memory.enabled or context.store is None:
            return None
        scope = memory_scope(context.report.tenant, memory)
        usage = context.state.catalogues.usage
        evidence = await usage.evidence(context.store.redis, scope, catalogue)
        if evidence is None:
            return None
        bonus, nearest = memory_bonus(evidence, vector, memory)

        def text_scores(data: TrainingSet) -> np.ndarray:  # run by the training thread
            return np.stack([hybrid_scores(catalogue, row, Turn(query, query), settings)
                             for row, query in zip(data.vectors, data.queries)])

        model = usage.model_for(scope, catalogue, evidence, memory, text_scores)
        if model is not None:
            bonus = bonus + model.scores(vector)
        return bonus, nearest, evidence.counts, model is not None

    @staticmethod
    def _remember_offer(context: StageContext, query: str, vector: np.ndarray | None,
                        functions: list[dict[str, Any]]) -> Offer | None:
        """Leave the scored query and the offered definitions for ``after_reply``, keyed by the
        session and the chain hash of the request's last message (which the reply follows).
        The caller marks the tools the model will be shown once it has chosen them; a tool
        that ``tool_choice`` names is the only choice the model has."""
        memory = context.policy.tools.memory
        if not memory.learn or context.session is None or not context.chains:
            return None
        handle = context.session
        offer = Offer(memory_scope(handle.tenant, memory), query, vector, functions)
        forced = _forced(context)
        if forced is not None:
            offer.shown = [f.get("name") == forced for f in functions]
        context.state.catalogues.usage.remember_offer(
            (handle.tenant, handle.session_id, context.chains[-1]), offer)
        return offer

    async def after_reply(self, context: StageContext, turns: list[TurnRecord]) -> None:
        """Record, for each tool the model called in the reply, the query this call scored.
        Background work: the next call reads it."""
        memory = context.policy.tools.memory
        if not memory.learn or context.store is None or context.session is None:
            return
        position = len(context.history) - 1
        reply = next((t for t in turns if t.position == position), None)
        if (reply is None or reply.message.get("role") != "assistant" or position < 1
                or len(context.chains) < position):
            return
        handle = context.session
        offer = context.state.catalogues.usage.take_offer(
            (handle.tenant, handle.session_id, context.chains[position - 1]))
        called = called_names(reply.message)
        if offer is None or not called:
            return
        offered = {str(f.get("name") or ""): f for f in offer.functions}
        called = [name for name in called if name in offered]  # a made-up name teaches nothing
        if not called:
            return
        vector = offer.vector if offer.vector is not None else await context.query_vector(offer.query)
        shown = _offer_set(offer, called)
        examples = [Example(name, schema_hash(offered[name]), offer.query, vector, shown)
                    for name in called]
        try:
            await context.state.catalogues.usage.record(context.store.redis, offer.scope,
                                                        examples, memory)
        except (RedisError, OSError) as error:
            log.warning("tool usage: recording failed (%s)", error)

    @staticmethod
    def _pins(names: list[str], history: list[dict[str, Any]], context: StageContext) -> dict[str, str]:
        settings = context.policy.tools
        reasons = {n: "always included by the policy" for n in settings.always_include}
        reasons.update(_named(context))
        for name, why in called_tools(history, settings.recent_calls_window).items():
            reasons.setdefault(name, why)
        offered = set(names)
        return {name: why for name, why in reasons.items() if name in offered}

    @staticmethod
    def _record_drops(context: StageContext, names: list[str], scores: np.ndarray,
                      keep: np.ndarray, floor: float, most: int) -> None:
        ranks = np.empty(len(scores), dtype=np.int64)
        ranks[np.argsort(-scores, kind="stable")] = np.arange(1, len(scores) + 1)
        rounded, rank_list = _rounded(scores), ranks.tolist()
        beyond = (f" of {len(names)} by relevance to the turn; at most {most} tools "
                  "are offered")
        below = f" is below the floor {floor:.3f} (the threshold, or the (soft) best score minus the margin)"
        decisions = context.run.decisions
        for index in np.flatnonzero(~keep).tolist():
            score = rounded[index]
            reason = (f"score {score:.3f}{below}" if scores[index] < floor
                      else f"ranked {rank_list[index]}{beyond}")
            decisions.append(Decision(  # 4 fields validate faster than 10 construct
                action=Action.DROP_TOOL, reason=reason, tool=names[index], score=score))

    @staticmethod
    def _summary(context: StageContext, names: list[str], scores: np.ndarray, keep: np.ndarray,
                 reasons: dict[str, str],
                 learned: tuple[np.ndarray, np.ndarray, np.ndarray, bool] | None = None,
                 parts: dict[str, list[str]] | None = None) -> None:
        kept = [n for n, k in zip(names, keep.tolist()) if k]
        detail: dict[str, Any] = {"offered": len(names), "kept": kept,
                                  "scores": dict(zip(names, _rounded(scores))), "pinned": reasons}
        if parts:  # each part of a multi-part request, with the tools only it brought in
            detail["parts"] = parts
        if learned is not None:  # kept tools with past queries: what memory added, and why
            bonus, nearest, counts, modelled = learned
            rows = np.flatnonzero((counts > 0) & keep)
            detail["memory"] = {
                names[i]: {"examples": n, "nearest": c, "added": b} for i, n, c, b in zip(
                    rows.tolist(), counts[rows].tolist(), _rounded(nearest[rows]), _rounded(bonus[rows]))}
            detail["tools_with_memory"] = int(np.count_nonzero(counts))
            detail["model"] = modelled
        context.run.decisions.append(Decision(
            action=Action.KEEP_TOOLS,
            reason=f"kept {len(kept)} of {len(names)} tools: the most relevant to the turn and "
                   f"the ones that must stay callable",
            detail=detail))


CACHED = ("the client marks its prompt for the provider's cache, and tools come first in it: "
          "the tool list goes out as sent (tools.respect_cache_marks)")


def _named(context: StageContext) -> dict[str, str]:
    """The tools ``tool_choice`` (or a legacy ``function_call``) names, with which one named it."""
    named: dict[str, str] = {}
    choice = context.channels.tool_choice
    if isinstance(choice, dict) and (choice.get("function") or {}).get("name"):
        named[str(choice["function"]["name"])] = "named by tool_choice"
    call = context.channels.function_call
    if isinstance(call, dict) and call.get("name"):
        named.setdefault(str(call["name"]), "named by function_call")
    return named


def _scores_parts(settings: ToolSettings, history: list[dict[str, Any]]) -> bool:
    """Whether this call scores the request's parts: on an agent step's first call only when
    the step keeps what it offered (``step_stable``). The parts are the user's request, the
    same on every call of the step, so what they brought in on the first call stays offered;
    scored again on a later call, where the tool just called is pinned on top of the cap and
    leaves a place free, they would fill it with a new tool and change the list (MetaTool
    tuning queries, a step's second call: 80% instead of 93% the same list)."""
    return settings.parts > 1 and not (settings.step_stable and continues_step(history))


def _forced(context: StageContext) -> str | None:
    """The tool the model is made to call, if any (``tool_choice`` before ``function_call``)."""
    return next(iter(_named(context)), None)


def _offer_set(offer: Offer, called: list[str]) -> OfferSet | None:
    """What the request offered and which of it the model was shown (the tools the stage kept;
    a tool the model called counts as shown, wherever it found the name)."""
    keys = [identity_key(str(f.get("name") or ""), schema_hash(f)) for f in offer.functions]
    if offer.shown is None:
        return OfferSet.of(keys, None)
    named = set(called)
    shown = [key for key, flag, f in zip(keys, offer.shown, offer.functions)
             if flag or f.get("name") in named]
    return OfferSet.of(keys, shown)


def _rounded(scores: np.ndarray) -> list[float]:
    return np.round(scores.astype(np.float64), 4).tolist()
