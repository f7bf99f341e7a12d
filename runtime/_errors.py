"""Exceptions of the runtime.

The tree (rooted at :class:`actors.MagistrateError`)::

    MagistrateError
    ├── SpecError               a graph/node/edge spec is invalid; ``path`` names the field
    │   └── SpecErrors          several spec problems found in one validation pass
    ├── ExpressionError         an expression is malformed, forbidden or failed to evaluate
    ├── ProviderError           an LLM provider call failed (``retryable`` says if a retry may help)
    │   ├── ProviderHTTPError       the provider answered with an HTTP error status
    │   ├── ProviderTimeoutError    connect/read timeout after retries
    │   ├── MalformedResponseError  the response (or a tool call's arguments) could not be parsed
    │   └── TruncatedError          the answer was cut at the token cap, also when asked again
    ├── ToolArgumentsError      the arguments a model gave a tool do not fit its signature
    ├── UnknownToolError        no tool of that name is registered (also a LookupError)
    ├── NodeTimeoutError        a node's attempt ran past its ``timeout`` (also a TimeoutError)
    ├── ToolTimeoutError        a tool call ran past its ``tool_timeout`` (also a TimeoutError)
    ├── MemoryValueError        a value for memory the log cannot store unchanged (a TypeError)
    ├── NodeError               a node failed (function raised, judge escalated, ...)
    ├── RunNotFoundError        no run with that id in the store
    └── RunStateError           the run is not in a state that allows the operation
        ├── RunChangedError     a control lost a race: the run was already cancelled, finished...
        └── RunDrainingError    an abandoned attempt of the run still runs (it is draining)
"""

from __future__ import annotations

from collections.abc import Sequence

from actors import MagistrateError

__all__ = [
    "ExpressionError",
    "MalformedResponseError",
    "MemoryValueError",
    "NodeError",
    "NodeTimeoutError",
    "ProviderError",
    "ProviderHTTPError",
    "ProviderTimeoutError",
    "RunChangedError",
    "RunDrainingError",
    "RunNotFoundError",
    "RunStateError",
    "SpecError",
    "SpecErrors",
    "ToolArgumentsError",
    "ToolTimeoutError",
    "TruncatedError",
    "UnknownToolError",
]

#: The longest run id a message shows whole; a longer one is cut (its attribute keeps it).
_SHOWN_ID = 80


def shown_id(run_id: str) -> str:
    """``run_id`` as a message shows it: whole up to 80 characters, else its start and its
    length, so an error about a huge id (one a lookup was given) stays a line."""
    if len(run_id) <= _SHOWN_ID:
        return run_id
    return f"{run_id[:60]}... ({len(run_id)} characters)"


def quoted_id(run_id: str) -> str:
    """``run_id`` quoted (its ``repr``), cut as :func:`shown_id` cuts it."""
    if len(run_id) <= _SHOWN_ID:
        return repr(run_id)
    return f"{run_id[:60]!r}... ({len(run_id)} characters)"


class SpecError(MagistrateError):
    """A spec is invalid. ``path`` names the offending field, e.g. ``edges[3].expression``."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"{path}: {reason}" if path else reason)


class SpecErrors(SpecError):
    """Every problem one validation pass found; ``errors`` lists them in field order."""

    def __init__(self, errors: list[SpecError]) -> None:
        self.errors = list(errors)
        first = self.errors[0] if self.errors else SpecError("", "invalid spec")
        lines = "\n".join(f"  - {e}" for e in self.errors)
        count = len(self.errors)
        problems = "1 problem" if count == 1 else f"{count} problems"
        MagistrateError.__init__(self, f"{problems} in graph spec:\n{lines}")
        self.path = first.path
        self.reason = first.reason


class ExpressionError(MagistrateError):
    """An expression could not be compiled, is not allowed, or failed to evaluate."""

    def __init__(self, expression: str, reason: str, *, position: int | None = None) -> None:
        self.expression = expression
        self.reason = reason
        self.position = position
        shown = expression if len(expression) <= 80 else expression[:77] + "..."
        where = f" at column {position}" if position is not None else ""
        super().__init__(f"expression {shown!r}{where}: {reason}")


class ProviderError(MagistrateError):
    """An LLM provider call failed.

    ``error_type``, ``code`` and ``request_id`` are the provider's own words for an error
    it answered (``invalid_request_error``, ``rate_limit_exceeded``, the id its support
    asks for), when it gave them.
    """

    def __init__(
        self,
        provider: str,
        reason: str,
        *,
        status: int | None = None,
        retryable: bool = False,
        error_type: str | None = None,
        code: str | None = None,
        request_id: str | None = None,
    ) -> None:
        self.provider = provider
        self.reason = reason
        self.status = status
        self.retryable = retryable
        self.error_type = error_type
        self.code = code
        self.request_id = request_id
        http = f" (HTTP {status})" if status is not None else ""
        said = [w for w in (error_type, code) if w]
        if request_id:
            said.append(f"request {request_id}")
        detail = f" [{', '.join(said)}]" if said else ""
        super().__init__(f"{provider}{http}: {reason}{detail}")


class ProviderHTTPError(ProviderError):
    """The provider answered with an error status (after retries, where retryable)."""


class ProviderTimeoutError(ProviderError):
    """The provider did not answer in time (after retries)."""


class MalformedResponseError(ProviderError):
    """The provider's answer could not be understood (bad JSON, bad tool-call arguments).

    ``usage`` is what the answer says it cost (a ``Usage``, typed ``object`` as
    TruncatedError's ``response`` is), when it could be read: the call was paid for."""

    usage: object = None


class TruncatedError(ProviderError):
    """The model's answer was cut at the token cap, and again when asked once more with
    a larger cap (``tokens``: where the second answer was cut); it is not an answer.

    ``response`` is the cut answer as a node records it (an ``LlmResponse`` whose usage
    counts both calls, which were paid for; no tool calls), when the error comes from
    ``complete_uncut`` (typed ``object``: the providers' types import these errors)."""

    def __init__(self, provider: str, tokens: int, *, response: object = None) -> None:
        self.tokens = tokens
        self.response = response
        super().__init__(provider, f"truncated at {tokens} tokens")


class ToolArgumentsError(MagistrateError):
    """The arguments a model gave a tool do not match its signature."""

    def __init__(self, tool: str, reason: str) -> None:
        self.tool = tool
        self.reason = reason
        super().__init__(f"invalid arguments for tool {tool!r}: {reason}")


class UnknownToolError(MagistrateError, LookupError):
    """No tool of this name is registered."""

    def __init__(self, name: str, known: Sequence[str]) -> None:
        self.name = name
        self.known = list(known)
        listed = ", ".join(sorted(self.known)) or "none"
        super().__init__(f"unknown tool {name!r} (registered: {listed})")


class NodeError(MagistrateError):
    """A node failed."""

    def __init__(self, run_id: str, node_id: str, reason: str) -> None:
        self.run_id = run_id
        self.node_id = node_id
        self.reason = reason
        super().__init__(f"run {shown_id(run_id)}: node {node_id!r} failed: {reason}")


class NodeTimeoutError(MagistrateError, TimeoutError):
    """One attempt of a node ran longer than its time limit (and was abandoned)."""

    def __init__(self, node_id: str, seconds: float) -> None:
        self.node_id = node_id
        self.seconds = seconds
        super().__init__(f"node {node_id!r} did not finish within {seconds:g} s")


class ToolTimeoutError(MagistrateError, TimeoutError):
    """One tool call ran longer than its time limit (and was abandoned)."""

    def __init__(self, tool: str, seconds: float) -> None:
        self.tool = tool
        self.seconds = seconds
        super().__init__(f"tool {tool!r} did not finish within {seconds:g} s")


class MemoryValueError(MagistrateError, TypeError):
    """A value for memory that the run log cannot store and read back unchanged.

    ``key`` is the memory key, ``where`` the place inside the value (``value[2]['a']``),
    ``reason`` what is there.
    """

    def __init__(self, key: str, where: str, reason: str) -> None:
        self.key = key
        self.where = where
        self.reason = reason
        super().__init__(f"memory key {key!r}: {where} is {reason}")


class RunNotFoundError(MagistrateError):
    """No run with this id exists in the store. The message cuts an id over 80 characters;
    ``run_id`` holds it whole (so do the other errors' naming a run)."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        super().__init__(f"no run with id {quoted_id(run_id)}")


class RunStateError(MagistrateError):
    """The run's status does not allow the requested operation."""

    def __init__(self, run_id: str, status: str, reason: str) -> None:
        self.run_id = run_id
        self.status = status
        self.reason = reason
        super().__init__(f"run {shown_id(run_id)} is {status}: {reason}")


class RunChangedError(RunStateError):
    """A control (cancel, pause, approve, reject, resume) that lost a race, or came after
    the run had moved on: the run is already ``status`` (cancelled, completed, failed,
    paused...), as another writer left it, and this control recorded nothing. Never
    undoes what the winner did; the CLI exits 4 with it, the HTTP API answers 409
    ``run_changed``. ``already=False``: the message is ``reason`` alone (the run's log moved
    on while its status stayed, or one seen that it never reached was named)."""

    def __init__(self, run_id: str, status: str, reason: str = "", *, already: bool = True) -> None:
        if already:
            reason = f"already {status}" + (f": {reason}" if reason else "")
        super().__init__(run_id, status, reason)


class RunDrainingError(RunStateError):
    """The run cannot be resumed (or retried) yet: an abandoned attempt of one of its
    plain-def nodes (cancelled, its thread not interruptible) still runs in the process
    that owned it, which keeps the run's claim until it ends ("draining"). A resume in
    that process waits for it (bounded); one elsewhere is refused with this. ``status``
    is the run's (paused or cancelled)."""

    def __init__(self, run_id: str, status: str, reason: str) -> None:
        super().__init__(run_id, status, f"draining: {reason}")
