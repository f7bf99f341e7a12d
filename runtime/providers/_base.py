"""LLM message types, the provider protocol, and the HTTP transport the real providers share.

Everything a node, a judge or an ``llm_decide`` edge says to a model goes through
:class:`LlmProvider.complete` with an :class:`LlmRequest` and comes back as an
:class:`LlmResponse`. The types are provider-neutral msgspec Structs, so a turn can be
written to the event log and replayed without ever calling a model again.

The OpenAI-compatible and Anthropic providers (``_openai.py``, ``_anthropic.py``) share
:class:`_HttpTransport`: one ``httpx.AsyncClient``, tenacity retries on 429 / 5xx /
connection and read timeouts, ``Retry-After`` honoured, and a :class:`ProviderStatistics`
record.
"""

from __future__ import annotations

import email.utils
import json
import random
import re
import reprlib
import time
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, Protocol, Self, runtime_checkable

import anyio
import msgspec
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type, stop_after_attempt

from .._errors import MalformedResponseError, ProviderError, ProviderHTTPError, ProviderTimeoutError

if TYPE_CHECKING:
    # Imported where a transport is made or used: ``import runtime`` does not load httpx
    # (~130 ms, and the CLI modules httpx imports with it) for a process that calls no
    # model over HTTP.
    import httpx

__all__ = [
    "ChatMessage",
    "LlmProvider",
    "LlmRequest",
    "LlmResponse",
    "ProviderStatistics",
    "ToolCall",
    "ToolSpec",
    "Usage",
    "parse_json_object",
]


class ToolCall(msgspec.Struct, frozen=True, kw_only=True):
    """One tool invocation the model asked for; ``arguments`` is already a decoded object."""

    id: str
    name: str
    arguments: dict[str, Any]


class ChatMessage(msgspec.Struct, frozen=True, kw_only=True):
    """One message of a conversation.

    ``assistant`` messages may carry ``tool_calls``; each ``tool`` message answers one of
    them (``tool_call_id``, and ``name`` for providers or logs that want it).
    """

    role: Literal["user", "assistant", "tool", "system"]
    content: str = ""
    tool_calls: list[ToolCall] = []
    tool_call_id: str | None = None
    name: str | None = None


class ToolSpec(msgspec.Struct, frozen=True, kw_only=True):
    """A tool as the model sees it: a name, a description and a JSON schema object."""

    name: str
    description: str = ""
    parameters: dict[str, Any]


class LlmRequest(msgspec.Struct, frozen=True, kw_only=True):
    """One completion request.

    ``tool_choice`` is ``"auto"``, ``"none"``, ``"required"`` or the name of one tool.
    ``model`` overrides the provider's default model. ``max_tokens`` caps the answer's
    length; None leaves it to the API (a provider that must send a cap sends its own
    default). ``json_response`` asks for a single
    JSON object as the answer. ``purpose`` is a free label (``"turn"``, ``"judge"``,
    ``"route"``) that lets the scripted provider and the metrics tell calls apart.
    """

    messages: list[ChatMessage]
    system: str = ""
    tools: list[ToolSpec] = []
    tool_choice: str | None = None
    model: str | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    json_response: bool = False
    purpose: str = "turn"


class Usage(msgspec.Struct, frozen=True, kw_only=True):
    """Token counts of one completion."""

    input_tokens: int = 0
    output_tokens: int = 0


class LlmResponse(msgspec.Struct, frozen=True, kw_only=True):
    """The model's answer: text, tool calls, usage, and the wall time of the call.

    ``latency_ms`` covers the whole ``complete`` call, retries and their waits included.
    """

    text: str = ""
    tool_calls: list[ToolCall] = []
    usage: Usage = msgspec.field(default_factory=Usage)
    model: str = ""
    stop_reason: str | None = None
    latency_ms: float = 0.0


@runtime_checkable
class LlmProvider(Protocol):
    """What nodes, judges and edges need from a model.

    ``complete`` blocks until the model answered (retries included); cancelling it
    abandons the call. It raises only :class:`ProviderError` subclasses.
    """

    name: str

    async def complete(self, request: LlmRequest) -> LlmResponse: ...


class ProviderStatistics(msgspec.Struct, frozen=True, kw_only=True):
    """Counters of one provider since it was created.

    ``attempts`` counts HTTP requests sent, ``retries`` the ones that were repeats, and
    ``retry_wait_s`` the total time slept between attempts. ``failures`` counts calls
    that raised: an HTTP error or timeout after the last attempt, a connection failure,
    and an answer that could not be read (MalformedResponseError), whether its body was
    not JSON or not the provider's shape.
    """

    calls: int = 0
    attempts: int = 0
    retries: int = 0
    failures: int = 0
    retry_wait_s: float = 0.0
    input_tokens: int = 0
    output_tokens: int = 0


# ---------------------------------------------------------------------------------------
# JSON object extraction from model text

_FENCE = re.compile(r"```[ \t]*(?:json|JSON)?[ \t]*\n?(.*?)```", re.DOTALL)
# Bounds the work on pathological text full of braces.
_MAX_BRACE_ATTEMPTS = 256
# A JSON escape of a surrogate: the only way decoded JSON holds one that may be alone.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_SURROGATE_ESCAPE_BYTES = re.compile(rb"\\u[dD][89a-fA-F]")


def mend(value: Any) -> Any:
    """Decoded JSON with each lone surrogate in its strings (JSON's ``"\\ud800"``, half a
    pair) replaced by U+FFFD: text that no log can store (it is not UTF-8) would fail the
    event that records it. Call it only where the source held a surrogate escape."""
    if isinstance(value, str):
        return value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    if isinstance(value, list):
        return [mend(item) for item in value]
    if isinstance(value, dict):
        return {mend(key): mend(item) for key, item in value.items()}
    return value


def parse_json_object(text: str) -> dict[str, Any]:
    """Return the first JSON object found in ``text``.

    Accepts a bare object, an object inside a fenced code block (```json ...```), or
    one surrounded by prose or trailing text; a lone surrogate escape in its strings
    reads as U+FFFD (see :func:`mend`). Raises :class:`MalformedResponseError` when no
    JSON object can be found.
    """
    decoder = json.JSONDecoder()
    candidates = [m.group(1) for m in _FENCE.finditer(text)]
    candidates.append(text)
    for candidate in candidates:
        start = candidate.find("{")
        attempts = 0
        while start != -1 and attempts < _MAX_BRACE_ATTEMPTS:
            attempts += 1
            try:
                value, _ = decoder.raw_decode(candidate, start)
                if isinstance(value, dict) and _SURROGATE_ESCAPE.search(candidate):
                    value = mend(value)
            except (ValueError, RecursionError):  # not JSON, or nested too deep to read
                value = None
            if isinstance(value, dict):
                return value
            start = candidate.find("{", start + 1)
    shown = text if len(text) <= 200 else text[:197] + "..."
    raise MalformedResponseError("llm", f"no JSON object in model text: {shown!r}")


def decode_tool_arguments(provider: str, tool: str, raw: Any) -> dict[str, Any]:
    """Decode a tool call's arguments (a JSON string or an object) into a dict.

    Raises :class:`MalformedResponseError` naming the tool and the bad text.
    """
    if isinstance(raw, dict):
        return raw
    if raw is None or raw == "":
        return {}
    if isinstance(raw, str):
        try:
            value = json.loads(raw)
            if _SURROGATE_ESCAPE.search(raw):
                value = mend(value)
        except (ValueError, RecursionError) as exc:
            raise MalformedResponseError(
                provider, f"tool call {tool!r} has invalid JSON arguments {shown(raw)}: {exc!r}"
            ) from exc
        if isinstance(value, dict):
            return value
    raise MalformedResponseError(
        provider, f"tool call {tool!r} arguments are not a JSON object: {shown(raw)}"
    )


# ---------------------------------------------------------------------------------------
# Shared HTTP transport with retries


class _Retry(Exception):
    """Internal: a retryable failure of one attempt, carrying the error to raise at the end."""

    def __init__(self, error: ProviderError, retry_after: float | None = None) -> None:
        super().__init__(str(error))
        self.error = error
        self.retry_after = retry_after
        self.wait = 0.0  # the wait before the next attempt, decided once (see post_json)


def parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delta-seconds or an HTTP-date)."""
    if value is None:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        current = time.time() if now is None else now
        seconds = when.timestamp() - current
    return max(0.0, seconds)


def _error_message(response: httpx.Response) -> str:
    """The provider's own error text from an error body (OpenAI and Anthropic shapes)."""
    try:
        body = response.json()
    except (ValueError, RecursionError):
        text = response.text.strip()
        return text[:500] if text else response.reason_phrase
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict) and isinstance(err.get("message"), str):
            return str(err["message"])
        if isinstance(err, str):
            return err
        if isinstance(body.get("message"), str):
            return str(body["message"])
    return json.dumps(body)[:500]


class _HttpTransport:
    """POST JSON with retries; the part both HTTP providers share.

    Retried: HTTP 429 (waiting ``Retry-After`` when given, capped by ``retry_wait_max``),
    HTTP 5xx, connect errors and timeouts, read timeouts, dropped connections. Other
    statuses fail at once. Up to ``1 + max_retries`` attempts; otherwise exponential
    backoff with jitter starting at ``retry_wait_initial`` seconds.

    ``timeout`` bounds each attempt as a whole (connecting, sending, and reading the
    entire answer), not only each read, so a server that drips its answer cannot hold a
    call open; ``deadline`` (None: no bound beyond the attempts') bounds the whole call,
    retries and their waits included. Both end in ProviderTimeoutError. A wait before a
    retry that would pass the deadline (a 429's ``Retry-After``, or the backoff) ends the
    call at once, in a ProviderTimeoutError with the last error's status and reason that
    says how long the wait would have been.
    """

    def __init__(
        self,
        *,
        provider: str,
        timeout: float,
        max_retries: int,
        retry_wait_initial: float,
        retry_wait_max: float,
        http_client: httpx.AsyncClient | None,
        deadline: float | None = None,
    ) -> None:
        if max_retries < 0:
            raise ValueError("max_retries must be >= 0")
        if not timeout > 0 or (deadline is not None and not deadline > 0):
            raise ValueError("timeout and deadline must be positive numbers of seconds")
        self.provider = provider
        self.timeout = timeout
        self.deadline = deadline
        self.max_retries = max_retries
        self.retry_wait_initial = retry_wait_initial
        self.retry_wait_max = retry_wait_max
        self._owns_client = http_client is None
        if http_client is None:
            import httpx

            http_client = httpx.AsyncClient(timeout=httpx.Timeout(timeout))
        self._client = http_client
        self._stats: dict[str, Any] = {f: getattr(ProviderStatistics(), f) for f in _STAT_FIELDS}

    def statistics(self) -> ProviderStatistics:
        return ProviderStatistics(**self._stats)

    def read(
        self, parse: Callable[..., LlmResponse], data: dict[str, Any], started: float
    ) -> LlmResponse:
        """The answer ``parse`` reads from ``data`` (see :func:`parse_guarded`), its
        tokens counted; an answer it cannot read counts as a failed call and raises
        MalformedResponseError."""
        try:
            response = parse_guarded(self.provider, parse, data, started)
        except MalformedResponseError:
            self._stats["failures"] += 1
            raise
        self._stats["input_tokens"] += response.usage.input_tokens
        self._stats["output_tokens"] += response.usage.output_tokens
        return response

    async def aclose(self) -> None:
        if self._owns_client:
            await self._client.aclose()

    def _next_wait(self, exc: _Retry, attempt: int) -> float:
        """Seconds to wait after failed attempt number ``attempt``: the provider's
        Retry-After (capped), else exponential backoff with jitter."""
        if exc.retry_after is not None:
            return min(exc.retry_after, self.retry_wait_max)
        backoff = self.retry_wait_initial * 2.0 ** (attempt - 1)
        # Jitter over the upper half keeps concurrent callers from retrying in lockstep.
        return min(self.retry_wait_max, backoff) * random.uniform(0.5, 1.0)

    def _wait(self, state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome is not None else None
        return exc.wait if isinstance(exc, _Retry) else 0.0

    def _before_sleep(self, state: RetryCallState) -> None:
        wait = state.next_action.sleep if state.next_action is not None else 0.0
        self._stats["retries"] += 1
        self._stats["retry_wait_s"] += wait

    async def post_json(
        self,
        url: str,
        payload: Mapping[str, Any],
        headers: Mapping[str, str],
    ) -> dict[str, Any]:
        """POST ``payload`` and return the decoded JSON object of a 2xx answer.

        Blocks through every attempt and wait; cancellation abandons the call. Raises
        ProviderHTTPError, ProviderTimeoutError, ProviderError (connection) or
        MalformedResponseError (a 2xx whose body is not a JSON object; not retried).
        """
        self._stats["calls"] += 1
        body = json.dumps(payload).encode()
        retrying = AsyncRetrying(
            stop=stop_after_attempt(self.max_retries + 1),
            wait=self._wait,
            retry=retry_if_exception_type(_Retry),
            before_sleep=self._before_sleep,
            sleep=anyio.sleep,
            reraise=True,
        )
        data: dict[str, Any] | None = None
        ends = None if self.deadline is None else anyio.current_time() + self.deadline
        try:
            with anyio.move_on_after(self.deadline):
                async for attempt in retrying:
                    with attempt:
                        try:
                            data = await self._attempt(url, body, headers)
                        except _Retry as exc:
                            number = attempt.retry_state.attempt_number
                            exc.wait = self._next_wait(exc, number)
                            self._refuse_wait_past(ends, exc, number)
                            raise
        except _Retry as exc:
            self._stats["failures"] += 1
            raise exc.error from exc.error.__cause__
        except ProviderError:
            self._stats["failures"] += 1
            raise
        if data is None:
            self._stats["failures"] += 1
            raise ProviderTimeoutError(
                self.provider, f"no answer within the call's deadline of {self.deadline}s"
            )
        return data

    def _refuse_wait_past(self, ends: float | None, exc: _Retry, attempt: int) -> None:
        """Raise ProviderTimeoutError (with the last error's status) when the next retry
        would come after the call's deadline, whether the provider asked for the wait
        (Retry-After) or it is the backoff: waiting would end in "no answer within the
        deadline", which hides the error that made the call retry."""
        if ends is None or attempt > self.max_retries:
            return  # no deadline, or no retry left: the last error is raised
        if exc.wait <= ends - anyio.current_time():
            return
        if exc.retry_after is not None:
            why = f"the provider asked to retry after {exc.retry_after:g}s"
        else:
            why = f"the next retry would come after {exc.wait:.3g}s"
        raise ProviderTimeoutError(
            self.provider,
            f"{why}, past the call's deadline of {self.deadline}s ({exc.error.reason})",
            status=exc.error.status,
        ) from exc.error

    async def _attempt(self, url: str, body: bytes, headers: Mapping[str, str]) -> dict[str, Any]:
        import httpx  # loaded by __init__ already (the client)

        self._stats["attempts"] += 1
        request_headers = {"content-type": "application/json", **headers}
        response: httpx.Response | None = None
        try:
            # The whole attempt is bounded: httpx's timeout applies to each read, and a
            # server sending a byte now and then would never trip it.
            with anyio.move_on_after(self.timeout):
                response = await self._client.post(
                    url,
                    content=body,
                    headers=request_headers,
                    timeout=httpx.Timeout(self.timeout),
                )
        except httpx.TimeoutException as exc:
            kind = "connect" if isinstance(exc, httpx.ConnectTimeout) else "read"
            if isinstance(exc, httpx.WriteTimeout | httpx.PoolTimeout):
                kind = "write" if isinstance(exc, httpx.WriteTimeout) else "pool"
            error: ProviderError = ProviderTimeoutError(
                self.provider, f"{kind} timeout after {self.timeout}s calling {url}", retryable=True
            )
            error.__cause__ = exc
            raise _Retry(error) from exc
        except (httpx.NetworkError, httpx.RemoteProtocolError) as exc:
            error = ProviderError(
                self.provider, f"connection failed calling {url}: {exc!r}", retryable=True
            )
            error.__cause__ = exc
            raise _Retry(error) from exc
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            raise ProviderError(self.provider, f"request to {url} failed: {exc!r}") from exc
        if response is None:
            raise _Retry(
                ProviderTimeoutError(
                    self.provider,
                    f"no complete answer within {self.timeout}s calling {url}",
                    retryable=True,
                )
            )

        status = response.status_code
        if status == 429 or status >= 500:
            error = ProviderHTTPError(
                self.provider, _error_message(response), status=status, retryable=True
            )
            retry_after = parse_retry_after(response.headers.get("retry-after"))
            raise _Retry(error, retry_after if status == 429 else None)
        if status >= 400:
            raise ProviderHTTPError(self.provider, _error_message(response), status=status)
        try:
            data = response.json()
            if _SURROGATE_ESCAPE_BYTES.search(response.content):
                data = mend(data)  # the answer is recorded: its text must be UTF-8
        except (ValueError, RecursionError) as exc:
            shown = response.text[:200]
            raise MalformedResponseError(
                self.provider, f"response body is not JSON: {shown!r}", status=status
            ) from exc
        if not isinstance(data, dict):
            raise MalformedResponseError(
                self.provider, f"response body is not a JSON object: {str(data)[:200]!r}"
            )
        return data


_STAT_FIELDS = ProviderStatistics.__struct_fields__


class _HttpProvider:
    """What both HTTP providers share: statistics, closing, use as a context manager."""

    _transport: _HttpTransport

    def statistics(self) -> ProviderStatistics:
        """Counters since creation: calls, HTTP attempts, retries, waits, failures, tokens."""
        return self._transport.statistics()

    async def aclose(self) -> None:
        """Close the HTTP client if this provider created it."""
        await self._transport.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


def require(provider: str, data: Mapping[str, Any], key: str, kind: type | tuple[type, ...]) -> Any:
    """``data[key]`` checked against ``kind``; MalformedResponseError naming the field if not."""
    if key not in data:
        raise MalformedResponseError(provider, f"response has no {key!r} field")
    value = data[key]
    if not isinstance(value, kind):
        raise MalformedResponseError(
            provider, f"response field {key!r} has the wrong type: {type(value).__name__}"
        )
    return value


_REPR = reprlib.Repr()
_REPR.maxstring = 120
_REPR.maxother = 120


def shown(value: Any) -> str:
    """A short, bounded repr of a value from a provider's answer (depth and size capped,
    so a hostile answer cannot blow up an error message)."""
    return _REPR.repr(value)


def token_count(provider: str, usage: Mapping[str, Any], key: str) -> int:
    """``usage[key]`` as a token count (absent or null: 0); MalformedResponseError if it is
    not a non-negative integer."""
    value = usage.get(key)
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise MalformedResponseError(
            provider, f"usage field {key!r} is not a token count: {shown(value)}"
        )
    return value


def parse_guarded(
    provider: str,
    parse: Callable[..., LlmResponse],
    data: dict[str, Any],
    started: float,
) -> LlmResponse:
    """``parse(data, latency_ms=...)``, with any error of reading a strange answer (a
    wrong type deep inside it, nesting too deep) raised as MalformedResponseError."""
    try:
        return parse(data, latency_ms=elapsed_ms(started))
    except (TypeError, ValueError, KeyError, AttributeError, RecursionError) as exc:
        raise MalformedResponseError(provider, f"unreadable answer: {exc!r}") from exc


def elapsed_ms(started: float) -> float:
    return (time.perf_counter() - started) * 1000.0
