"""The graph, its functions, the offline critic, and one run of it."""

from __future__ import annotations

import json
import os
from typing import Any, Final

from runtime import (
    EdgeSpec,
    GraphSpec,
    LlmProvider,
    LlmRequest,
    NodeSpec,
    RunResult,
    Runtime,
    ScriptedProvider,
)
from runtime.spec import ExpressionVerifier, LlmJudgeVerifier

__all__ = [
    "CRITERIA",
    "FUNCTIONS",
    "build_graph",
    "draft",
    "publish",
    "run_loop",
    "scripted_critic",
]

CRITERIA: Final = "Clear, specific, and cites where its numbers come from."
_NOTE: Final = "The X200 kettle boils one litre in 95 seconds and switches off by itself."


def draft(inputs: dict[str, Any]) -> dict[str, Any]:
    """Write the note; each revision answers what the last verification said."""
    revision = int(inputs.get("revision", 0)) + 1
    if revision == 1:
        text = "Fast kettle."
    else:
        text = _NOTE
        quality = inputs.get("quality")
        if isinstance(quality, dict) and "source" in str(quality.get("reasoning", "")):
            text += " Source: lab test report 42, March 2025."
    return {"draft": text, "revision": revision}


def publish(inputs: dict[str, Any]) -> dict[str, Any]:
    return {"published": f"[published after {inputs['revision']} drafts] {inputs['draft']}"}


FUNCTIONS: Final = {"draft": draft, "publish": publish}


def build_graph(*, max_steps: int = 20) -> GraphSpec:
    """The loop; ``max_steps`` bounds it (a draft that never passes fails the run)."""
    return GraphSpec(
        id="self_correcting",
        entry_node="draft",
        terminal_nodes=["publish"],
        max_steps=max_steps,
        nodes=[
            NodeSpec(id="draft", function="draft", output_keys=["draft", "revision"]),
            NodeSpec(
                id="check_length",
                kind="verifier",
                input_keys=["draft"],
                output_keys=["check_length_verification", "check_length_verification_passed"],
                verifier=ExpressionVerifier(expression="length(memory['draft']) > 40"),
            ),
            NodeSpec(
                id="check_quality",
                kind="verifier",
                input_keys=["draft"],
                output_keys=["quality", "quality_passed"],
                verifier=LlmJudgeVerifier(
                    target_key="draft",
                    evaluation_criteria=CRITERIA,
                    evaluator="critic",
                    pass_threshold=0.8,
                    result_key="quality",
                ),
            ),
            NodeSpec(id="publish", function="publish", output_keys=["published"]),
        ],
        edges=[
            EdgeSpec(source="draft", target="check_length"),
            EdgeSpec(
                source="check_length",
                target="check_quality",
                condition="conditional",
                expression="check_length_verification_passed",
            ),
            EdgeSpec(source="check_length", target="draft", condition="always"),
            EdgeSpec(
                source="check_quality",
                target="publish",
                condition="conditional",
                expression="quality_passed",
            ),
            EdgeSpec(source="check_quality", target="draft", condition="always"),
        ],
    )


def _critique(request: LlmRequest) -> str:
    note = request.messages[-1].content
    if "Source:" in note:
        return json.dumps({"score": 0.92, "reasoning": "Specific, and its figure is sourced."})
    return json.dumps({"score": 0.5, "reasoning": "Specific, but name the source of 95 seconds."})


def scripted_critic() -> ScriptedProvider:
    """The offline evaluator: 0.5 until the note names a source, then 0.92."""
    return ScriptedProvider(_critique, name="critic")


async def run_loop(
    db_path: str | os.PathLike[str] | None = None, *, critic: LlmProvider | None = None
) -> RunResult:
    """Run the loop once (``db_path`` None: an in-memory log) and return its result."""
    providers = {"critic": critic or scripted_critic()}
    async with Runtime(db_path, functions=FUNCTIONS, providers=providers) as rt:
        return await (await rt.start(build_graph())).result()
