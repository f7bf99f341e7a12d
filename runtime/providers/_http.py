"""The HTTP transport the real providers share: retries, deadlines, error bodies.

The OpenAI-compatible and Anthropic providers (``_openai.py``, ``_anthropic.py``) share
:class:`_HttpTransport`: one ``httpx.AsyncClient``, tenacity retries on 429 / 5xx /
connection and read timeouts, ``Retry-After`` honoured, and a :class:`ProviderStatistics`
record.
"""

from __future__ import annotations

import json
import random
import re
import time
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any, NamedTuple, Self

import anyio
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type, stop_after_attempt

from .._errors import MalformedResponseError, ProviderError, ProviderTimeoutError
from ._base import LlmResponse, ProviderStatistics, Usage, mend
from ._http_errors import body_error, http_error, readable, request_id, retry_wait
from ._settings import ApiDefaults, ProviderOptions, ProviderSettings, resolve

if TYPE_CHECKING:
    # Imported where a transport is made or used: ``import runtime`` does not load httpx
    # (~130 ms, and the CLI modules httpx imports with it) for a process that calls no
    # model over HTTP.
    import httpx

#: Seconds to connect at most (the attempt's ``timeout`` if less), as the official SDKs do:
#: an unreachable host is retried soon, while an answer may take the whole ``timeout``.
_CONNECT = 5.0
# A JSON escape of a surrogate in a raw body: the only way decoded JSON holds one alone.
_SURROGATE_ESCAPE_BYTES = re.compile(rb"\\u[dD][89a-fA-F]")


class Answer(NamedTuple):
    """A 2xx answer's decoded JSON object, and the request id its headers carry."""

    data: dict[str, Any]
    request_id: str | None


class _Retry(Exception):
    """Internal: a retryable failure of one attempt, carrying the error to raise at the end."""

    def __init__(self, error: ProviderError, retry_after: float | None = None) -> None:
        super().__init__(str(error))
        self.error = error
        self.retry_after = retry_after
        self.wait = 0.0  # the wait before the next attempt, decided once (see post_json)


class _HttpTransport:
    """POST JSON with retries; the part both HTTP providers share.

    Retried: HTTP 429 (waiting ``Retry-After`` when it asks for a wait, capped by
    ``retry_wait_max``; not a billing error such as ``insufficient_quota``), HTTP 5xx,
    connect errors and timeouts, read timeouts, dropped connections, and a 2xx answer
    whose JSON is an error object of a passing kind (see ``_http_errors``). Other
    statuses fail at once; a redirect is never followed. Up to ``1 + max_retries``
    attempts; otherwise exponential backoff with jitter starting at
    ``retry_wait_initial`` seconds.

    ``timeout`` bounds each attempt as a whole (connecting, sending, and reading the
    entire answer), not only each read, so a server that drips its answer cannot hold a
    call open; ``deadline`` (None: no bound beyond the attempts') bounds the whole call,
    retries and their waits included. Both end in ProviderTimeoutError. A wait before a
    retry that would pass the deadline (a 429's ``Retry-After``, or the backoff) ends the
    call at once, in a ProviderTimeoutError with the last error's status and reason that
    says how long the wait would have been.

    ``max_response_bytes`` bounds an answer's body as it is decoded (a compressed body is
    counted decompressed, chunk by chunk as it streams): a larger one ends the call at
    once in a ProviderError naming the limit, not retried.
    """

    def __init__(self, settings: ProviderSettings, http_client: httpx.AsyncClient | None) -> None:
        provider, timeout, deadline = settings.name or "", settings.timeout, settings.deadline
        max_retries, max_response_bytes = settings.max_retries, settings.max_response_bytes
        if max_retries < 0:
            raise ValueError("max_retries must be >= 0")
        if max_response_bytes < 1:
            raise ValueError("max_response_bytes must be a positive number of bytes")
        self.max_response_bytes = max_response_bytes
        if not timeout > 0 or (deadline is not None and not deadline > 0):
            raise ValueError("timeout and deadline must be positive numbers of seconds")
        self.provider = provider
        self.timeout = timeout
        self.deadline = deadline
        self.max_retries = max_retries
        self.retry_wait_initial = settings.retry_wait_initial
        self.retry_wait_max = settings.retry_wait_max
        self._owns_client = http_client is None
        if http_client is None:
            import httpx

            http_client = httpx.AsyncClient(timeout=httpx.Timeout(timeout))
        self._client = http_client
        self._stats: dict[str, Any] = {f: getattr(ProviderStatistics(), f) for f in _STAT_FIELDS}

    def statistics(self) -> ProviderStatistics:
        return ProviderStatistics(**self._stats)

    def read(
        self,
        parse: Callable[..., LlmResponse],
        usage: Callable[[str, dict[str, Any]], Usage],
        answer: Answer,
        started: float,
    ) -> LlmResponse:
        """The answer ``parse`` reads from ``answer.data`` (see :func:`parse_guarded`),
        its tokens counted; an answer it cannot read counts as a failed call and raises
        MalformedResponseError with the answer's request id, its tokens still counted
        when ``usage`` can read them (the model was paid for it), and carried as the
        error's ``usage``."""
        data = answer.data
        try:
            response = parse_guarded(self.provider, parse, data, started)
        except MalformedResponseError as exc:
            self._stats["failures"] += 1
            error = _quoting(exc, answer.request_id)
            try:
                paid: Usage | None = usage(self.provider, data)
            except (MalformedResponseError, TypeError, ValueError, AttributeError):
                paid = None  # the usage is what could not be read
            if paid is not None:
                self._count(paid)
                error.usage = paid  # for the caller to record (events/_tokens.py: paid_usage)
            if error is exc:
                raise
            raise error from exc
        self._count(response.usage)
        return response

    def _count(self, usage: Usage) -> None:
        for field in ("input_tokens", "output_tokens", "input_cached", "input_cache_write"):
            self._stats[field] += getattr(usage, field)

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
    ) -> Answer:
        """POST ``payload`` and return the decoded JSON object of a 2xx answer, with its
        request id.

        Blocks through every attempt and wait; cancellation abandons the call. Raises
        ProviderHTTPError, ProviderTimeoutError, ProviderError (connection; a client
        closed, or bound to another event loop: not retried) or MalformedResponseError
        (a 2xx whose body is not a JSON object; not retried). Every error of an answer
        carries its request id. No error shows a password in ``url``."""
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
        answer: Answer | None = None
        ends = None if self.deadline is None else anyio.current_time() + self.deadline
        try:
            with anyio.move_on_after(self.deadline):
                async for attempt in retrying:
                    with attempt:
                        try:
                            answer = await self._attempt(url, body, headers)
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
        if answer is None:
            self._stats["failures"] += 1
            raise ProviderTimeoutError(
                self.provider, f"no answer within the call's deadline of {self.deadline}s"
            )
        return answer

    def _refuse_wait_past(self, ends: float | None, exc: _Retry, attempt: int) -> None:
        """Raise ProviderTimeoutError (with the last error's status) when the next retry
        would come after the call's deadline, whether the provider asked for the wait
        (Retry-After) or it is the backoff: waiting would end in "no answer within the
        deadline", which hides the error that made the call retry."""
        if ends is None or attempt > self.max_retries:
            return  # no deadline, or no retry left: the last error is raised
        # What the provider asked for, not the wait capped at retry_wait_max: a retry
        # before it is refused again, so the call could not succeed in time either way.
        if max(exc.wait, exc.retry_after or 0.0) <= ends - anyio.current_time():
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

    async def _attempt(self, url: str, body: bytes, headers: Mapping[str, str]) -> Answer:
        import httpx  # loaded by __init__ already (the client)

        self._stats["attempts"] += 1
        where = shown_url(url)  # errors name the URL, never a password in it
        request_headers = {"content-type": "application/json", **headers}
        response: httpx.Response | None = None
        try:
            # The whole attempt is bounded: httpx's timeout applies to each read, and a
            # server sending a byte now and then would never trip it.
            with anyio.move_on_after(self.timeout):
                response = await self._post_capped(url, body, request_headers)
        except httpx.TimeoutException as exc:
            kind = "connect" if isinstance(exc, httpx.ConnectTimeout) else "read"
            if isinstance(exc, httpx.WriteTimeout | httpx.PoolTimeout):
                kind = "write" if isinstance(exc, httpx.WriteTimeout) else "pool"
            error: ProviderError = ProviderTimeoutError(
                self.provider,
                f"{kind} timeout after {self.timeout}s calling {where}",
                retryable=True,
            )
            error.__cause__ = exc
            raise _Retry(error) from exc
        except (httpx.NetworkError, httpx.RemoteProtocolError) as exc:
            error = ProviderError(
                self.provider, f"connection failed calling {where}: {exc!r}", retryable=True
            )
            error.__cause__ = exc
            raise _Retry(error) from exc
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            raise ProviderError(self.provider, f"request to {where} failed: {exc!r}") from exc
        except RuntimeError as exc:  # httpx's word for a client that can send no more
            raise ProviderError(
                self.provider,
                f"cannot call {where}: {exc} (a provider cannot call after aclose(), nor from "
                "another event loop than the one it first called from: make a new one)",
            ) from exc
        if response is None:
            raise _Retry(
                ProviderTimeoutError(
                    self.provider,
                    f"no complete answer within {self.timeout}s calling {where}",
                    retryable=True,
                )
            )

        status, said_id = response.status_code, request_id(response)
        if status >= 300:  # an error, or a redirect (never followed)
            failed = http_error(self.provider, response)
            if failed.retryable:
                raise _Retry(failed, retry_wait(response))
            raise failed
        try:
            data = response.json()
            if _SURROGATE_ESCAPE_BYTES.search(response.content):
                data = mend(data)  # the answer is recorded: its text must be UTF-8
        except (ValueError, RecursionError) as exc:
            shown = readable(response, 200)
            raise MalformedResponseError(
                self.provider,
                f"response body is not JSON: {shown!r}",
                status=status,
                request_id=said_id,
            ) from exc
        if not isinstance(data, dict):
            raise MalformedResponseError(
                self.provider,
                f"response body is not a JSON object: {str(data)[:200]!r}",
                request_id=said_id,
            )
        said = body_error(self.provider, response, data)
        if said is not None:  # an error object sent with a 2xx status
            if said.retryable:
                raise _Retry(said, retry_wait(response))
            raise said
        return Answer(data, said_id)

    async def _post_capped(
        self, url: str, body: bytes, headers: Mapping[str, str]
    ) -> httpx.Response:
        """POST and read the answer whole, its decoded bytes counted as they stream:
        ProviderError once they pass ``max_response_bytes`` (the rest is never read)."""
        import httpx

        timeout = httpx.Timeout(self.timeout, connect=min(self.timeout, _CONNECT))
        request = self._client.build_request(
            "POST", url, content=body, headers=headers, timeout=timeout
        )
        # Never followed, whatever a caller's client does: a redirect to another origin
        # would carry the key (httpx drops only ``authorization``), and the body again.
        streamed = await self._client.send(request, stream=True, follow_redirects=False)
        chunks: list[bytes] = []
        size = 0
        try:
            async for chunk in streamed.aiter_bytes():
                size += len(chunk)
                if size > self.max_response_bytes:
                    raise ProviderError(
                        self.provider,
                        f"the answer from {shown_url(url)} is larger than the limit of "
                        f"{self.max_response_bytes} bytes (max_response_bytes), decompressed",
                        status=streamed.status_code,
                    )
                chunks.append(chunk)
        finally:
            await streamed.aclose()
        # The body is decoded already: the answer is rebuilt without its content-encoding,
        # so nothing decodes it twice.
        kept = [
            (name, value)
            for name, value in streamed.headers.multi_items()
            if name.lower() not in ("content-encoding", "content-length", "transfer-encoding")
        ]
        return httpx.Response(
            streamed.status_code, headers=kept, content=b"".join(chunks), request=request
        )


_STAT_FIELDS = ProviderStatistics.__struct_fields__


class _HttpProvider:
    """What both HTTP providers share: their settings (resolved against the API's
    ``DEFAULTS``: see ``_settings``), the transport made from them, statistics, closing,
    use as a context manager."""

    DEFAULTS: ApiDefaults

    def __init__(
        self,
        given: ProviderSettings | None,
        options: ProviderOptions,
        http_client: httpx.AsyncClient | None,
    ) -> None:
        self.settings = settings = resolve(given, options, self.DEFAULTS)
        self.name = settings.name or ""
        self._api_key = settings.api_key or ""
        self.base_url = settings.base_url or ""
        self.model = settings.model or ""
        self._transport = _HttpTransport(settings, http_client)

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


def _quoting(error: MalformedResponseError, said_id: str | None) -> MalformedResponseError:
    """``error`` with the request id of the answer it is about, which the provider's
    support asks for (a parser's error knows no headers)."""
    if said_id is None or error.request_id is not None:
        return error
    return MalformedResponseError(
        error.provider,
        error.reason,
        status=error.status,
        error_type=error.error_type,
        code=error.code,
        request_id=said_id,
    )


def elapsed_ms(started: float) -> float:
    return (time.perf_counter() - started) * 1000.0


def shown_url(url: str) -> str:
    """``url`` as an error shows it: credentials in it (``user:password@``) as ``***``."""
    scheme, sep, rest = url.partition("://")
    authority, slash, path = rest.partition("/")
    if "@" not in authority:
        return url
    return f"{scheme}{sep}***@{authority.rpartition('@')[2]}{slash}{path}"
