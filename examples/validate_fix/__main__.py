"""``python -m examples.validate_fix``: run the loop offline and print what happened."""

from __future__ import annotations

import sys

import anyio

from .loop import run_loop


def main() -> int:
    result = anyio.run(run_loop)
    print(f"status: {result.status}   quality: {result.quality}   steps: {result.steps}")
    print("path: " + " -> ".join(result.path))
    for note in result.memory.get("fixes", []):
        print(f"fixed {note}")
    print(f"total: {result.memory.get('total_hours')} hours")
    if result.goal_outcome is not None:
        print(f"goal score: {result.goal_outcome.score}   met: {result.goal_outcome.met}")
    return 0 if result.status == "completed" else 1


if __name__ == "__main__":
    sys.exit(main())
