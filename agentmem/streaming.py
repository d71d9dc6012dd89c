"""Relaying a provider stream while assembling the reply that will be stored.

The client gets every chunk as it arrives. The reply is written once, when the stream ends:
whole if it finished, marked ``partial`` with the reason if the provider cut it or the
client went away. A cancelled request cannot await, so the write runs as its own task.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import AsyncGenerator
from typing import Any

from agentmem.errors import ServerShuttingDown
from agentmem.upstream import as_upstream_error


class ReplyAssembler:
    """Folds streamed deltas into one assistant message (content and tool calls by index)."""

    def __init__(self) -> None:
        self.content: list[str] = []
        self.tool_calls: dict[int, dict[str, Any]] = {}
        self.refusal: list[str] = []
        self.finish_reason: str | None = None
        self.usage: dict[str, Any] | None = None
        self.chunks = 0

    def add(self, chunk: Any) -> None:
        self.chunks += 1
        usage = getattr(chunk, "usage", None)
        if usage:
            self.usage = usage.model_dump() if hasattr(usage, "model_dump") else dict(usage)
        for choice in getattr(chunk, "choices", None) or ():
            if getattr(choice, "index", 0) != 0:
                continue
            self.finish_reason = getattr(choice, "finish_reason", None) or self.finish_reason
            delta = getattr(choice, "delta", None)
            if delta is None:
                continue
            if getattr(delta, "content", None):
                self.content.append(delta.content)
            if getattr(delta, "refusal", None):
                self.refusal.append(delta.refusal)
            for call in getattr(delta, "tool_calls", None) or ():
                index = getattr(call, "index", None)
                if index is None:  # providers without indices: a new id starts a new call
                    index = max(self.tool_calls, default=-1) + (1 if getattr(call, "id", None) else 0)
                slot = self.tool_calls.setdefault(
                    index, {"id": None, "type": "function", "function": {"name": "", "arguments": ""}})
                if getattr(call, "id", None):
                    slot["id"] = call.id
                function = getattr(call, "function", None)
                if function is not None:
                    if getattr(function, "name", None):
                        slot["function"]["name"] = function.name
                    if getattr(function, "arguments", None):
                        slot["function"]["arguments"] += function.arguments

    def message(self) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant",
                                   "content": "".join(self.content) if self.content else None}
        calls = [self.tool_calls[i] for i in sorted(self.tool_calls) if self.tool_calls[i]["id"]]
        if calls:
            message["tool_calls"] = calls
        if self.refusal:
            message["refusal"] = "".join(self.refusal)
        return message


# The reason stored with a reply whose stream the client left before its end (every path: the
# library, the proxy, the adapters).
CLIENT_DISCONNECTED = "the client disconnected before the stream ended"
# ... and with one the server ended because it was shutting down (``end_streams_after``).
SERVER_SHUTDOWN = "the server shut down before the stream ended"

_relaying: weakref.WeakSet[asyncio.Task[Any]] = weakref.WeakSet()  # tasks inside relay_stream


def end_streams_after(delay: float) -> None:
    """The server is shutting down: the streams still relayed ``delay`` seconds from now end
    then, each with an error event its client can read and its reply stored partial with the
    reason, before the server's own grace runs out and cuts their connections bare (a cut the
    relay could only take for the client leaving). Safe from a signal handler on the thread of
    the running loop (``agentmem serve``'s SIGTERM)."""
    loop = asyncio.get_running_loop()
    loop.call_soon_threadsafe(loop.call_later, delay, _end_streams)


def _end_streams() -> None:
    for task in list(_relaying):
        task.cancel(msg=SERVER_SHUTDOWN)


async def relay_stream(stream: Any, call: Any) -> AsyncGenerator[Any, None]:
    """Yield the provider's chunks; store the assembled reply when the stream ends."""
    assembler = ReplyAssembler()
    task = asyncio.current_task()
    if task is not None:
        _relaying.add(task)
    try:
        async for chunk in stream:
            assembler.add(chunk)
            yield chunk
    except asyncio.CancelledError as cancelled:
        if task is not None and cancelled.args[:1] == (SERVER_SHUTDOWN,) and task.uncancel() == 0:
            await store_unfinished(call, assembler, SERVER_SHUTDOWN)  # ours: no longer cancelled
            raise ServerShuttingDown("the server is shutting down; the reply so far is stored, "
                                     "marked partial; ask again") from None
        call.hygiene.spawn(store_unfinished(call, assembler, CLIENT_DISCONNECTED))
        raise
    except GeneratorExit:
        call.hygiene.spawn(store_unfinished(call, assembler, CLIENT_DISCONNECTED))
        raise
    except Exception as error:
        await store_unfinished(call, assembler, stream_failure(error))
        raise as_upstream_error(error) from error
    finally:
        if task is not None:
            _relaying.discard(task)
    call.report.usage = assembler.usage
    await call.finish(assembler.message())


def stream_failure(error: BaseException) -> str:
    """The reason stored with a reply whose provider stream broke off."""
    return f"the provider stream failed: {error}"


async def store_unfinished(call: Any, assembler: ReplyAssembler, reason: str) -> None:
    """End a call whose stream stopped early: what arrived is stored marked partial, with the
    reason; a stream that stopped before its first chunk fails the call (nothing to store)."""
    if assembler.chunks == 0:
        await call.fail(RuntimeError(reason))
        return
    call.report.usage = assembler.usage
    await call.finish(assembler.message(), partial=True, error=reason)


class LibraryStream:
    """What the library's ``acompletion(stream=True)`` returns: the provider's chunks, and
    ``_hidden_params["agentmem"]`` (session, report, token counts) as a full reply carries it.

    The call holds its session until the stream ends or is closed: leave early with
    ``await stream.aclose()`` or ``async with stream:`` (a bare async generator would close
    only when garbage-collected, and the session's next call would wait for it)."""

    def __init__(self, chunks: AsyncGenerator[Any, None], agentmem: dict[str, str]) -> None:
        self._chunks = chunks
        self._hidden_params: dict[str, Any] = {"agentmem": agentmem}

    def __aiter__(self) -> LibraryStream:
        return self

    async def __anext__(self) -> Any:
        return await self._chunks.__anext__()

    async def aclose(self) -> None:
        await self._chunks.aclose()

    async def __aenter__(self) -> LibraryStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
