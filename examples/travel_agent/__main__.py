"""``python -m examples.travel_agent [--real] [--db PATH]``: see ``examples.travel_agent``."""

from __future__ import annotations

import argparse
import sys

import anyio

from .demo import NoModelError, run_demo


def main(argv: list[str] | None = None) -> int:
    """Run the demo; exit status 0 when the run completed and its log verified."""
    parser = argparse.ArgumentParser(
        prog="python -m examples.travel_agent",
        description="The judged travel agent: offline on a scripted model by default.",
    )
    parser.add_argument(
        "--real",
        action="store_true",
        help="use a real model (OPENAI_API_KEY, else ANTHROPIC_API_KEY, must be set)",
    )
    parser.add_argument(
        "--db", metavar="PATH", help="keep the SQLite log in PATH (default: a temp file)"
    )
    args = parser.parse_args(argv)
    try:
        result = anyio.run(lambda: run_demo(db_path=args.db, real=args.real))
    except NoModelError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
