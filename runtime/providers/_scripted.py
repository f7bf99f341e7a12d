"""A deterministic, scripted LLM provider: the model stand-in for tests and offline demos."""

from __future__ import annotations

import itertools
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, TypeAlias

from .._errors import ProviderError, ProviderHTTPError
from ._anthropic import encode_request as anthropic_request
from ._base import ChatMessage, LlmRequest, LlmResponse, ProviderStatistics, ToolCall, Usage
from ._models import DEFAULT_ANTHROPIC_MODEL, DEFAULT_OPENAI_MODEL
from ._openai import encode_request as openai_request
from ._wire import anthropic_body_error, openai_body_error

__all__ = ["ScriptEntry", "ScriptedProvider", "reply", "tool_call", "wire_error"]

ScriptEntry: TypeAlias = (
    LlmResponse | str | Callable[[LlmRequest], LlmResponse | str] | ProviderError
)
"""One scripted answer: a response, a text, a function of the request, or an error to raise."""

Script: TypeAlias = Sequence[ScriptEntry] | Callable[[LlmRequest], LlmResponse | str]

_ids = itertools.count(1)
_ids_lock = threading.Lock()


def tool_call(name: str, /, **arguments: Any) -> ToolCall:
    """A :class:`ToolCall` of ``name`` with keyword ``arguments``.

    Ids are ``"call_1"``, ``"call_2"``, ... unique within the process (not reset
    between tests; build a :class:`ToolCall` directly when a test needs a fixed id).
    """
    with _ids_lock:
        number = next(_ids)
    return ToolCall(id=f"call_{number}", name=name, arguments=dict(arguments))


def reply(text: str = "", *tool_calls: ToolCall) -> LlmResponse:
    """An :class:`LlmResponse` with ``text`` and the given tool calls."""
    return LlmResponse(
        text=text,
        tool_calls=list(tool_calls),
        model="scripted",
        stop_reason="tool_use" if tool_calls else "end_turn",
        stop="tool_use" if tool_calls else "end",
    )


def wire_error(request: LlmRequest | Sequence[ChatMessage]) -> str | None:
    """Why a real API would refuse this request (or these messages), or None.

    The request is encoded as :class:`OpenAIProvider` and :class:`AnthropicProvider`
    send it, to its ``model`` (else each provider's default model), and each body is
    checked against that API's rules (``_wire.py``): tool calls answered by their
    results before anything else; Anthropic's roles alternating from a ``user`` message,
    no text block of whitespace only, no closing assistant message for its current
    models, tool-use ids and tool names of the allowed patterns; parameters the model's
    family refuses. The answer names the API that refuses.
    """
    if not isinstance(request, LlmRequest):
        request = LlmRequest(messages=list(request))
    openai_body = openai_request(request, model=request.model or DEFAULT_OPENAI_MODEL)
    refused = openai_body_error(openai_body)
    if refused is not None:
        return f"OpenAI would refuse it: {refused}"
    anthropic_body = anthropic_request(request, model=request.model or DEFAULT_ANTHROPIC_MODEL)
    refused = anthropic_body_error(anthropic_body)
    if refused is not None:
        return f"Anthropic would refuse it: {refused}"
    return None


class _Lane:
    """One script and its cursor."""

    def __init__(self, label: str, script: Script) -> None:
        self.label = label
        self.fn: Callable[[LlmRequest], LlmResponse | str] | None = None
        self.entries: list[ScriptEntry] = []
        if callable(script) and not isinstance(script, Sequence):
            self.fn = script
        else:
            self.entries = list(script)
        for index, entry in enumerate(self.entries):
            if isinstance(entry, BaseException) and not isinstance(entry, ProviderError):
                raise TypeError(
                    f"{label} script entry {index} is {type(entry).__name__}: scripted failures "
                    "must be ProviderError instances (complete() raises only those)"
                )
            if not isinstance(entry, LlmResponse | str | BaseException) and not callable(entry):
                raise TypeError(f"{label} script entry {index} is {type(entry).__name__}")
        self.position = 0

    def next_entry(self) -> ScriptEntry | None:
        if self.fn is not None:
            return self.fn
        if self.position >= len(self.entries):
            return None
        entry = self.entries[self.position]
        self.position += 1
        return entry

    @property
    def remaining(self) -> int | None:
        return None if self.fn is not None else len(self.entries) - self.position


class ScriptedProvider:
    """An :class:`LlmProvider` that answers from a script, in order, deterministically.

    Each :meth:`complete` call takes the next entry of its script:

    - a ``str`` becomes ``LlmResponse(text=...)``;
    - an :class:`LlmResponse` is returned as is (build one with :func:`reply` and
      :func:`tool_call`);
    - a callable gets the :class:`LlmRequest` and returns a response or a string;
    - a :class:`ProviderError` instance is raised, to simulate a provider failure
      (other exception types are refused at construction).

    The whole script may instead be one callable, consulted for every call. Requests
    whose ``purpose`` is ``"judge"`` take from ``judge`` and ``"route"`` from ``router``
    when those are given, so a test can script the worker, its judge and the routing
    separately; otherwise every call shares the main script. Running past the end of
    a script raises ``ProviderError("script exhausted after N calls")``.

    Every request is recorded in :attr:`requests`; :attr:`calls` counts them and
    :meth:`calls_for` counts one purpose; :meth:`statistics` adds up the tokens of the
    answers given, as a real provider's does.

    Each request is first encoded as each real provider would send it and checked
    against the rules that API enforces (:func:`wire_error`); a request that breaks one
    fails loudly, as the APIs do, with a ``ProviderHTTPError`` of status 400 naming the
    rule, so offline tests catch what a real model would refuse. ``check_wire=False``
    turns the check off.

    Example: a node that calls a tool, then answers; its judge accepts::

        from runtime.testing import ScriptedProvider, reply, tool_call

        llm = ScriptedProvider(
            [
                reply("", tool_call("search", query="flights to Lisbon")),
                reply('{"flights": "TP 1234"}'),
            ],
            judge=['{"verdict": "ACCEPT", "confidence": 0.9}'],
        )
        ...run the graph with llm...
        assert llm.calls_for("turn") == 2
        assert llm.requests[1].messages[-1].role == "tool"
    """

    def __init__(
        self,
        script: Script,
        *,
        name: str = "scripted",
        judge: Script | None = None,
        router: Script | None = None,
        check_wire: bool = True,
    ) -> None:
        self.name = name
        self.check_wire = check_wire
        self._main = _Lane("main", script)
        self._lanes: dict[str, _Lane] = {}
        if judge is not None:
            self._lanes["judge"] = _Lane("judge", judge)
        if router is not None:
            self._lanes["route"] = _Lane("router", router)
        self.requests: list[LlmRequest] = []
        self._per_purpose: Counter[str] = Counter()
        self._per_lane: Counter[str] = Counter()
        self._failures = 0
        self._used = Usage()

    @property
    def calls(self) -> int:
        """How many times :meth:`complete` was called (failures included)."""
        return len(self.requests)

    def calls_for(self, purpose: str) -> int:
        """How many calls had ``request.purpose == purpose``."""
        return self._per_purpose[purpose]

    def requests_for(self, purpose: str) -> list[LlmRequest]:
        """The recorded requests of one purpose, in call order."""
        return [r for r in self.requests if r.purpose == purpose]

    def remaining(self, lane: str = "main") -> int | None:
        """Entries left in the ``"main"``, ``"judge"`` or ``"router"`` script (None: callable)."""
        if lane == "main":
            return self._main.remaining
        key = "route" if lane == "router" else lane
        return self._lanes[key].remaining

    def statistics(self) -> ProviderStatistics:
        """Counters since creation, as the HTTP providers keep them: ``calls`` (and
        ``attempts``: nothing is retried), ``failures`` (the calls that raised) and the
        tokens of the answers given (their ``usage``)."""
        return ProviderStatistics(
            calls=self.calls,
            attempts=self.calls,
            failures=self._failures,
            input_tokens=self._used.input_tokens,
            output_tokens=self._used.output_tokens,
            input_cached=self._used.input_cached,
            input_cache_write=self._used.input_cache_write,
        )

    async def complete(self, request: LlmRequest) -> LlmResponse:
        """Answer ``request`` from the script. Never blocks; no checkpoint, no I/O.

        Raises the scripted exception, :class:`ProviderHTTPError` (400) for a request the
        real APIs would refuse, or :class:`ProviderError` when the script is exhausted or
        a scripted callable raised something else.
        """
        try:
            response = self._answer(request)
        except ProviderError:
            self._failures += 1
            raise
        used, more = self._used, response.usage
        self._used = Usage(
            input_tokens=used.input_tokens + more.input_tokens,
            output_tokens=used.output_tokens + more.output_tokens,
            input_cached=used.input_cached + more.input_cached,
            input_cache_write=used.input_cache_write + more.input_cache_write,
        )
        return response

    def _answer(self, request: LlmRequest) -> LlmResponse:
        self.requests.append(request)
        self._per_purpose[request.purpose] += 1
        if self.check_wire:
            refused = wire_error(request)
            if refused is not None:
                raise ProviderHTTPError(
                    self.name, f"invalid request ({request.purpose}): {refused}", status=400
                )
        lane = self._lanes.get(request.purpose, self._main)
        self._per_lane[lane.label] += 1
        entry = lane.next_entry()
        if entry is None:
            used = self._per_lane[lane.label] - 1
            script = "" if lane is self._main else f"{lane.label} "
            raise ProviderError(
                self.name,
                f"{script}script exhausted after {used} calls "
                f"(purpose {request.purpose!r}, last message: {_last_text(request)!r})",
            )
        if isinstance(entry, BaseException):
            raise entry
        if isinstance(entry, LlmResponse | str):
            return self._as_response(entry)
        try:
            produced = entry(request)
        except ProviderError:
            raise
        except Exception as exc:
            # The contract of complete() is "only ProviderError": a bug in a scripted
            # callable surfaces as one, with the original as its cause.
            raise ProviderError(self.name, f"scripted callable raised {exc!r}") from exc
        return self._as_response(produced)

    def _as_response(self, value: object) -> LlmResponse:
        if isinstance(value, str):
            return LlmResponse(text=value, model="scripted", stop_reason="end_turn")
        if isinstance(value, LlmResponse):
            return value
        raise ProviderError(
            self.name, f"a script entry produced {type(value).__name__}, not LlmResponse or str"
        )


def _last_text(request: LlmRequest) -> str:
    if not request.messages:
        return ""
    text = request.messages[-1].content
    return text if len(text) <= 60 else text[:57] + "..."
