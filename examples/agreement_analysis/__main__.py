"""``python -m examples.agreement_analysis``: extract, pause for approval, approve, report."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import anyio

from runtime import Runtime

from .graph import FUNCTIONS, run_until_review, scripted_model


async def demo() -> int:
    with tempfile.TemporaryDirectory(prefix="agreement-") as tmp:
        db = Path(tmp) / "agreement.db"
        paused = await run_until_review(db)
        print(f"{paused.status} before {paused.resume_at} ({paused.paused_reason})")
        print(f"extracted: {paused.memory['parties']}, {paused.memory['term_months']} months")
        # The approver's side: record the decision, then let the run go on.
        async with Runtime(db, functions=FUNCTIONS, provider=scripted_model()) as rt:
            approved = await rt.approve(
                paused.run_id, by="Dana", input={"approved": True, "reviewer": "Dana"}
            )
            assert approved is not None
            result = await approved.result()
        print(result.memory["report"])
        # result.verdicts counts a tool-call turn as a RETRY (the bail-out, not judged).
        tool_turns = result.tool_turns.get("extract", 0)
        judged = dict(result.verdicts.get("extract", {}))
        judged["retry"] = judged.get("retry", 0) - tool_turns
        print(f"extract: {tool_turns} tool turns, judged {judged}")
        if result.goal_outcome is not None:
            print(f"goal score: {result.goal_outcome.score}   met: {result.goal_outcome.met}")
        return 0 if result.status == "completed" else 1


def main() -> int:
    return anyio.run(demo)


if __name__ == "__main__":
    sys.exit(main())
