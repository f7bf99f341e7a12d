"""The read model: what every front (the CLI, the HTTP API, the dashboard, an app) shows of
runs, read from a store with the hash chain of what is read checked.

Start here::

    reader = RunReader(store)         # or runtime.reader
    view = await reader.state(run_id)
    if not view.chain.ok:
        print("the log is broken:", view.chain.reason)
"""

from ._reader import RunReader
from ._records import (
    ChainStatus,
    DecisionView,
    EventPage,
    EventRecord,
    JudgeFailures,
    JudgeFailureView,
    NodeFailureView,
    NodeVerdicts,
    PauseView,
    RunDetail,
    RunList,
    RunReport,
    RunSummary,
    StallView,
    StateView,
    Tokens,
    VerdictView,
)

__all__ = [
    "ChainStatus",
    "DecisionView",
    "EventPage",
    "EventRecord",
    "JudgeFailureView",
    "JudgeFailures",
    "NodeFailureView",
    "NodeVerdicts",
    "PauseView",
    "RunDetail",
    "RunList",
    "RunReader",
    "RunReport",
    "RunSummary",
    "StallView",
    "StateView",
    "Tokens",
    "VerdictView",
]
