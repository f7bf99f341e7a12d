"""A run's log as the runtime writes it, and the state it folds into.

The event catalogue (the bodies of a run's log, a tagged union with stable tags,
registered with the store's codec on import), :class:`RunState` and :func:`fold` (the
one function that turns events into state), the conversation projection and the
audit timeline.
"""

from . import _run_index  # noqa: F401 (registers the catalogue with the store's codec)
from ._catalogue import (
    Action,
    AnyEvent,
    ApprovalGranted,
    ApprovalRejected,
    BranchesForked,
    BranchesJoined,
    BranchesJudged,
    BranchesSelected,
    BranchFinished,
    BranchJudgeWarning,
    BranchToolResult,
    BranchTurn,
    ConversationCompacted,
    EdgeTaken,
    GraphReplaced,
    InputInjected,
    Level,
    LlmTurn,
    MemoryWritten,
    MessageAdded,
    NodeCompleted,
    NodeFailed,
    NodeStarted,
    OutputSet,
    PauseRequested,
    RunCancelled,
    RunFinished,
    RunForked,
    RunPaused,
    RunResumed,
    RunStarted,
    RunUnrunnable,
    StallDetected,
    ToolCallRecord,
    ToolResult,
    Verdict,
    VerificationRecorded,
)
from ._conversation import Conversation, ConversationEntry
from ._state import ForkOrigin, PauseInfo, RunState, fold
from ._timeline import LEVEL_NAMES, describe_event, render_timeline
from ._values import check_input, check_run_id
from ._verdicts import JudgeFailure, StallEntry, VerdictEntry, VerdictRecord

__all__ = [  # noqa: RUF022 (grouped by topic, not sorted)
    # the catalogue
    "AnyEvent",
    "Action",
    "Level",
    "RunStarted",
    "RunPaused",
    "PauseRequested",
    "RunResumed",
    "RunCancelled",
    "RunFinished",
    "GraphReplaced",
    "RunForked",
    "RunUnrunnable",
    "InputInjected",
    "ApprovalGranted",
    "ApprovalRejected",
    "NodeStarted",
    "NodeCompleted",
    "NodeFailed",
    "EdgeTaken",
    "MemoryWritten",
    "OutputSet",
    "LlmTurn",
    "ToolCallRecord",
    "ToolResult",
    "MessageAdded",
    "ConversationCompacted",
    "Verdict",
    "StallDetected",
    "VerificationRecorded",
    "BranchesForked",
    "BranchesJoined",
    "BranchTurn",
    "BranchToolResult",
    "BranchFinished",
    "BranchesJudged",
    "BranchJudgeWarning",
    "BranchesSelected",
    # the fold
    "RunState",
    "fold",
    "PauseInfo",
    "ForkOrigin",
    "JudgeFailure",
    "StallEntry",
    "VerdictEntry",
    "VerdictRecord",
    "Conversation",
    "ConversationEntry",
    # the timeline
    "LEVEL_NAMES",
    "describe_event",
    "render_timeline",
    # what a log takes
    "check_input",
    "check_run_id",
]
