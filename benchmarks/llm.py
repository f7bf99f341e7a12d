"""The LLM node: what one turn costs as its conversation grows.

``python -m benchmarks llm [--quick]``: see :mod:`benchmarks._turn_cost` for the method.
Prints the median cost of one turn around turn 10 and turn 500 and their ratio, as
``llm.turn_cost_500_over_10: R x`` (the target is at most 1.25 x).
"""

from __future__ import annotations

import anyio

from ._common import figure, print_table
from ._turn_cost import TURNS, measure


def main(quick: bool) -> None:
    """Measure and print the table and the figures."""
    cost = anyio.run(measure, 3 if quick else 9)
    print_table(
        f"One LLM turn, in-memory log, {TURNS} tool-call turns, median of {cost.repetitions} runs",
        ["turn", "us per turn"],
        [
            ["~10 (turns 5-15)", cost.early_s * 1e6],
            ["~500 (turns 490-510)", cost.late_s * 1e6],
        ],
    )
    figure("llm.turn_us_at_10", cost.early_s * 1e6, "us")
    figure("llm.turn_us_at_500", cost.late_s * 1e6, "us")
    figure("llm.turn_cost_500_over_10", cost.ratio, "x")
