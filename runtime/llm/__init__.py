"""LLM nodes: the turn loop, the conversation, tools, the judge, stalls, parallel
branches, verifier nodes and the goal scorecard.

Users meet this package through its tool decorator and the judge protocol (both on
:mod:`runtime` as well); the node actors are the engine's business.
"""

from ._judge import ImplicitJudge
from ._prompt import build_system_prompt, transition_marker
from ._tools import Tool, ToolRegistry, tool
from ._verdict import CustomJudgeResult, JudgeContext, JudgeProtocol, JudgeVerdict

__all__ = [
    "CustomJudgeResult",
    "ImplicitJudge",
    "JudgeContext",
    "JudgeProtocol",
    "JudgeVerdict",
    "Tool",
    "ToolRegistry",
    "build_system_prompt",
    "tool",
    "transition_marker",
]
