"""The graph, its functions, the scripted model, and the two halves of a run."""

from __future__ import annotations

import os
from typing import Any, Final

from runtime import EdgeSpec, Goal, GraphSpec, NodeSpec, RunResult, Runtime, ScriptedProvider
from runtime.spec import SuccessCriterion
from runtime.testing import reply, tool_call

__all__ = ["AGREEMENT", "FUNCTIONS", "build_graph", "report", "review", "run_until_review"]

AGREEMENT: Final = (
    "This Services Agreement is made between Acme GmbH (the Client) and Brightwork Ltd "
    "(the Provider) for a term of 24 months. The Provider shall deliver monthly reports "
    "and keep the Client's data confidential. The Client shall pay invoices within 30 days."
)


def review(inputs: dict[str, Any]) -> dict[str, Any]:
    """The approval gate: runs after a person injected ``approved`` (and ``reviewer``)."""
    approved = inputs.get("approved") is True
    return {"decision": "approved" if approved else "rejected"}


def report(inputs: dict[str, Any]) -> dict[str, Any]:
    lines = [
        f"Parties: {', '.join(inputs['parties'])}",
        f"Term: {inputs['term_months']} months",
        "Obligations:",
        *(f"  - {item}" for item in inputs["obligations"]),
        f"Review: {inputs['decision']} by {inputs.get('reviewer', 'nobody')}",
    ]
    return {"report": "\n".join(lines)}


FUNCTIONS: Final = {"review": review, "report": report}

GOAL: Final = Goal(
    description="Summarise the agreement's parties, term and obligations for sign-off.",
    success_criteria=[
        SuccessCriterion(
            id="approved", description="A person approved it", expression="decision == 'approved'"
        ),
        SuccessCriterion(
            id="obligations",
            description="Every party's main obligation is listed",
            expression="len(obligations) >= 3",
        ),
        "The summary is faithful to the text",
    ],
    constraints=["Quote no personal data"],
)


def build_graph() -> GraphSpec:
    return GraphSpec(
        id="agreement_analysis",
        goal=GOAL,
        entry_node="extract",
        terminal_nodes=["report"],
        pause_nodes=["review"],
        nodes=[
            NodeSpec(
                id="extract",
                kind="llm",
                description="Extract the agreement's key terms.",
                input_keys=["agreement"],
                output_keys=["parties", "term_months", "obligations"],
                system_prompt="Extract the parties, the term in months and every obligation.",
                max_iterations=8,
            ),
            NodeSpec(id="review", function="review", output_keys=["decision"]),
            NodeSpec(id="report", function="report", output_keys=["report"]),
        ],
        edges=[
            EdgeSpec(source="extract", target="review"),
            EdgeSpec(source="review", target="report"),
        ],
    )


def scripted_model() -> ScriptedProvider:
    """The offline model: it forgets ``obligations`` once, then completes the extraction."""
    return ScriptedProvider(
        [
            reply(
                "",
                tool_call("set_output", key="parties", value=["Acme GmbH", "Brightwork Ltd"]),
                tool_call("set_output", key="term_months", value=24),
            ),
            reply("Parties and term extracted."),
            reply(
                "",
                tool_call(
                    "set_output",
                    key="obligations",
                    value=[
                        "Provider: deliver monthly reports",
                        "Provider: keep the Client's data confidential",
                        "Client: pay invoices within 30 days",
                    ],
                ),
            ),
            reply("All three keys are set."),
        ]
    )


async def run_until_review(
    db_path: str | os.PathLike[str], *, model: ScriptedProvider | None = None
) -> RunResult:
    """Start a run; it pauses at ``review`` (status "paused", reason "hitl")."""
    async with Runtime(db_path, functions=FUNCTIONS, provider=model or scripted_model()) as rt:
        return await (await rt.start(build_graph(), input={"agreement": AGREEMENT})).result()
