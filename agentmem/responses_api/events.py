"""A chat completion stream as Responses stream events (``response.created`` ...
``response.completed``)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from agentmem.responses_api.reply import response_object


class EventStream:
    """Chat completion chunks in, Responses stream events out (as dicts, in order).

    One message item (opened at the first text) and one function_call item per tool call (in
    the order the provider started them); each is closed when the stream ends, then
    ``response.completed`` carries the whole response.
    """

    def __init__(self, request: dict[str, Any], response_id: str) -> None:
        self.request = request
        self.response_id = response_id
        self.suffix = response_id.removeprefix("resp_")  # of the item ids
        self.created_at = time.time()
        self.sequence = 0
        self.output: list[dict[str, Any]] = []
        self.text: dict[str, Any] | None = None  # the open message item
        self.calls: dict[int, dict[str, Any]] = {}  # chat tool-call index -> its item
        self.finish_reason: str | None = None
        self.usage: dict[str, Any] | None = None
        self.model: str | None = None

    def _event(self, kind: str, **fields: Any) -> dict[str, Any]:
        event = {"type": kind, "sequence_number": self.sequence, **fields}
        self.sequence += 1
        return event

    def _response(self, status: str) -> dict[str, Any]:
        return response_object(self.request, self.response_id, created_at=self.created_at,
                               output=self.output, status=status, finish_reason=self.finish_reason,
                               usage=self.usage, model=self.model)

    def start(self) -> Iterator[dict[str, Any]]:
        snapshot = self._response("in_progress")
        yield self._event("response.created", response=snapshot)
        yield self._event("response.in_progress", response=snapshot)

    def add(self, chunk: dict[str, Any]) -> Iterator[dict[str, Any]]:
        """The events one chat chunk (``model_dump(exclude_none=True)``) stands for."""
        self.usage = chunk.get("usage") or self.usage
        self.model = self.model or chunk.get("model")
        for choice in chunk.get("choices") or ():
            if choice.get("index", 0) != 0:
                continue
            self.finish_reason = choice.get("finish_reason") or self.finish_reason
            delta = choice.get("delta") or {}
            if delta.get("content"):
                yield from self._text_delta(delta["content"])
            if delta.get("refusal"):
                yield from self._text_delta(delta["refusal"], "refusal")
            for call in delta.get("tool_calls") or ():
                yield from self._call_delta(call)

    def _text_delta(self, text: str, kind: str = "output_text") -> Iterator[dict[str, Any]]:
        """Text (or, with ``kind="refusal"``, a refusal) into the message item, opening the
        item and its content part as needed."""
        if self.text is None:
            self.text = {"id": f"msg_{self.suffix}_0", "type": "message",
                         "status": "in_progress", "role": "assistant", "content": []}
            self.output.append(self.text)
            yield self._event("response.output_item.added", output_index=len(self.output) - 1,
                              item={**self.text, "content": []})
        output_index, parts = self.output.index(self.text), self.text["content"]
        field = "refusal" if kind == "refusal" else "text"
        index = next((i for i, part in enumerate(parts) if part["type"] == kind), None)
        if index is None:
            part: dict[str, Any] = {"type": kind, field: ""}
            if kind == "output_text":
                part.update(annotations=[], logprobs=[])
            parts.append(part)
            index = len(parts) - 1
            yield self._event("response.content_part.added", item_id=self.text["id"],
                              output_index=output_index, content_index=index, part=dict(part))
        parts[index][field] += text
        extra: dict[str, Any] = {"logprobs": []} if kind == "output_text" else {}
        yield self._event(f"response.{kind}.delta", item_id=self.text["id"],
                          output_index=output_index, content_index=index, delta=text, **extra)

    def _call_delta(self, call: dict[str, Any]) -> Iterator[dict[str, Any]]:
        index = call.get("index")
        if index is None:  # providers without indices: a new id starts a new call
            index = max(self.calls, default=-1) + (1 if call.get("id") else 0)
        function = call.get("function") or {}
        item = self.calls.get(index)
        if item is None:
            item = {"id": f"fc_{self.suffix}_{len(self.calls)}", "type": "function_call",
                    "status": "in_progress", "call_id": call.get("id"),
                    "name": function.get("name") or "", "arguments": ""}
            self.calls[index] = item
            self.output.append(item)
            yield self._event("response.output_item.added", output_index=len(self.output) - 1,
                              item=dict(item))
        arguments = function.get("arguments") or ""
        if arguments:
            item["arguments"] += arguments
            yield self._event("response.function_call_arguments.delta", item_id=item["id"],
                              output_index=self.output.index(item), delta=arguments)

    def finish(self) -> Iterator[dict[str, Any]]:
        """Close every open item, then ``response.completed`` (or ``incomplete``)."""
        for index, item in enumerate(self.output):
            if item["type"] == "message":
                for content_index, part in enumerate(item["content"]):
                    if part["type"] == "output_text":
                        yield self._event("response.output_text.done", item_id=item["id"],
                                          output_index=index, content_index=content_index,
                                          text=part["text"], logprobs=[])
                    else:
                        yield self._event("response.refusal.done", item_id=item["id"],
                                          output_index=index, content_index=content_index,
                                          refusal=part["refusal"])
                    yield self._event("response.content_part.done", item_id=item["id"],
                                      output_index=index, content_index=content_index,
                                      part=dict(part))
            else:
                yield self._event("response.function_call_arguments.done", item_id=item["id"],
                                  output_index=index, name=item["name"],
                                  arguments=item["arguments"])
            item["status"] = "completed"
            yield self._event("response.output_item.done", output_index=index, item=dict(item))
        response = self._response("completed")
        kind = "response.completed" if response["status"] == "completed" else "response.incomplete"
        yield self._event(kind, response=response)

    def failed(self, error: dict[str, Any]) -> dict[str, Any]:
        """``response.failed``: the provider's stream broke; the error says how."""
        response = self._response("failed")
        response["error"] = {"code": error.get("code") or error.get("type") or "upstream_error",
                             "message": error.get("message") or "the provider stream failed"}
        return self._event("response.failed", response=response)
