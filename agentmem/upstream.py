"""The one place agentmem talks to providers: litellm, configured for offline use.

Importing litellm normally fetches a model-cost map from the internet and prints debug
hints; both are turned off before the import. Provider errors become UpstreamError with the
provider's status, so clients see the same status they would have seen without agentmem.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import re
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Any, Protocol

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("LITELLM_LOG", "ERROR")
# litellm's httpx handler for OpenAI-style providers. Its default path goes through the
# openai SDK, whose request transform walks every message (~0.15 ms each: 140 ms for a
# 1000-turn history, paid again on every call). Set it to "false" to get the SDK path back.
os.environ.setdefault("EXPERIMENTAL_OPENAI_BASE_LLM_HTTP_HANDLER", "true")

import httpx
import litellm
import openai

from agentmem.errors import UpstreamError
from agentmem.loop_executor import INLINE_PROVIDERS, inline_setup

litellm.suppress_debug_info = True
litellm.drop_params = False

_litellm_internal_call: ContextVar[bool] | None
try:  # recent litellm: calls litellm makes for itself skip its logging machinery
    from litellm._internal_context import is_internal_call as _internal_call_flag
    _litellm_internal_call = _internal_call_flag
except ImportError:  # older litellm: its logging always runs
    _litellm_internal_call = None

# Where litellm keeps its logging callbacks (the ones a user registers, and integrations').
_CALLBACK_LISTS = ("callbacks", "success_callback", "failure_callback", "input_callback",
                   "_async_success_callback", "_async_failure_callback", "_async_input_callback",
                   "service_callback")

_NOT_FOR_PROVIDER = {"model"}

# What a client of the proxy may set in a request body: the OpenAI chat parameters and a few
# provider-neutral ones litellm maps (timeout, top_k, thinking). Anything else a client sends
# (api_base, base_url, api_key, extra_headers, litellm's own keys...) would let a client steer
# the proxy's credentials to a URL of its choosing, so the proxy drops it (the library's
# callers are the operator's own code and may pass any litellm keyword).
CLIENT_PARAMS = frozenset({
    "model", "messages", "audio", "frequency_penalty", "function_call", "functions",
    "logit_bias", "logprobs", "max_completion_tokens", "max_tokens", "metadata", "modalities",
    "n", "parallel_tool_calls", "prediction", "presence_penalty", "prompt_cache_key",
    "reasoning_effort", "response_format", "safety_identifier", "seed", "service_tier", "stop",
    "store", "stream", "stream_options", "temperature", "tool_choice", "tools", "top_logprobs",
    "top_p", "user", "verbosity", "web_search_options", "timeout", "top_k", "thinking",
})


# agentmem's own controls a client may put in ``metadata`` (the engine reads them).
_OWN_METADATA = frozenset({"session_id", "agentmem_stateful"})


def unsent_metadata_note(body: dict) -> str | None:
    """A warning when a proxy client's ``metadata`` will not reach the provider: litellm takes
    the keyword as its own logging metadata (its callbacks see it) and sends it to OpenAI
    only with ``litellm.enable_preview_features``. agentmem's own keys are not the client's
    data and need no warning."""
    metadata = body.get("metadata")
    if not isinstance(metadata, dict) or not set(metadata) - _OWN_METADATA \
            or getattr(litellm, "enable_preview_features", False):
        return None
    return "metadata is not sent to the provider (litellm keeps it for its logging callbacks)"


def client_params(body: dict, allowed: frozenset[str] = CLIENT_PARAMS) -> tuple[dict, list[str]]:
    """The body with only the fields a proxy client may set, and the names of those dropped."""
    dropped = sorted(key for key in body if key not in allowed)
    if not dropped:
        return body, []
    return {key: value for key, value in body.items() if key in allowed}, dropped


class Upstream(Protocol):
    """Where a clean request goes: one method, like httpx's transport. Tests and other
    providers plug in here (``Hygiene(upstream=...)``)."""

    async def complete(self, request: dict[str, Any]) -> Any:
        """Send an OpenAI chat request (``stream`` may be set); return litellm's response or
        stream. Raise ``UpstreamError`` with the provider's status on failure."""
        ...


class RouteLike(Protocol):
    def resolved_params(self) -> dict[str, Any]: ...


class LitellmUpstream:
    """The default upstream: litellm, with configured model routes applied.

    ``prices_responses=False`` is for callers that never hand litellm's response object to
    anyone (the proxy serialises it to JSON): litellm's price of the response, which it
    stores in ``response._hidden_params``, is then skipped while no litellm callback is
    registered, since nobody could read it (see ``_skip_unread_prices``)."""

    def __init__(self, route: Callable[[str], RouteLike | None] | None = None, *,
                 prices_responses: bool = True) -> None:
        self.route = route
        self.prices_responses = prices_responses

    async def complete(self, request: dict[str, Any]) -> Any:
        route = self.route(request["model"]) if self.route is not None else None
        return await acompletion(litellm_kwargs(request, route.resolved_params() if route else None),
                                 priced=self.prices_responses)

    async def warm(self) -> None:
        """Pay litellm's first-call cost (about 1 s of lazy imports and set-up in a thread)
        before a client does: one request to a closed loopback port, refused at once."""
        with contextlib.suppress(Exception):
            await acompletion({"model": "openai/agentmem-warm-up", "api_key": "warm-up",
                               "api_base": "http://127.0.0.1:1/v1", "max_retries": 0,
                               "timeout": 2, "messages": [{"role": "user", "content": "warm up"}]})


def litellm_kwargs(body: dict, route_params: dict | None) -> dict:
    """The request body as litellm keyword arguments, with a configured route applied.

    ``metadata`` goes as a copy: litellm writes its own logging fields into the dict it is
    given (timings, and a stream's hidden parameters with the provider's URL), which must not
    reach the client's request, whose metadata the Responses API echoes back."""
    kwargs = {k: v for k, v in body.items() if k not in _NOT_FOR_PROVIDER}
    if isinstance(kwargs.get("metadata"), dict):
        kwargs["metadata"] = dict(kwargs["metadata"])
    if route_params:
        kwargs.update(route_params)
    else:
        kwargs["model"] = body["model"]
    return kwargs


def litellm_logs_anything() -> bool:
    """Whether any litellm logging callback is registered (a user's Langfuse, a CustomLogger)."""
    return any(getattr(litellm, name, None) for name in _CALLBACK_LISTS)


# Set while a call's price would be read by nobody; litellm's pricing hook checks it.
_price_unread: ContextVar[bool] = ContextVar("agentmem_price_unread", default=False)


def _skip_unread_prices(price: Callable[..., Any]) -> Callable[..., Any]:
    def response_cost_calculator(*args: Any, **kwargs: Any) -> Any:
        return None if _price_unread.get() else price(*args, **kwargs)
    response_cost_calculator.__wrapped__ = price  # type: ignore[attr-defined]
    return response_cost_calculator


# litellm prices every response as it builds it, through this module-level function (looked
# up per call), and for a model missing from its price map it looks the model up again to
# explain the failure: ~0.6 ms of CPU per call, 11% of the ``off`` proxy's overhead
# (`agentmem bench overhead`). The wrapper returns "no price" (what litellm returns for an
# unpriced model) only while ``_price_unread`` is set (``_unheard``); every other caller in
# the process, and every call while a callback listens, gets litellm's price as before.
if callable(getattr(litellm, "response_cost_calculator", None)) and not hasattr(
        litellm.response_cost_calculator, "__wrapped__"):
    litellm.response_cost_calculator = _skip_unread_prices(litellm.response_cost_calculator)


@contextlib.contextmanager
def _unheard(*flags: ContextVar[bool] | None) -> Iterator[None]:
    """Set ``flags`` for one call while no litellm callback is registered (checked once per
    call); a registered callback gets litellm's work exactly as before.

    - litellm's ``is_internal_call``: after every call litellm schedules its success logging,
      a task that builds the standard logging payload and prices the call again, ~0.3 ms of
      CPU that lands on the proxy's call path (it runs while the call waits on Redis); a call
      litellm makes for itself skips it.
    - ``_price_unread``: the price litellm stores in the response (``_skip_unread_prices``),
      for callers that never hand the response object on."""
    wanted = [flag for flag in flags if flag is not None]
    if not wanted or litellm_logs_anything():
        yield
        return
    tokens = [(flag, flag.set(True)) for flag in wanted]
    try:
        yield
    finally:
        for flag, token in reversed(tokens):
            flag.reset(token)


async def acompletion(kwargs: dict, *, priced: bool = True):
    """Call litellm; map its exceptions to UpstreamError with the provider's status.
    ``priced=False``: litellm's price of the response is skipped while nobody listens.
    litellm's request building runs on the loop where that is safe (agentmem/loop_executor.py;
    only on a loop whose default executor allows it, and only for a provider litellm has
    already set up: its first call imports and prepares modules, ~1 s, in a thread)."""
    provider = _inline_provider(kwargs)
    inline = inline_setup() if provider in _set_up else contextlib.nullcontext()
    try:
        with inline, _unheard(_litellm_internal_call, None if priced else _price_unread):
            return await litellm.acompletion(**kwargs)
    except Exception as error:  # litellm raises many types; each carries a status
        raise as_upstream_error(error) from error
    finally:
        if provider is not None:
            _set_up.add(provider)


# The providers in INLINE_PROVIDERS that litellm has served (or failed) a call for.
_set_up: set[str] = set()


def _inline_provider(kwargs: dict) -> str | None:
    """The request's litellm provider if its request building may run inline, else None."""
    model, provider = kwargs.get("model"), kwargs.get("custom_llm_provider")
    base = kwargs.get("api_base") or kwargs.get("base_url")
    if not isinstance(model, str) or not all(v is None or isinstance(v, str) for v in (provider, base)):
        return None  # litellm reports what it cannot read; the cache needs hashable keys
    resolved = _provider(model, provider, base)
    return resolved if resolved in INLINE_PROVIDERS else None


@functools.lru_cache(maxsize=256)
def _provider(model: str, custom_llm_provider: str | None, api_base: str | None) -> str | None:
    """litellm's provider for a model (cached: the answer depends on these three only)."""
    try:
        return litellm.get_llm_provider(model=model, custom_llm_provider=custom_llm_provider,
                                        api_base=api_base)[1]
    except Exception:  # noqa: BLE001 - unknown here; litellm reports it on the call itself
        return None


async def aembedding(kwargs: dict):
    """``litellm.aembedding``, its errors mapped as for chat (the passthrough route's call)."""
    try:
        return await litellm.aembedding(**kwargs)
    except Exception as error:  # noqa: BLE001 - mapped to the provider's status
        raise as_upstream_error(error) from error


async def atext_completion(kwargs: dict):
    """``litellm.atext_completion`` (legacy completions), errors mapped as for chat."""
    try:
        return await litellm.atext_completion(**kwargs)
    except Exception as error:  # noqa: BLE001 - mapped to the provider's status
        raise as_upstream_error(error) from error


_TIMEOUTS = (litellm.Timeout, openai.APITimeoutError, httpx.TimeoutException, asyncio.TimeoutError,
             TimeoutError)
_UNREACHABLE = (litellm.APIConnectionError, openai.APIConnectionError, httpx.TransportError,
                ConnectionError)


def _causes(error: BaseException) -> list[BaseException]:
    """The error and what it wraps: litellm reports a refused connection as a 500
    InternalServerError whose cause chain holds the ConnectError."""
    out: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and len(out) < 10:
        out.append(current)
        current = current.__cause__ or current.__context__
    return out


_REPR = re.compile(r"<[\w.]+ object at 0x[0-9a-f]+>")
_TRACEBACK = "\nTraceback (most recent call last):"


def as_upstream_error(error: BaseException) -> UpstreamError:
    """The provider's failure as the client should see it: the provider's own status for its
    refusals and its overload (Anthropic's 529, which clients retry), 504 when it did not answer
    in time, 502 when it could not be reached (litellm reports all three as 500, which would
    blame agentmem); no object reprs in the message."""
    if isinstance(error, UpstreamError):
        return error
    status = getattr(error, "status_code", None)
    causes = _causes(error)
    if status == 500:  # litellm files a provider's other 5xx (Anthropic's 529 overloaded) as 500
        status = next((own for c in causes[1:] if isinstance(own := getattr(c, "status_code", None), int)
                       and own > 500), status)
    if any(isinstance(c, _TIMEOUTS) for c in causes):
        status = 504
    elif any(isinstance(c, _UNREACHABLE) for c in causes) or not isinstance(status, int) \
            or status < 400:
        status = 502
    message = getattr(error, "message", None) or str(error) or type(error).__name__
    message = str(message).split(_TRACEBACK, 1)[0]  # litellm appends the server's traceback
    message = _REPR.sub("", message).strip()[:1000]
    error_type = {400: "invalid_request_error", 401: "authentication_error",
                  403: "permission_error", 404: "not_found_error",
                  429: "rate_limit_error", 502: "upstream_unreachable",
                  504: "upstream_timeout"}.get(status, "upstream_error")
    upstream = UpstreamError(f"upstream: {message}", status_code=status, error_type=error_type,
                             code=type(error).__name__)
    upstream.headers = _retry_headers(error) or None
    return upstream


_RETRY_HEADERS = ("retry-after", "retry-after-ms")


def _retry_headers(error: BaseException) -> dict[str, str]:
    """The provider's ``Retry-After`` (and OpenAI's ``retry-after-ms``), passed on so the
    client's backoff waits as long as the provider asked, not its own guess."""
    for source in (getattr(error, "litellm_response_headers", None),
                   getattr(getattr(error, "response", None), "headers", None)):
        if source:
            found = {name: str(source[name]) for name in _RETRY_HEADERS if name in source}
            if found:
                return found
    return {}


def context_window(model: str) -> int | None:
    try:
        return litellm.get_model_info(model).get("max_input_tokens")
    except Exception:  # unknown model: no window known
        return None
