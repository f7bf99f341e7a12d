"""Hostile expressions against the evaluation budget: the slowest evaluation of any.

Each bounded operation of the expression language (building, comparing, searching,
sorting, summing, slicing, hashing, the size checks) is chained up to the source limit
(1,000 characters) with ``and``, over memory values as large as a run may hold; then
random chains mix them with ``and``/``or``/``==``/``+``. Every expression either
evaluates or raises ExpressionError; the figures are the slowest one's CPU time (the
evaluating thread's, best of 3: what the budget bounds, below 50 ms) and its wall time
(which another load on the machine inflates).
"""

from __future__ import annotations

import random
import time
from typing import Any

from runtime._errors import ExpressionError
from runtime.spec._expr import MAX_SOURCE_LENGTH, compile_expression

from ._common import figure, print_table

_rng = random.Random(7)
ENV: dict[str, Any] = {
    "big": [0] * 200_000,
    "floats": [_rng.random() for _ in range(100_000)],
    "nested": [[i] for i in range(100_000)],
    "deep": [[[[i, i]]] for i in range(30_000)],
    "table": {str(i): i for i in range(100_000)},
    "text": "a" * 200_000,
}

TERMS = [
    "[0]*99999+[]",
    "[0]*99999==[0]*99999",
    "-1 not in [0]*99999",
    "'a'*99999+''",
    "sorted([0]*99999)",
    "sorted(floats)",
    "str([0]*9999)",
    "[[0]*300]*300+[]",
    "-1 not in big",
    "-1 not in nested",
    "-1 not in deep",
    "nested==nested[:]",
    "sum(floats)",
    "sum([1]*99999)",
    "'b' not in text",
    "big[1:]",
    "max(floats)",
    "not any(big)",
    "{(0,)*99999}",
    "'x' not in table",
    "[[0]]*99999+[]",
]


def _chain(terms: list[str], joiners: list[str]) -> str:
    source = terms[0]
    index = 0
    while True:
        part = joiners[index % len(joiners)] + terms[(index + 1) % len(terms)]
        if len(source) + len(part) > MAX_SOURCE_LENGTH:
            return source
        source += part
        index += 1


def _time(source: str) -> tuple[float, float, str]:
    """(best CPU seconds, best wall seconds, outcome) of 3 evaluations."""
    expression = compile_expression(source)
    cpu = wall = float("inf")
    outcome = "value"
    for _ in range(3):
        started, started_cpu = time.perf_counter(), time.thread_time()
        try:
            expression.evaluate(ENV)
            outcome = "value"
        except ExpressionError as exc:
            outcome = "refused: budget" if "budget" in exc.reason else "refused"
        cpu = min(cpu, time.thread_time() - started_cpu)
        wall = min(wall, time.perf_counter() - started)
    return cpu, wall, outcome


def main(quick: bool) -> None:
    rows: list[list[object]] = []
    worst = worst_wall = 0.0
    for term in TERMS:
        cpu, wall, outcome = _time(_chain([term], [" and "]))
        worst, worst_wall = max(worst, cpu), max(worst_wall, wall)
        rows.append([term, cpu * 1e3, wall * 1e3, outcome])
    random_worst = random_wall = 0.0
    chains = 50 if quick else 500
    rng = random.Random(11)
    for _ in range(chains):
        terms = [f"({t})" for t in rng.sample(TERMS, k=rng.randint(1, 6))]
        joiners = rng.sample([" and ", " or ", " == ", " + ", " * 2 and "], k=2)
        cpu, wall, _outcome = _time(_chain(terms, joiners))
        random_worst, random_wall = max(random_worst, cpu), max(random_wall, wall)
    print_table(
        "one term chained with 'and' to 1,000 characters (best of 3)",
        ["term", "cpu ms", "wall ms", "outcome"],
        rows,
    )
    print(
        f"\n{chains} random chains of mixed terms: slowest {random_worst * 1e3:.1f} ms CPU "
        f"({random_wall * 1e3:.1f} ms wall)"
    )
    figure("expressions.worst_cpu_ms", max(worst, random_worst) * 1e3, "ms")
    figure("expressions.worst_wall_ms", max(worst_wall, random_wall) * 1e3, "ms")
