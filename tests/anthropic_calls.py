"""One Messages call made the way a test asks: plain, or streamed with the SDK's helper."""

from __future__ import annotations

from typing import Any


def message_of(client: Any, stream: bool, **options: Any) -> Any:
    """The reply Message, from ``messages.create`` or from ``messages.stream``'s final message."""
    if stream:
        with client.messages.stream(**options) as events:
            return events.get_final_message()
    return client.messages.create(**options)
