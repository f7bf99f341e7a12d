"""LLM message types, the provider protocol, and reading a provider's answer.

Everything a node, a judge or an ``llm_decide`` edge says to a model goes through
:class:`LlmProvider.complete` with an :class:`LlmRequest` and comes back as an
:class:`LlmResponse`. The types are provider-neutral msgspec Structs, so a turn can be
written to the event log and replayed without ever calling a model again. The HTTP
transport the real providers share is ``_http.py``.
"""

from __future__ import annotations

import json
import re
import reprlib
from collections.abc import Mapping
from typing import Any, Literal, Protocol, runtime_checkable

import msgspec

from .._errors import MalformedResponseError, ProviderHTTPError, TruncatedError

__all__ = [
    "ChatMessage",
    "LlmProvider",
    "LlmRequest",
    "LlmResponse",
    "ProviderStatistics",
    "Stop",
    "ToolCall",
    "ToolSpec",
    "Usage",
    "arguments_problem",
    "complete_uncut",
    "parse_json_object",
    "refusal",
    "truncated",
]


class ToolCall(msgspec.Struct, frozen=True, kw_only=True):
    """One tool invocation the model asked for; ``arguments`` is already a decoded object.

    ``raw_arguments`` is set only when the model's arguments were no JSON object (text
    that is not JSON, JSON cut short, or another JSON value): it holds them as the model
    sent them (JSON text for a value that was not a string), and ``arguments`` is ``{}``.
    Such a call is never run: the node answers it with a tool error saying why
    (:func:`arguments_problem`), so the model can call again. Logs written before the
    field existed read it as None.
    """

    id: str
    name: str
    arguments: dict[str, Any]
    raw_arguments: str | None = None


class ChatMessage(msgspec.Struct, frozen=True, kw_only=True):
    """One message of a conversation.

    ``assistant`` messages may carry ``tool_calls``; each ``tool`` message answers one of
    them (``tool_call_id``, and ``name`` for providers or logs that want it), and
    ``is_error`` says the tool failed (Anthropic is told; OpenAI has no such field).
    """

    role: Literal["user", "assistant", "tool", "system"]
    content: str = ""
    tool_calls: list[ToolCall] = []
    tool_call_id: str | None = None
    name: str | None = None
    is_error: bool = False


#: The tool names both APIs accept: a tool named otherwise is refused on every call.
TOOL_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")


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
    """Token counts of one completion.

    ``input_cached``: input tokens read from the provider's prompt cache;
    ``input_cache_write``: input tokens written to it (Anthropic). Anthropic counts them
    apart from ``input_tokens``; OpenAI's ``input_tokens`` include the cached ones.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    input_cached: int = 0
    input_cache_write: int = 0


#: Why a model stopped, the same for every provider: it finished (``end``), it asked for
#: tools (``tool_use``), its answer was cut at the token cap (``max_tokens``: not an
#: answer, and its tool calls are never run), it refused (``refusal``, with the refusal
#: text as ``text``), or anything else the API said (``other``; ``stop_reason`` has it).
Stop = Literal["end", "tool_use", "max_tokens", "refusal", "other"]


class LlmResponse(msgspec.Struct, frozen=True, kw_only=True):
    """The model's answer: text, tool calls, usage, and the wall time of the call.

    ``stop`` is why the model stopped (:data:`Stop`); ``stop_reason`` is the API's own
    word for it. ``latency_ms`` covers the whole ``complete`` call, retries and their
    waits included.
    """

    text: str = ""
    tool_calls: list[ToolCall] = []
    usage: Usage = msgspec.field(default_factory=Usage)
    model: str = ""
    stop_reason: str | None = None
    stop: Stop = "end"
    latency_ms: float = 0.0


@runtime_checkable
class LlmProvider(Protocol):
    """What nodes, judges and edges need from a model.

    ``complete`` blocks until the model answered (retries included); cancelling it
    abandons the call. It raises only :class:`ProviderError` subclasses.
    """

    name: str

    async def complete(self, request: LlmRequest) -> LlmResponse: ...


#: The least cap of a request asked again after its answer was cut at the cap.
_RETRY_CAP = 8192


async def complete_uncut(provider: LlmProvider, request: LlmRequest) -> LlmResponse:
    """``provider``'s answer to ``request``, never one cut at the token cap: a cut
    answer is not an answer, so the request is asked once more with a cap of twice what
    the model wrote (at least 8192 tokens), and a second cut raises TruncatedError. The
    answer's usage then counts both calls: the cut one was paid for too. So does the
    TruncatedError's ``response`` (the second cut answer, without tool calls), which a
    node records as its cut turn (a provider that serves a recorded cut turn raises it
    at once: see the replay).

    A larger cap cannot mend an answer cut at the model's context window (Anthropic's
    ``model_context_window_exceeded``): it raises TruncatedError at once, the whole
    context not paid for again. Nor can one the API refuses (HTTP 400: above what the
    model writes at most, where the request sent no cap and the model stopped at its
    own limit): TruncatedError with the cut answer too, the 400 as its cause.

    Blocks on the model; raises what ``complete`` raises, and TruncatedError.
    """
    cut = await provider.complete(request)
    if cut.stop != "max_tokens":
        return cut
    written = cut.usage.output_tokens
    if cut.stop_reason == "model_context_window_exceeded":
        raise TruncatedError(provider.name, written, response=_no_calls(cut))
    cap = max(_RETRY_CAP, 2 * written, 2 * (request.max_tokens or 0))
    try:
        response = await provider.complete(msgspec.structs.replace(request, max_tokens=cap))
    except ProviderHTTPError as exc:
        if exc.status != 400:  # only the cap changed: a 400 refuses the cap
            raise
        raise TruncatedError(provider.name, written, response=_no_calls(cut)) from exc
    first, again = cut.usage, response.usage
    both = Usage(
        input_tokens=first.input_tokens + again.input_tokens,
        output_tokens=first.output_tokens + again.output_tokens,
        input_cached=first.input_cached + again.input_cached,
        input_cache_write=first.input_cache_write + again.input_cache_write,
    )
    if response.stop == "max_tokens":
        paid = msgspec.structs.replace(response, usage=both, tool_calls=[])
        raise TruncatedError(provider.name, again.output_tokens, response=paid)
    return msgspec.structs.replace(response, usage=both)


def _no_calls(cut: LlmResponse) -> LlmResponse:
    return msgspec.structs.replace(cut, tool_calls=[])  # a cut call's input is incomplete


def truncated(stop: str | None) -> str | None:
    """Why a recorded turn that stopped with ``stop`` is no answer because it was cut at
    the token cap twice (only such a turn is recorded with the ``max_tokens`` stop: see
    :func:`complete_uncut`), or None."""
    if stop != "max_tokens":
        return None
    return "truncated: the answer was cut at the token cap, and again when asked once more"


def refusal(stop: str | None, text: str) -> str | None:
    """Why a turn that stopped with ``stop`` is no answer because the model refused
    (``"the model refused: <its text>"``), or None. A turn of a node or of a parallel
    branch, asked now or read back from the log, that refused fails at once: asking again
    gets the same refusal. (A turn cut at the cap never gets here: see complete_uncut.)"""
    if stop != "refusal":
        return None
    return f"the model refused: {text}" if text.strip() else "the model refused"


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
    input_cached: int = 0
    input_cache_write: int = 0


# ---------------------------------------------------------------------------------------
# Reading model text and answers

_FENCE = re.compile(r"```[ \t]*(?:json|JSON)?[ \t]*\n?(.*?)```", re.DOTALL)
# Bounds the work on pathological text full of braces.
_MAX_BRACE_ATTEMPTS = 256
# A JSON escape of a surrogate: the only way decoded JSON holds one that may be alone.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


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


def decode_tool_arguments(raw: Any) -> tuple[dict[str, Any], str | None]:
    """A tool call's arguments as :class:`ToolCall` holds them: ``(arguments, None)`` when
    ``raw`` is a JSON object (decoded or as text; absent or ``""``: ``{}``), else ``({},
    text)`` with the text the model sent (JSON text for a value that was not a string; a
    lone surrogate in it as U+FFFD, see :func:`mend`). Never raises: a model's bad
    arguments are its call's error, not an unreadable answer.
    """
    if isinstance(raw, dict):
        return raw, None
    if raw is None or raw == "":
        return {}, None
    if isinstance(raw, str):
        try:
            value = json.loads(raw)
        except (ValueError, RecursionError):  # not JSON, or nested too deep to read
            return {}, mend(raw)
        if isinstance(value, dict):
            return (mend(value) if _SURROGATE_ESCAPE.search(raw) else value), None
        return {}, mend(raw)
    try:
        text = json.dumps(raw, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        text = shown(raw)
    return {}, mend(text)


def arguments_problem(raw: str) -> str:
    """Why ``raw`` (a :attr:`ToolCall.raw_arguments`) is no JSON object, in words a model
    can act on: ``"not valid JSON (Expecting ',' delimiter: line 1 column 9 (char 8))"``
    or ``"a JSON array, not an object"``. The same text gives the same words, so a call
    read back from the log is answered as it was live."""
    try:
        value = json.loads(raw)
    except RecursionError:
        return "not valid JSON (nested too deep to read)"
    except ValueError as exc:  # JSONDecodeError, or a number of too many digits
        return f"not valid JSON ({exc})"
    if isinstance(value, dict):  # a call built by hand with text that is an object
        return "a JSON object given only as text"
    if isinstance(value, list):
        what = "a JSON array"
    elif isinstance(value, str):
        what = "a JSON string"
    elif value is None:
        what = "JSON null"
    elif isinstance(value, bool):
        what = "a JSON boolean"
    else:
        what = "a JSON number"
    return f"{what}, not an object"


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
