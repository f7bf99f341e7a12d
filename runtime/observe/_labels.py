"""Label values of the runtime's metrics: what kind of provider error a node's failure
was, which graph a run's events belong to (``RuntimeMetrics(per_graph=True)``), and what
the ``run.resumed`` of a run launched here counts as.

They come from what the events say, so a run counts under the same labels in every
process: a submitted run, a fork and a run cancelled at rest included.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from typing import TYPE_CHECKING, Final, Literal

from .._errors import MalformedResponseError, ProviderError, ProviderHTTPError, ProviderTimeoutError

if TYPE_CHECKING:
    from ..events._run_state import RunState

__all__ = ["ResumeKind", "RunGraphs", "RunInfo", "provider_error_kind", "resume_kind"]

#: What the ``run.resumed`` of a launched run counts as: ``resume`` (a paused, handed-over
#: or interrupted run goes on: magistrate_run_resumes), ``reopen`` (a run that had ended,
#: cancelled, goes on: a resume, and magistrate_runs_reopened, as it will end again),
#: ``fork`` (a fork's first step: counted with the fork) or ``claim`` (a worker's first
#: execution of a submitted run: counted as started where it was submitted).
ResumeKind = Literal["resume", "reopen", "fork", "claim"]

#: The kinds of ``magistrate_provider_errors_total`` a model call's failure counts as,
#: by the error's class (a subclass counts as the nearest of these it derives from).
_KINDS: Final = (
    (ProviderHTTPError, "http"),
    (ProviderTimeoutError, "timeout"),
    (MalformedResponseError, "malformed"),
    (ProviderError, "other"),
)


def provider_error_kind(error_type: str) -> str | None:
    """The provider error kind of a ``node.failed`` whose ``error_type`` names a subclass of
    ProviderError (TruncatedError, a custom provider's own), else None.

    A failure records its error's class name only: the classes defined now are searched
    (a handful), and a name that is none of them counts as no provider error."""
    todo: list[type[BaseException]] = [ProviderError]
    while todo:
        cls = todo.pop()
        if cls.__name__ == error_type:
            return next(kind for base, kind in _KINDS if issubclass(cls, base))
        todo.extend(cls.__subclasses__())
    return None


class RunGraphs:
    """The graph id of each run whose events this process counts, until the run ends:
    learnt from ``run.started``, a fork's copied start, ``graph.replaced`` and a launch, so
    a run's later events count under its graph wherever they are committed here (a
    cancel of a paused run included). Holds at most ``limit`` runs, the least recently
    told forgotten first (a run submitted here, or paused here and ended elsewhere, never
    ends here); a forgotten run's events count as graph ``unknown``."""

    def __init__(self, limit: int = 10_000) -> None:
        self._graphs: OrderedDict[str, str] = OrderedDict()
        self._limit = limit

    def set(self, run_id: str, graph: object) -> None:
        """``run_id`` runs ``graph`` (an id; a recorded body's may be anything: its text)."""
        self._graphs[run_id] = graph if isinstance(graph, str) else str(graph)
        self._graphs.move_to_end(run_id)
        while len(self._graphs) > self._limit:
            self._graphs.popitem(last=False)

    def get(self, run_id: str) -> str:
        return self._graphs.get(run_id, "unknown")

    def forget(self, run_id: str) -> None:
        self._graphs.pop(run_id, None)

    def __len__(self) -> int:
        return len(self._graphs)


class RunInfo:
    """What the metrics keep of a run executing here: its nodes' kinds, when its running
    nodes started, and what its next ``run.resumed`` here counts as."""

    __slots__ = ("kinds", "resumes_as", "started")

    def __init__(self, kinds: Mapping[str, str], resumes_as: ResumeKind) -> None:
        self.kinds = kinds
        self.started: dict[str, float] = {}  # node id -> monotonic time of its start
        self.resumes_as = resumes_as


def resume_kind(state: RunState) -> ResumeKind:
    """What the resume of a run launched from ``state`` (its log as the resume read it)
    counts as: see :data:`ResumeKind`."""
    origin = state.forked_from
    if origin is not None and state.last_seq == origin.seq + 1:
        return "fork"  # nothing after the fork's marker (seq source_seq + 1) yet
    if state.status == "cancelled":
        return "reopen"
    counts = state.event_counts
    if (
        state.status == "running"
        and state.steps == 0
        and not state.running
        and "run.resumed" not in counts
        and "run.paused" not in counts
    ):
        return "claim"  # its log holds its start (and inputs, refusals) only
    return "resume"
