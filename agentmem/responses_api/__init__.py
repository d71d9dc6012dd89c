"""The OpenAI Responses API as the engine's chat conversation, and back. Pure: no I/O.

The engine works on OpenAI chat messages (its store, stages and upstream all do), so a
Responses request is translated into a chat request, cleaned and sent like any other, and the
chat reply (or stream) is translated back into a Responses object (or Responses events).

Input items map to chat messages one way only where chat has a place for them: a message item
becomes a chat message (``input_text``/``output_text`` parts become ``text`` parts), a run of
``function_call`` items becomes one assistant message's ``tool_calls``, and each
``function_call_output`` becomes a ``tool`` message. The translation remembers which items
each message came from, so ``items_for`` maps the messages the provider received back to the
client's own items, byte for byte, for every message hygiene left unchanged. Anything chat has
no place for (hosted tools, reasoning items, item references...) is refused with a 400 that
names the field, before anything is stored.

Modules: ``request`` (a Responses request as a chat request), ``items`` (chat messages back to
input items), ``reply`` (a chat reply as a Responses object), ``events`` (a chat stream as
Responses stream events).
"""

from agentmem.responses_api.events import EventStream
from agentmem.responses_api.items import items_for, items_of_message
from agentmem.responses_api.reply import output_items, response_object, usage_of
from agentmem.responses_api.request import ChatTranslation, chat_tool_choice, chat_tools, to_chat

__all__ = ["ChatTranslation", "EventStream", "chat_tool_choice", "chat_tools", "items_for",
           "items_of_message", "output_items", "response_object", "to_chat", "usage_of"]
