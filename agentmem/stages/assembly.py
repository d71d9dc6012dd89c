"""The assembly stage: lay out what the earlier stages kept (README: Context assembly).

Runs after pruning and before the budget, and only does what its policy section turns on
(everything is off by default, and the stage is not in any preset's list):

- ``ordering``: a tool output that is a list of documents puts the most relevant at the
  start and the end (``agentmem.assembly.ordering``). The conversation's own turns are
  never reordered (chronology is meaning), only documents inside one message.
- ``compression``: over the prompt budget, the least valuable words inside kept sentences
  go (``agentmem.assembly.compression``), so the budget stage drops fewer whole messages.
- ``formatting``: the kept earlier turns become one ``<earlier_turns>`` block with a note of
  how many were omitted or shortened, and tool outputs ``<document>`` blocks
  (``agentmem.assembly.formatting``).

Every change is a ``Decision`` (``reorder_documents``, ``compress_tokens``, ``format_context``).
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from agentmem.assembly import compression, formatting, ordering
from agentmem.conversation import agent_step_start, last_user_index, query_of, recent_start
from agentmem.lexical import terms
from agentmem.messages import text_of
from agentmem.models.runtime import embed, run_inference
from agentmem.report import Action, Decision
from agentmem.stages.base import Draft, OutgoingMessage, Stage, StageContext
from agentmem.text import split_sentences


class OrderingSettings(BaseModel):
    """Lost-in-the-middle ordering of document lists inside tool outputs."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = Field(False, description="Reorder document lists: most relevant first and last.")
    roles: tuple[Literal["tool", "user"], ...] = Field(
        ("tool",), description="Whose messages may hold document lists "
        "(user: RAG apps that paste retrieved passages into the user turn).")
    scope: Literal["current_step", "all"] = Field(
        "current_step", description="current_step: only the messages of the current agent step "
        "and the newest user turn (earlier ones stay as sent, so prompt caches keep working); "
        "all: every kept message.")
    min_documents: int = Field(3, ge=2, description="Fewer documents than this: left alone.")
    lexical_weight: float = Field(
        0.5, ge=0, description="Weight of the share of query terms a document contains, next to "
        "its MiniLM cosine to the newest user message.")


class FormattingSettings(BaseModel):
    """XML-tagged blocks with a one-line note of what was removed."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    earlier_turns: bool = Field(
        False, description="Kept turns older than the recent window become one <earlier_turns> "
        "block (in the first older user message) noting how many were omitted or shortened.")
    documents: bool = Field(
        False, description="Tool outputs of the recent window become <document source=... "
        "turn=...> blocks, noting how many sentences were omitted.")


class CompressionSettings(BaseModel):
    """Token-level compression inside kept sentences when the prompt is over budget."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = Field(
        False, description="Over the budget stage's prompt budget: drop low-value words inside "
        "kept sentences (pruner token probabilities), oldest messages first, before the budget "
        "stage drops whole messages.")
    keep_rate: float = Field(
        0.6, gt=0, le=1, description="Share of a compressed sentence's unprotected words kept "
        "(numbers, names, quoted and key-like words are always kept).")
    min_words: int = Field(6, ge=1, description="Sentences shorter than this are left whole.")
    max_messages: int = Field(64, ge=1, description="Messages the pruner scores per call.")


class AssemblySettings(BaseModel):
    """The assembly stage (see agentmem/stages/assembly.py)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ordering: OrderingSettings = Field(default_factory=OrderingSettings)
    formatting: FormattingSettings = Field(default_factory=FormattingSettings)
    compression: CompressionSettings = Field(default_factory=CompressionSettings)


class AssemblyStage(Stage):
    name: ClassVar[str] = "assembly"
    settings_model = AssemblySettings
    runs_after = frozenset({"quarantine", "tools", "prune"})  # lays out what they kept

    async def apply(self, draft: Draft, context: StageContext) -> None:
        settings: AssemblySettings = context.policy.assembly
        if settings.ordering.enabled:
            await self._order(draft, context, settings.ordering)
        if settings.compression.enabled:  # before the tags, which it must not touch
            await self._compress(draft, context, settings.compression)
        if settings.formatting.documents:
            self._format_documents(draft, context)
        if settings.formatting.earlier_turns:
            self._format_earlier_turns(draft, context)

    async def _order(self, draft: Draft, context: StageContext, settings: OrderingSettings) -> None:
        history = context.history
        last_user = last_user_index(history)
        if last_user is None:
            return
        first = agent_step_start(history) if settings.scope == "current_step" else 0
        found: list[tuple[OutgoingMessage, ordering.DocumentList]] = []
        for outgoing in draft.messages:
            content = outgoing.message.get("content")
            if outgoing.index < first or outgoing.role not in settings.roles \
                    or not isinstance(content, str):
                continue
            documents = ordering.find_documents(content, settings.min_documents)
            if documents is not None:
                found.append((outgoing, documents))
        if not found:
            return
        query = text_of(history[last_user])
        texts = [text[:2000] for _, documents in found for text in documents.texts]
        vectors = await embed(context.state.embedder.encode, texts, bounded=False)
        query_vector = await context.query_vector(query)
        wanted = set(terms(query))
        relevance = [
            (float(vector @ query_vector) if vector is not None else 0.0)
            + settings.lexical_weight * (len(wanted.intersection(terms(text))) / len(wanted)
                                         if wanted else 0.0)
            for vector, text in zip(vectors, texts)]
        start = 0
        for outgoing, documents in found:
            scores = relevance[start: start + len(documents.texts)]
            start += len(documents.texts)
            order = ordering.edges_first(scores)
            if order == list(range(len(order))):
                continue
            draft.replace_message(outgoing.index, {**outgoing.message,
                                                   "content": documents.render(order)})
            context.run.decisions.append(Decision(
                action=Action.REORDER_DOCUMENTS, message_index=outgoing.index,
                position=outgoing.index, score=max(scores),
                reason=f"{len(order)} documents ({documents.kind}): the most relevant to the "
                       "query first and last, the least in the middle",
                detail={"order": order, "scores": [round(s, 4) for s in scores]}))

    async def _compress(self, draft: Draft, context: StageContext,
                        settings: CompressionSettings) -> None:
        from agentmem.ingest import message_tokens, tools_tokens
        from agentmem.models.pruner import cached_pruner
        from agentmem.models.registry import pruner_path
        from agentmem.stages.budget import budget_for

        budget = budget_for(context.model, context.policy.budget)
        if budget is None:
            return
        tokens = {m.index: message_tokens(m.message) for m in draft.messages}
        over = sum(tokens.values()) + tools_tokens(draft.tools) - budget
        if over <= 0:
            return
        newest = last_user_index(context.history)
        candidates = [m for m in draft.messages
                      if m.role in {"user", "assistant", "tool"} and m.index != newest
                      and isinstance(m.message.get("content"), str)
                      and compression.is_compressible_message(m.message["content"])]
        candidates = candidates[: settings.max_messages]  # oldest first: they matter least
        if not candidates:
            return
        pieces = [compression.prose_sentences(m.message["content"]) for m in candidates]
        query = query_of(context.history, context.channels.excluded_spans)
        pruner = await run_inference(cached_pruner,
                                     pruner_path(context.policy.prune.checkpoint))
        scores = await run_inference(pruner.score_batch,
                                     [(query, [s for _, _, s in p] or [""]) for p in pieces])
        for outgoing, sentences, score in zip(candidates, pieces, scores):
            if over <= 0:
                break
            content = outgoing.message["content"]
            words = compression.token_words(pruner.tokenizer, [s for _, _, s in sentences],
                                            score.kept_fraction_by_threshold)
            shorter = compression.rebuild(content, sentences, words, settings.keep_rate,
                                          settings.min_words)
            if shorter == content:
                continue
            message = {**outgoing.message, "content": shorter}
            after = message_tokens(message)
            over -= tokens[outgoing.index] - after
            draft.replace_message(outgoing.index, message)
            context.run.decisions.append(Decision(
                action=Action.COMPRESS_TOKENS, message_index=outgoing.index,
                position=outgoing.index, score=None,
                reason=f"over the prompt budget of {budget} tokens: the least valuable words "
                       f"of its sentences dropped (keep rate {settings.keep_rate})",
                detail={"tokens_before": tokens[outgoing.index], "tokens_after": after}))

    @staticmethod
    def _format_documents(draft: Draft, context: StageContext) -> None:
        history = context.history
        start = recent_start(history, context.policy.prune.keep_recent_exchanges)
        names = _tool_names(history)
        for outgoing in draft.messages:
            content = outgoing.message.get("content")
            if outgoing.role != "tool" or outgoing.index < start or not isinstance(content, str):
                continue
            original = history[outgoing.index].get("content")
            note = None
            if isinstance(original, str) and original != content:  # pruned, or only reordered
                before, after = len(split_sentences(original)), len(split_sentences(content))
                note = f"{before - after} of {before} sentences omitted" if after < before else None
            source = f"tool:{names.get(str(outgoing.message.get('tool_call_id')), 'unknown')}"
            draft.replace_message(outgoing.index, {**outgoing.message, "content": formatting.document(
                content, source, outgoing.index, note)})
            context.run.decisions.append(Decision(
                action=Action.FORMAT_CONTEXT, message_index=outgoing.index, position=outgoing.index,
                reason="tool output tagged as a document" + (f" ({note})" if note else ""),
                detail={"source": source}))

    @staticmethod
    def _format_earlier_turns(draft: Draft, context: StageContext) -> None:
        history = context.history
        start = recent_start(history, context.policy.prune.keep_recent_exchanges)
        older_positions = [i for i in range(start)
                           if history[i].get("role") not in {"system", "developer"}]
        older = [m for m in draft.messages if m.index < start and m.role not in {"system", "developer"}]
        kept = {m.index for m in older}
        omitted = sum(1 for i in older_positions if i not in kept)
        shortened = sum(1 for m in older if m.message is not history[m.index])
        host = next((m for m in older if m.role == "user" and not m.message.get("tool_calls")), None)
        if host is None or not (omitted or shortened) \
                or any(not isinstance(m.message.get("content"), (str, type(None))) for m in older):
            return  # nothing elided, no user turn to hold the block, or parts (images) to keep
        names = _tool_names(history)
        pieces = [formatting.Piece(m.role, m.index, _piece_text(m.message),
                                   f"tool:{names.get(str(m.message.get('tool_call_id')), 'unknown')}"
                                   if m.role == "tool" else None) for m in older]
        block = formatting.earlier_turns(pieces, omitted, shortened)
        draft.drop_indices({m.index for m in older if m is not host})
        draft.replace_message(host.index, {**host.message, "content": block})
        context.run.decisions.append(Decision(
            action=Action.FORMAT_CONTEXT, message_index=host.index, position=host.index,
            reason=f"{len(older)} kept earlier turns as one <earlier_turns> block: "
                   + formatting.omission_note(omitted, shortened),
            detail={"turns": [m.index for m in older], "omitted": omitted, "shortened": shortened}))


def _piece_text(message: dict[str, Any]) -> str:
    """An earlier message's text; a tool call is shown as the call it was."""
    text = text_of(message)
    calls = [f"[called {c.get('function', {}).get('name', '')}"
             f"({c.get('function', {}).get('arguments', '')})]"
             for c in message.get("tool_calls") or ()]
    return " ".join(part for part in [text, *calls] if part)


def _tool_names(history: list[dict[str, Any]]) -> dict[str, str]:
    """tool_call_id -> the name of the function it called."""
    return {call["id"]: call.get("function", {}).get("name", "")
            for message in history if message.get("role") == "assistant"
            for call in message.get("tool_calls") or () if isinstance(call, dict) and "id" in call}

