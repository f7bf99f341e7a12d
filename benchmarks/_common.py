"""A tiny shared harness for benchmarks: tables, figures and timing."""

from __future__ import annotations

import time
from collections.abc import Sequence

__all__ = ["Timer", "figure", "format_number", "print_table"]


def format_number(value: float) -> str:
    """Readable digits: 3 significant figures for small values, none after the point above."""
    if value >= 100:
        return f"{value:,.0f}".replace(",", "")
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.3g}"


def print_table(title: str, headers: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    """Print ``rows`` under ``headers`` as an aligned plain-text table."""
    cells = [[str(h) for h in headers]] + [
        [format_number(c) if isinstance(c, float) else str(c) for c in row] for row in rows
    ]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    print(f"\n{title}")
    line = "  ".join("-" * w for w in widths)
    print(line)
    for index, row in enumerate(cells):
        print(
            "  ".join(
                c.rjust(w) if i else c.ljust(w)
                for i, (c, w) in enumerate(zip(row, widths, strict=True))
            )
        )
        if index == 0:
            print(line)
    print(line)


def figure(name: str, value: float, unit: str) -> None:
    """Print one machine-readable figure line: ``name: value unit``."""
    print(f"{name}: {format_number(value)} {unit}")


class Timer:
    """``with Timer() as t: ...`` then ``t.seconds``."""

    seconds: float = 0.0

    def __enter__(self) -> Timer:
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.perf_counter() - self._start
