"""A deterministic OpenAI-compatible upstream for benchmarks, examples and tests.

It is a real HTTP server (``agentmem echo-upstream``), not a mock: it speaks the chat
completions API, streams SSE the way OpenAI does, returns (parallel) tool calls, and records
every request body it receives so a test can assert what reached the provider.

``POST /_echo/script`` with ``{"match": TEXT, "reply": TEXT}`` makes every later request whose
messages contain TEXT answer with that reply (a test scripts an LLM judge's verdicts this
way); ``DELETE /_echo/script`` forgets the scripts.

Directives in the last user or tool message steer it:
``[[tool:NAME {"json": "args"}]]`` (repeatable: parallel calls; in a user message only, so a
tool result that quotes the request does not call again), ``[[status:503]]`` (fail with
that status), ``[[cut:N]]`` (drop the connection after N streamed chunks), ``[[slow:MS]]``,
``[[stall:N,MS]]`` (a stream pauses MS ms after N chunks, then goes on), ``[[retry_after:S]]``
(a ``[[status:...]]`` answer carries ``Retry-After: S``).

``POST /v1/embeddings`` answers deterministic vectors (a hash of each input) and
``POST /v1/completions`` answers ``echo: PROMPT`` (streamed or not); both record what they
received and honour ``[[status:N]]`` and ``[[slow:MS]]`` in the input or prompt.

``POST /v1/messages`` speaks Anthropic's Messages API the same way (``agentmem.echo_messages``).
"""

from __future__ import annotations

import asyncio
import base64
import collections
import hashlib
import itertools
import re
import struct
import time
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.responses import Response, StreamingResponse

_DIRECTIVE = re.compile(r"\[\[(tool|status|cut|slow|stall|retry_after):([^\s\]]+)(?:\s+(\{.*?\}))?\]\]",
                        re.S)


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content or ""


def _json(data: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(data), status_code=status, media_type="application/json")


def create_echo_app(*, keep: int = 2000) -> FastAPI:
    app = FastAPI(title="agentmem echo upstream")
    received: collections.deque = collections.deque(maxlen=keep)
    ids = itertools.count(1)
    scripts: list[tuple[str, str]] = []

    @app.get("/v1/models")
    async def models():
        return _json({"object": "list", "data": [
            {"id": "echo", "object": "model", "created": 0, "owned_by": "agentmem"}]})

    @app.get("/_echo/requests")
    async def requests():
        return _json(list(received))

    @app.post("/_echo/script")
    async def script(request: Request):
        rule = orjson.loads(await request.body())
        scripts.append((str(rule["match"]), str(rule["reply"])))
        return _json({"scripts": len(scripts)})

    @app.delete("/_echo/script")
    async def unscript():
        scripts.clear()
        return _json({"scripts": 0})

    @app.delete("/_echo/requests")
    async def clear():
        received.clear()
        return _json({"cleared": True})

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        body = orjson.loads(await request.body())
        received.append(body)
        messages = body.get("messages") or []
        last = messages[-1] if messages else {}
        text = _text(last)
        directives = _DIRECTIVE.findall(text)
        for kind, value, _ in directives:
            if kind == "slow":
                await asyncio.sleep(int(value) / 1000)
            if kind == "status":
                return _failure(int(value), directives)
        tool_names = {t.get("function", {}).get("name") for t in body.get("tools") or ()}
        calls = [
            {"id": f"call_{next(ids)}", "type": "function",
             "function": {"name": name, "arguments": args or "{}"}}
            for kind, name, args in directives
            if kind == "tool" and last.get("role") == "user" and name in tool_names
        ]
        content: str | None
        everything = "\n".join(_text(m) for m in messages)
        scripted = next((reply for match, reply in scripts if match in everything), None)
        if scripted is not None:
            content = scripted
        elif last.get("role") == "tool":
            results = [_text(m) for m in messages if m.get("role") == "tool"][-3:]
            content = "tool results: " + " | ".join(r[:200] for r in results)
        else:
            content = None if calls else "echo: " + _DIRECTIVE.sub("", text).strip()[:500]
        completion_id = f"chatcmpl-echo{next(ids)}"
        created = int(time.time())
        prompt_tokens = sum(len(_text(m).split()) + 3 for m in messages)
        completion_tokens = len((content or "").split()) + 5 * len(calls)
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                 "total_tokens": prompt_tokens + completion_tokens}
        finish = "tool_calls" if calls else "stop"
        model = body.get("model", "echo")
        if not body.get("stream"):
            message: dict[str, Any] = {"role": "assistant", "content": content, "refusal": None}
            if calls:
                message["tool_calls"] = calls
            return _json({"id": completion_id, "object": "chat.completion", "created": created,
                          "model": model, "choices": [{"index": 0, "message": message,
                                                       "logprobs": None, "finish_reason": finish}],
                          "usage": usage, "system_fingerprint": "fp_echo"})
        cut = next((int(v) for k, v, _ in directives if k == "cut"), None)
        stall = next((_stall(v) for k, v, _ in directives if k == "stall"), None)
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        return StreamingResponse(
            _stream(completion_id, created, model, content, calls, finish, usage,
                    include_usage, cut, stall),
            media_type="text/event-stream")

    _add_passthrough_routes(app, received, ids)

    from agentmem.echo_messages import add_messages_api  # here: it imports this module

    add_messages_api(app, received, ids, scripts)
    return app


def _failure(code: int, directives: list[tuple[str, str, str]]) -> Response:
    """The error a ``[[status:CODE]]`` asks for, with ``Retry-After`` if ``[[retry_after:S]]``."""
    response = _json({"error": {"message": f"echo upstream failing with {code} as asked",
                                "type": "server_error" if code >= 500 else "invalid_request_error",
                                "param": None, "code": None}}, status=code)
    retry = next((v for k, v, _ in directives if k == "retry_after"), None)
    if retry is not None:
        response.headers["Retry-After"] = retry
    return response


def _stall(value: str) -> tuple[int, float]:
    """``N,MS`` of ``[[stall:N,MS]]``: after N chunks, pause MS milliseconds."""
    after, _, ms = value.partition(",")
    return int(after), int(ms or 0) / 1000


def _add_passthrough_routes(app: FastAPI, received: collections.deque, ids: itertools.count) -> None:
    """The embeddings and legacy completions endpoints (for the proxy's passthrough routes)."""

    async def steered(text: str) -> Response | None:
        for kind, value, _ in _DIRECTIVE.findall(text):
            if kind == "slow":
                await asyncio.sleep(int(value) / 1000)
            if kind == "status":
                return _json({"error": {"message": f"echo upstream failing with {value} as asked",
                                        "type": "server_error", "param": None, "code": None}},
                             status=int(value))
        return None

    @app.post("/v1/embeddings")
    async def embeddings(request: Request):
        body = orjson.loads(await request.body())
        received.append(body)
        inputs = body.get("input")
        texts = [inputs] if isinstance(inputs, str) else [str(i) for i in inputs or ()]
        failure = await steered(" ".join(texts))
        if failure is not None:
            return failure
        size = int(body.get("dimensions") or 8)
        data = []
        for index, text in enumerate(texts):
            digest = hashlib.blake2b(text.encode(), digest_size=size).digest()
            vector = [round(b / 255 - 0.5, 4) for b in digest]
            encoded: Any = vector
            if body.get("encoding_format") == "base64":
                encoded = base64.b64encode(struct.pack(f"<{size}f", *vector)).decode()
            data.append({"object": "embedding", "index": index, "embedding": encoded})
        tokens = sum(len(t.split()) for t in texts)
        return _json({"object": "list", "data": data, "model": body.get("model", "echo"),
                      "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})

    @app.post("/v1/completions")
    async def completions(request: Request):
        body = orjson.loads(await request.body())
        received.append(body)
        prompt = body.get("prompt")
        text = prompt if isinstance(prompt, str) else " ".join(str(p) for p in prompt or ())
        failure = await steered(text)
        if failure is not None:
            return failure
        answer = "echo: " + _DIRECTIVE.sub("", text).strip()[:500]
        head = {"id": f"cmpl-echo{next(ids)}", "object": "text_completion",
                "created": int(time.time()), "model": body.get("model", "echo")}
        tokens = len(text.split())
        usage = {"prompt_tokens": tokens, "completion_tokens": len(answer.split()),
                 "total_tokens": tokens + len(answer.split())}
        if not body.get("stream"):
            return _json({**head, "choices": [{"text": answer, "index": 0, "logprobs": None,
                                               "finish_reason": "stop"}], "usage": usage})

        async def pieces():
            for i, word in enumerate(answer.split(" ")):
                choice = {"text": (" " if i else "") + word, "index": 0, "logprobs": None,
                          "finish_reason": None}
                yield b"data: " + orjson.dumps({**head, "choices": [choice]}) + b"\n\n"
            last = {"text": "", "index": 0, "logprobs": None, "finish_reason": "stop"}
            yield b"data: " + orjson.dumps({**head, "choices": [last]}) + b"\n\n"
            yield b"data: [DONE]\n\n"

        return StreamingResponse(pieces(), media_type="text/event-stream")


CUT_AFTER_S = 0.25


async def _stream(completion_id, created, model, content, calls, finish, usage, include_usage, cut,
                  stall=None):
    def chunk(delta, finish_reason=None, with_usage=None, choices=True):
        data = {"id": completion_id, "object": "chat.completion.chunk", "created": created,
                "model": model, "system_fingerprint": "fp_echo",
                "choices": [{"index": 0, "delta": delta, "logprobs": None,
                             "finish_reason": finish_reason}] if choices else []}
        if include_usage:
            data["usage"] = with_usage
        return b"data: " + orjson.dumps(data) + b"\n\n"

    pieces = [chunk({"role": "assistant", "content": "", "refusal": None})]
    if content:
        words = content.split(" ")
        pieces += [chunk({"content": (" " if i else "") + w}) for i, w in enumerate(words)]
    for index, call in enumerate(calls):
        args = call["function"]["arguments"]
        half = len(args) // 2
        pieces.append(chunk({"tool_calls": [{"index": index, "id": call["id"], "type": "function",
                                             "function": {"name": call["function"]["name"],
                                                          "arguments": args[:half]}}]}))
        pieces.append(chunk({"tool_calls": [{"index": index, "function": {"arguments": args[half:]}}]}))
    pieces.append(chunk({}, finish))
    if include_usage:
        pieces.append(chunk(None, with_usage=usage, choices=False))
    for sent, piece in enumerate(pieces):
        if cut is not None and sent >= cut:
            # Pause first, so the reader has taken in what was sent: aiohttp (LiteLLM's transport)
            # drops data it holds unread when the connection then breaks, which made the chunks a
            # client sees before the cut depend on the machine's load.
            await asyncio.sleep(CUT_AFTER_S)
            raise ConnectionAbortedError("echo upstream cutting the stream as asked")
        if stall is not None and sent == stall[0]:
            await asyncio.sleep(stall[1])
        yield piece
        await asyncio.sleep(0)
    yield b"data: [DONE]\n\n"


def serve_in_thread(port: int = 0) -> tuple[str, FastAPI]:
    """Start the echo upstream on a daemon thread (examples, notebooks); returns its /v1 URL.

    ``port=0`` picks a free port. The app is returned so a caller can read what it received.
    """
    import socket
    import threading

    import uvicorn

    if port == 0:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
    app = create_echo_app()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        if not thread.is_alive():
            raise RuntimeError(f"the echo upstream could not start on port {port}")
        time.sleep(0.02)
    return f"http://127.0.0.1:{port}/v1", app
