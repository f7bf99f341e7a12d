"""The executor benchmark's report: each workload's medians against every peer setting,
the issue's targets judged on them (with what the floor program reaches against the same
peer), and one line per figure (see ``benchmarks/executor.py``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from benchmarks._common import figure, format_number, print_table

__all__ = ["FLOOR", "Target", "Workload", "print_figures", "print_report", "targets"]

#: The floor program (``_floor``) in this process: what the same durable work costs in plain
#: Python here, beside the peers, so a peer ratio is read against what is reachable at all.
FLOOR = ("floor", "floor program (plain Python)")


@dataclass
class Workload:
    """One workload's medians: ours and each peer setting's (None: not measured)."""

    letter: str
    name: str
    label: str
    unit: str
    higher_is_better: bool
    ours: float
    theirs: dict[str, tuple[str, float | None, str]] = field(default_factory=dict)
    extra: dict[str, tuple[float, str]] = field(default_factory=dict)

    def ratio(self, key: str) -> float | None:
        """How many times better ours is than setting ``key`` (> 1: ours is better)."""
        value = self.theirs[key][1] if key in self.theirs else None
        if value is None or self.ours == 0 or value == 0:
            return None
        return self.ours / value if self.higher_is_better else value / self.ours

    def floor_ratio(self, key: str) -> float | None:
        """How many times better the floor program is than setting ``key``, as ratio()."""
        floor = self.theirs[FLOOR[0]][1] if FLOOR[0] in self.theirs else None
        value = self.theirs[key][1] if key in self.theirs else None
        if floor is None or value is None or floor == 0 or value == 0:
            return None
        return floor / value if self.higher_is_better else value / floor

    def worst_ratio(self, prefix: str) -> float | None:
        """The ratio against the peer's best setting among keys starting with ``prefix``
        (None when any of them was not measured)."""
        ratios = [self.ratio(k) for k in self.theirs if k.startswith(prefix)]
        if not ratios or any(r is None for r in ratios):
            return None
        return min(r for r in ratios if r is not None)


@dataclass(frozen=True)
class Target:
    label: str
    measured: float | None
    unit: str
    met: bool | None
    #: What the floor program reaches against the same peer setting in the same rounds: a
    #: peer target the floor misses is out of reach on this machine, whatever we do.
    floor: float | None = None


def targets(workloads: list[Workload]) -> list[Target]:
    """The issue's targets, judged on this run's medians and ratios."""
    by = {w.letter: w for w in workloads}

    def at_least(w: Workload, label: str, key: str, bound: float, worst: bool = False) -> Target:
        value, floor = w.ratio(key), w.floor_ratio(key)
        if worst:  # against the peer's best setting, for ours and for the floor
            floors = [w.floor_ratio(k) for k in w.theirs if k.startswith(key)]
            value = w.worst_ratio(key)
            floor = None if not floors or None in floors else min(f or 0.0 for f in floors)
        return Target(label, value, "x", None if value is None else value >= bound, floor)

    a, c, e = by["a"], by["c"], by["e"]
    vs_ideal = c.extra["concurrent.vs_ideal"][0]
    return [
        at_least(a, "(a) >= 3 x LangGraph sync", "langgraph", 3),
        at_least(a, "(a) >= 4 x DBOS", "dbos", 4),
        Target("(c) <= 2.5 x the 100 ms ideal", vs_ideal, "x", vs_ideal <= 2.5),
        at_least(c, "(c) >= 20 x LangGraph (its faster durability)", "langgraph", 20, worst=True),
        at_least(c, "(c) >= 25 x DBOS", "dbos", 25),
        Target("(e) <= 1.5 x the payload", e.ours, "x", e.ours <= 1.5),
        at_least(e, "(e) <= half of LangGraph's best (>= 2 x)", "langgraph", 2, worst=True),
    ]


def _cell(value: float | None, unit: str) -> str:
    return "-" if value is None else f"{format_number(value)} {unit}".rstrip()


def print_report(workloads: list[Workload], took: float) -> None:
    rows: list[tuple[str, str, str, str]] = []
    for w in workloads:
        rows.append((w.label, "magistrate", _cell(w.ours, w.unit), ""))
        for key, (label, value, why) in w.theirs.items():
            ratio = w.ratio(key)
            shown = _cell(value, w.unit) if value is not None else f"not measured: {why}"
            rows.append(("", label, shown, "-" if ratio is None else f"{format_number(ratio)} x"))
    print_table(
        f"executor: medians; ratio = times better, ours over theirs (> 1: magistrate is "
        f"better; throughput ours/theirs, wall and bytes theirs/ours); {took:.0f} s",
        ("workload", "system", "median", "ratio"),
        rows,
    )
    table = [
        (
            t.label,
            _cell(t.measured, t.unit),
            {None: "not measured", True: "met"}.get(t.met, "NOT met"),
            _cell(t.floor, t.unit) if t.floor is not None else "",
        )
        for t in targets(workloads)
    ]
    print_table(
        "targets (floor program: what benchmarks/_floor.py reaches against the same peer "
        "in the same rounds)",
        ("target", "measured", "result", "floor program"),
        table,
    )
    print()


def print_figures(workloads: list[Workload]) -> None:
    for w in workloads:
        figure(f"executor.{w.name}", w.ours, w.unit)
        for key, (value, unit) in w.extra.items():
            figure(f"executor.{key}", value, unit)
        for key, (_, theirs, _) in w.theirs.items():
            if theirs is not None:
                figure(f"executor.{key}.{w.name}", theirs, w.unit)
        for key in w.theirs:
            ratio = w.ratio(key)
            if ratio is not None:
                figure(f"executor.vs_{key}.{w.letter}", ratio, "x")
            else:
                print(f"executor.vs_{key}.{w.letter}: not measured")
    storage = next(w for w in workloads if w.letter == "e").worst_ratio("langgraph")
    if storage is not None:
        figure("executor.vs_langgraph.storage_best", storage, "x")
    else:
        print("executor.vs_langgraph.storage_best: not measured")
