"""Reading a JSON request body safely: size limit, media type, and a parse error that says where."""

from __future__ import annotations

from typing import Any

import orjson
from fastapi import Request

from agentmem.errors import InvalidRequest, PayloadTooLarge, UnsupportedMediaType


async def read_json(request: Request, max_bytes: int) -> Any:
    media_type = request.headers.get("content-type", "application/json").split(";")[0].strip()
    if media_type and media_type != "application/json" and not media_type.endswith("+json"):
        raise UnsupportedMediaType(f"Expected Content-Type application/json, got {media_type!r}.")
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > max_bytes:
        raise PayloadTooLarge(f"The request body is {declared} bytes; the limit is {max_bytes}.")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > max_bytes:
            raise PayloadTooLarge(f"The request body exceeds the limit of {max_bytes} bytes.")
        chunks.append(chunk)
    raw = b"".join(chunks)
    if not raw.strip():
        raise InvalidRequest("The request body is empty; expected a JSON object.")
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as error:
        raise InvalidRequest(f"The request body is not valid JSON: {error}.") from None
