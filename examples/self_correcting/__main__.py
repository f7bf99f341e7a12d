"""``python -m examples.self_correcting``: run the loop offline and print what happened."""

from __future__ import annotations

import sys

import anyio

from .loop import run_loop


def main() -> int:
    result = anyio.run(run_loop)
    print(f"status: {result.status}   quality: {result.quality}   steps: {result.steps}")
    print("path: " + " -> ".join(result.path))
    quality = result.memory.get("quality", {})
    print(f"last verdict: score {quality.get('score')}: {quality.get('reasoning')}")
    print(result.memory.get("published", "(nothing published)"))
    return 0 if result.status == "completed" else 1


if __name__ == "__main__":
    sys.exit(main())
