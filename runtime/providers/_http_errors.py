"""What an HTTP answer that is no model answer says: its error (the provider's message,
error type, code and request id), whether it is retried, and how long to wait first.

Used by the transport (``_http.py``) for error statuses, redirects, and a 2xx answer
whose JSON body is an error object (what a compatible server or a proxy may send).
"""

from __future__ import annotations

import email.utils
import html
import json
import re
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .._errors import ProviderHTTPError
from ._base import mend

if TYPE_CHECKING:
    import httpx

__all__ = [
    "body_error",
    "http_error",
    "parse_retry_after",
    "readable",
    "request_id",
    "retry_wait",
    "retryable",
]


def parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delta-seconds or an HTTP-date);
    None when absent or when it asks for no wait (0, negative, a date past, NaN): as the
    official SDKs do, the caller then backs off by itself rather than retry at once."""
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
    return seconds if seconds > 0 else None  # NaN too: no comparison holds for it


#: Statuses retried, as the official SDKs do: timeout, conflict, rate limit, server
#: errors (529 is Anthropic's "overloaded").
_RETRYABLE = frozenset({408, 409, 429})

#: The error types and codes of a passing failure, retried when a 2xx answer carries one
#: (Anthropic's ``overloaded_error``, ``api_error``, ``rate_limit_error``; OpenAI's
#: ``server_error``, ``rate_limit_exceeded``).
_TRANSIENT = frozenset(
    {"overloaded_error", "api_error", "rate_limit_error", "server_error", "rate_limit_exceeded"}
)

#: The error types and codes of a billing state (OpenAI's ``insufficient_quota``, sent
#: with a 429; Anthropic's ``billing_error``): never retried (the official SDKs retry
#: every 429), since no wait ends it: only a change of plan or credit does.
_BILLING = frozenset({"insufficient_quota", "billing_error"})


def retryable(response: httpx.Response, words: tuple[str | None, ...] = ()) -> bool:
    """Whether an error answer is retried: the provider's ``x-should-retry`` header
    decides when present, else a billing error type or code among ``words`` (never),
    else the status (a redirect never is)."""
    should: str = response.headers.get("x-should-retry", "").strip().lower()
    if should in ("true", "false"):
        return should == "true"
    if _BILLING.intersection(words):
        return False
    return response.status_code in _RETRYABLE or response.status_code >= 500


def retry_wait(response: httpx.Response) -> float | None:
    """The wait the provider asked for: ``retry-after-ms``, else ``Retry-After``; None
    when neither asks for a wait (see :func:`parse_retry_after`)."""
    millis = response.headers.get("retry-after-ms")
    if millis is not None:
        try:
            seconds = float(millis) / 1000.0
        except ValueError:
            pass
        else:
            if seconds > 0:  # not NaN either
                return seconds
    return parse_retry_after(response.headers.get("retry-after"))


def http_error(provider: str, response: httpx.Response) -> ProviderHTTPError:
    """The error of an error answer, with the provider's message, error type, code and
    request id (OpenAI and Anthropic body shapes and headers), retryable as
    :func:`retryable` says; a redirect names where it leads (the providers follow none:
    a ``base_url`` to correct, most often)."""
    error_type = code = said_id = None
    try:
        body = response.json()
    except (ValueError, RecursionError):
        reason = readable(response) or response.reason_phrase
    else:
        reason = json.dumps(body)[:500]
        if isinstance(body, dict):
            said, error_type, code, said_id = _said(body)
            reason = said or reason
    if 300 <= response.status_code < 400:
        where = response.headers.get("location")
        reason = f"redirected to {where[:300]!r}" if where else f"a redirect ({reason})"
        reason += " (redirects are not followed: check base_url)"
    again = retryable(response, (error_type, code))
    return ProviderHTTPError(
        provider,
        _billing_said(reason, error_type, code, again),
        status=response.status_code,
        retryable=again,
        error_type=error_type,
        code=code,
        request_id=request_id(response) or said_id,
    )


def body_error(
    provider: str, response: httpx.Response, body: Mapping[str, Any]
) -> ProviderHTTPError | None:
    """The error a 2xx answer's JSON ``body`` is, when it is an error object and no
    answer (an ``error`` field, and neither ``choices`` nor ``content``), else None.
    Retryable when its error type or code is a passing one (overloaded, rate limited, a
    server error) or the provider's ``x-should-retry`` says so."""
    if not body.get("error") or "choices" in body or "content" in body:
        return None
    said, error_type, code, said_id = _said(body)
    transient = bool({error_type, code} & _TRANSIENT)
    should: str = response.headers.get("x-should-retry", "").strip().lower()
    again = should == "true" if should in ("true", "false") else transient
    return ProviderHTTPError(
        provider,
        _billing_said(
            f"the answer is an error: {said or json.dumps(body)[:500]}", error_type, code, again
        ),
        status=response.status_code,
        retryable=again,
        error_type=error_type,
        code=code,
        request_id=request_id(response) or said_id,
    )


def _billing_said(reason: str, error_type: str | None, code: str | None, again: bool) -> str:
    """``reason``, naming the billing error type or code it carries and what to do."""
    word = code if code in _BILLING else error_type if error_type in _BILLING else None
    if word is None or again:
        return reason
    return f"{reason} ({word}: check your plan and billing; not retried, as no wait ends it)"


def _said(body: Mapping[str, Any]) -> tuple[str | None, str | None, str | None, str | None]:
    """What an error body says: its message (one line of at most 500 characters), error
    type, code and request id, each with a lone surrogate as U+FFFD (see ``mend``): they
    go into the error a node's failure records, which must be UTF-8."""
    reason = error_type = code = None
    err = body.get("error")
    if isinstance(err, dict):
        if isinstance(err.get("message"), str):
            reason = str(err["message"])
        error_type = _word(err.get("type"))
        code = _word(err.get("code"))
    elif isinstance(err, str):
        reason = err
    elif isinstance(body.get("message"), str):
        reason = str(body["message"])
    if reason is not None:
        reason = _SPACE.sub(" ", mend(reason)).strip()
        reason = reason if len(reason) <= 500 else reason[:497] + "..."
    return reason, error_type, code, _word(body.get("request_id"))


def request_id(response: httpx.Response) -> str | None:
    """The request id an answer's headers carry (OpenAI's ``x-request-id``, Anthropic's
    ``request-id``), the one the provider's support asks for."""
    found: str | None = response.headers.get("x-request-id") or response.headers.get("request-id")
    return found


def _word(value: Any) -> str | None:
    """A short identifier from an error body (a code may be a number), else None."""
    if isinstance(value, bool) or not isinstance(value, str | int):
        return None
    word: str = mend(str(value)[:200])
    return word


_SKIPPED = re.compile(r"<(script|style)\b.*?</\1\s*>", re.DOTALL | re.IGNORECASE)
_TAG = re.compile(r"<[^>]*>")
_SPACE = re.compile(r"\s+")


def readable(response: httpx.Response, limit: int = 500) -> str:
    """The text of a body that is not JSON, at most ``limit`` characters: an HTML page
    (a proxy's or a gateway's error page) reduced to its words, so the cause shows."""
    text = response.text
    kind = response.headers.get("content-type", "").lower()
    if "html" in kind or text.lstrip()[:1] == "<":
        text = html.unescape(_TAG.sub(" ", _SKIPPED.sub(" ", text[: 64 * limit])))
    text = _SPACE.sub(" ", text).strip()
    return text if len(text) <= limit else text[: limit - 3] + "..."
