"""Guarantees: stall detection is exact, loops are bounded, the implicit judge is cheap.

``python -m benchmarks guarantees [--quick]``. Three parts, all through the real
Runtime and executor on the in-memory log (``Runtime(None)``: the same RunLog and event
types as a store, without SQLite, so thousands of runs fit in seconds); every check reads
the run's recorded events, never the objects that produced them.

1. Stall detection (1,000 + 1,000 runs; 200 + 200 with ``--quick``). Positive runs: an LLM
   node makes 0-4 tool-call turns that never repeat three times, then the same tool calls
   with identical arguments (listed in a shuffled order) on three turns, then answers in
   text. Each must record exactly one ``StallDetected``, at the third identical turn.
   Negative runs: a model that calls the same tool with changing arguments, or that makes
   progress (repeats a call at most twice in a row, among several calls), must record none.
2. Bounded iteration. Random cyclic graphs: an LLM node whose on_failure edge goes to a
   fix-up node that loops back, whose on_success edge loops to itself or onward (and the
   onward node may loop back too); max_iterations drawn from 1..60, max_steps from 1..20.
   Adversarial judges: always RETRY, random verdicts, a judge that raises, the implicit
   cascade with a quality model that answers at random, garbage or errors. Adversarial
   models: never set outputs, repeat one call forever, random. Violations: a node visit
   with more turns than max_iterations, a run with more node starts than max_steps, a run
   without exactly one final ``RunFinished``. Must be 0.
3. The implicit judge's cost per turn: ``runtime.llm._judge.rule`` on a bail-out context (the
   turn made tool calls), a Level 0 RETRY (a key missing) and a Level 0 ACCEPT (no
   success criteria), median of per-call means over many batches, called directly and
   through a ``JudgeActor`` (``ask`` round trip). The headline figure is the slowest of the
   three contexts.
"""

from __future__ import annotations

import random
import re
import statistics
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final

import anyio
import msgspec

from actors import ActorSystem
from eventstore import Event
from runtime._errors import ProviderError
from runtime._runtime import Runtime
from runtime.events import LlmTurn, NodeStarted, RunFinished, StallDetected
from runtime.llm._judge import ImplicitJudge, rule
from runtime.llm._judge_actor import JudgeActor, JudgeRequest
from runtime.llm._tools import tool
from runtime.llm._verdict import JudgeContext, JudgeProtocol, judge_context
from runtime.providers._base import LlmRequest, LlmResponse, ToolCall
from runtime.spec._model import EdgeSpec, GraphSpec, NodeSpec

from ._common import figure, print_table

__all__ = ["main"]

_CASE: Final = re.compile(r"\[case (\d+)\]")
_CONCURRENCY: Final = 32

# ---------------------------------------------------------------------------- the model

Turn = list[tuple[str, dict[str, Any]]] | str
"""One scripted turn: tool calls as (name, arguments), or a text answer."""


@tool
async def lookup(q: str) -> str:
    """Look something up (canned)."""
    return f"results for {q}"


@tool
async def fetch(url: str) -> str:
    """Fetch a page (canned)."""
    return f"contents of {url}"


TOOLS: Final = [lookup, fetch]


class CaseProvider:
    """One provider for many concurrent runs: each node's description carries ``[case N]``.

    A case is a function of (case, turn number within the request, request) to the
    answer, so the provider holds no per-run cursor and runs can interleave freely.
    """

    name = "cases"

    def __init__(self) -> None:
        self.cases: dict[int, Callable[[int, LlmRequest], LlmResponse]] = {}
        self._ids = 0

    def call_id(self) -> str:
        self._ids += 1
        return f"c{self._ids}"

    async def complete(self, request: LlmRequest) -> LlmResponse:
        found = _CASE.search(request.system) or _CASE.search(
            request.messages[0].content if request.messages else ""
        )
        if found is None:
            raise ProviderError(self.name, "request names no [case N]")
        turn = sum(1 for m in request.messages if m.role == "assistant")
        return self.cases[int(found.group(1))](turn, request)

    def respond(self, turn: Turn) -> LlmResponse:
        if isinstance(turn, str):
            return LlmResponse(text=turn, model="cases", stop_reason="end_turn")
        calls = [ToolCall(id=self.call_id(), name=n, arguments=dict(a)) for n, a in turn]
        return LlmResponse(text="", tool_calls=calls, model="cases", stop_reason="tool_use")


async def _run_all(
    jobs: Sequence[Callable[[], Awaitable[None]]], concurrency: int = _CONCURRENCY
) -> None:
    """Run ``jobs`` with at most ``concurrency`` at once."""
    limiter = anyio.CapacityLimiter(concurrency)

    async def one(job: Callable[[], Awaitable[None]]) -> None:
        async with limiter:
            await job()

    async with anyio.create_task_group() as tg:
        for job in jobs:
            tg.start_soon(one, job)


async def _run_graph(rt: Runtime, graph: GraphSpec) -> list[Event]:
    handle = await rt.start(graph)
    await handle.result()
    return await rt.read_events(handle.run_id)


# ---------------------------------------------------------------------------- stalls

_POOL: Final[list[tuple[str, dict[str, Any]]]] = [
    ("lookup", {"q": "flights"}),
    ("lookup", {"q": "hotels"}),
    ("fetch", {"url": "https://example.org/a"}),
    ("fetch", {"url": "https://example.org/b"}),
]


def _sig(turn: Turn) -> str:
    if isinstance(turn, str):
        return ""
    return msgspec.json.encode(sorted((n, sorted(a.items())) for n, a in turn)).decode()


def _turn(rng: random.Random) -> list[tuple[str, dict[str, Any]]]:
    return rng.sample(_POOL, rng.randint(1, 2))


def _progressing(rng: random.Random, length: int, avoid_last: str = "") -> list[Turn]:
    """Tool-call turns where no signature occurs three times in a row.

    About a third of the turns repeat the previous one (two identical turns in a row are
    not a stall); the last differs from ``avoid_last``.
    """
    turns: list[list[tuple[str, dict[str, Any]]]] = []
    while len(turns) < length:
        repeat = bool(turns) and rng.random() < 0.35
        candidate = list(turns[-1]) if repeat else _turn(rng)
        sig = _sig(candidate)
        if len(turns) >= 2 and _sig(turns[-1]) == sig == _sig(turns[-2]):
            continue
        if len(turns) == length - 1 and sig == avoid_last:
            continue
        turns.append(candidate)
    return list(turns)


class StallCase(msgspec.Struct, kw_only=True):
    kind: str
    turns: list[Turn]
    expected: list[int]  # iterations at which a StallDetected must be recorded


def _stall_cases(count: int, rng: random.Random) -> list[StallCase]:
    cases: list[StallCase] = []
    for i in range(count):
        repeated = _turn(rng)
        prefix = _progressing(rng, rng.randint(0, 4), avoid_last=_sig(repeated))
        repeats: list[Turn] = [rng.sample(repeated, len(repeated)) for _ in range(3)]
        cases.append(
            StallCase(
                kind="repeats",
                turns=[*prefix, *repeats, "done"],
                expected=[len(prefix) + 3],
            )
        )
        if i % 2 == 0:
            length = rng.randint(3, 8)
            name = rng.choice(["lookup", "fetch"])
            key = "q" if name == "lookup" else "url"
            changing: list[Turn] = [[(name, {key: f"page {k}"})] for k in range(length)]
            cases.append(StallCase(kind="changing_args", turns=[*changing, "done"], expected=[]))
        else:
            progress = _progressing(rng, rng.randint(3, 8))
            cases.append(StallCase(kind="progress", turns=[*progress, "done"], expected=[]))
    return cases


def _stall_graph(case_id: int, case: StallCase) -> GraphSpec:
    node = NodeSpec(
        id="worker",
        kind="llm",
        description=f"[case {case_id}] work",
        tools=["lookup", "fetch"],
        max_iterations=len(case.turns) + 1,
    )
    return GraphSpec(id="stall", nodes=[node], entry_node="worker")


async def _stall_part(runs: int, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    cases = _stall_cases(runs, rng)
    provider = CaseProvider()
    outcome: dict[str, list[int]] = {}  # kind -> [runs, exact, false positives, missed]
    started = time.perf_counter()
    async with Runtime(None, provider=provider, tools=TOOLS) as rt:

        def job(case_id: int, case: StallCase) -> Callable[[], Awaitable[None]]:
            def answer(turn: int, request: LlmRequest) -> LlmResponse:
                return provider.respond(case.turns[min(turn, len(case.turns) - 1)])

            provider.cases[case_id] = answer

            async def go() -> None:
                events = await _run_graph(rt, _stall_graph(case_id, case))
                detected = [e.body.iteration for e in events if isinstance(e.body, StallDetected)]
                row = outcome.setdefault(case.kind, [0, 0, 0, 0])
                row[0] += 1
                if detected == case.expected:
                    row[1] += 1
                extra = [d for d in detected if d not in case.expected]
                row[2] += len(extra)
                row[3] += sum(1 for d in case.expected if d not in detected)
                provider.cases.pop(case_id, None)

            return go

        await _run_all([job(i, c) for i, c in enumerate(cases)])
    return {"outcome": outcome, "seconds": time.perf_counter() - started}


# ---------------------------------------------------------------------------- bounds

JUDGES: Final = ("always_retry", "random", "raises", "implicit")
MODELS: Final = ("never_outputs", "stalls", "random")


class _AlwaysRetry:
    async def evaluate(self, context: JudgeContext) -> str:
        return "retry"


class _RandomJudge:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    async def evaluate(self, context: JudgeContext) -> str:
        return self.rng.choice(["accept", "retry", "retry", "escalate", "ACCEPT"])


class _RaisingJudge:
    async def evaluate(self, context: JudgeContext) -> str:
        raise RuntimeError(f"judge broke on turn {context.iteration}")


class BoundsCase(msgspec.Struct, kw_only=True):
    judge: str
    model: str
    max_iterations: int
    max_steps: int
    on_success: str  # worker, fix or done
    done_loops: bool
    every_n: int
    seed: int


def _bounds_graph(case_id: int, case: BoundsCase) -> GraphSpec:
    worker = NodeSpec(
        id="worker",
        kind="llm",
        description=f"[case {case_id}] produce an answer",
        output_keys=["answer", "notes"],
        nullable_keys=["notes"],
        success_criteria=["The answer is specific."] if case.judge == "implicit" else [],
        tools=["lookup", "fetch"],
        max_iterations=case.max_iterations,
        judge=None if case.judge == "implicit" else case.judge,
        judge_every_n_turns=case.every_n,
    )
    edges = [
        EdgeSpec(source="worker", target="fix", condition="on_failure"),
        EdgeSpec(source="fix", target="worker", condition="always"),
        EdgeSpec(source="worker", target=case.on_success, condition="on_success"),
    ]
    if case.on_success != "done":
        edges.append(
            EdgeSpec(
                source="fix",
                target="done",
                condition="conditional",
                expression="answer == 'never'",
                priority=1,
            )
        )
    if case.done_loops:
        edges.append(EdgeSpec(source="done", target="worker", condition="always"))
    nodes = [
        worker,
        NodeSpec(id="fix", kind="function", function="fix"),
        NodeSpec(id="done", kind="function", function="done"),
    ]
    return GraphSpec(
        id="bounds",
        nodes=nodes,
        edges=edges,
        entry_node="worker",
        max_steps=case.max_steps,
    )


def _bounds_answer(
    provider: CaseProvider, case: BoundsCase
) -> Callable[[int, LlmRequest], LlmResponse]:
    rng = random.Random(case.seed)

    def answer(turn: int, request: LlmRequest) -> LlmResponse:
        if request.purpose == "judge":
            roll = rng.random()
            if roll < 0.2:
                raise ProviderError("cases", "quality model unavailable")
            if roll < 0.3:
                return provider.respond("I cannot decide")
            word = "ACCEPT" if roll < 0.6 else "RETRY"
            return provider.respond(f'{{"verdict": "{word}", "feedback": "be specific"}}')
        if case.model == "stalls":
            return provider.respond([("lookup", {"q": "same"})])
        if case.model == "never_outputs":
            if rng.random() < 0.3:
                return provider.respond("I am thinking about it.")
            return provider.respond([("lookup", {"q": f"q{rng.randint(0, 3)}"})])
        roll = rng.random()
        if roll < 0.3:
            return provider.respond("Done, I believe.")
        if roll < 0.6:
            key = rng.choice(["answer", "notes", "bogus"])
            value = rng.choice([None, "x", 42, ["a"]])
            return provider.respond([("set_output", {"key": key, "value": value})])
        return provider.respond(_turn(rng))

    return answer


def _bounds_cases(count: int, rng: random.Random) -> list[BoundsCase]:
    return [
        BoundsCase(
            judge=JUDGES[i % len(JUDGES)],
            model=MODELS[(i // len(JUDGES)) % len(MODELS)],
            max_iterations=rng.randint(1, 60),
            max_steps=rng.randint(1, 20),
            on_success=rng.choice(["worker", "fix", "done"]),
            done_loops=rng.random() < 0.5,
            every_n=rng.choice([1, 1, 2, 3]),
            seed=rng.randrange(2**32),
        )
        for i in range(count)
    ]


def check_bounds(events: Sequence[Event], max_iterations: int, max_steps: int) -> list[str]:
    """The violated bounds of one run, read from its events (empty: none)."""
    problems: list[str] = []
    turns_in_visit: dict[str, int] = {}
    starts = 0
    for event in events:
        body = event.body
        if isinstance(body, NodeStarted):
            turns_in_visit[body.node_id] = 0
            if body.attempt == 1:
                starts += 1
        elif isinstance(body, LlmTurn):
            turns_in_visit[body.node_id] = turns_in_visit.get(body.node_id, 0) + 1
            if turns_in_visit[body.node_id] > max_iterations or body.iteration > max_iterations:
                problems.append(
                    f"{body.node_id} made turn {turns_in_visit[body.node_id]} "
                    f"(iteration {body.iteration}) > max_iterations {max_iterations}"
                )
    if starts > max_steps:
        problems.append(f"{starts} node starts > max_steps {max_steps}")
    finished = [e for e in events if isinstance(e.body, RunFinished)]
    if len(finished) != 1 or events[-1] is not finished[0]:
        problems.append(f"{len(finished)} RunFinished events, not one at the end")
    return problems


async def _bounds_part(runs: int, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    cases = _bounds_cases(runs, rng)
    provider = CaseProvider()
    judges: dict[str, JudgeProtocol] = {
        "always_retry": _AlwaysRetry(),
        "random": _RandomJudge(seed),
        "raises": _RaisingJudge(),
    }
    functions: dict[str, Callable[..., Any]] = {"fix": lambda inputs: {}, "done": lambda inputs: {}}
    violations: list[str] = []
    per_judge: dict[
        str, list[int]
    ] = {}  # judge -> [runs, turns, max_iterations hit, max_steps hit]
    started = time.perf_counter()
    total_turns = 0
    async with Runtime(
        None, provider=provider, tools=TOOLS, judges=judges, functions=functions
    ) as rt:

        def job(case_id: int, case: BoundsCase) -> Callable[[], Awaitable[None]]:
            provider.cases[case_id] = _bounds_answer(provider, case)

            async def go() -> None:
                nonlocal total_turns
                events = await _run_graph(rt, _bounds_graph(case_id, case))
                problems = check_bounds(events, case.max_iterations, case.max_steps)
                violations.extend(f"case {case_id} ({case}): {p}" for p in problems)
                turns = sum(1 for e in events if isinstance(e.body, LlmTurn))
                total_turns += turns
                final = events[-1].body
                row = per_judge.setdefault(case.judge, [0, 0, 0, 0])
                row[0] += 1
                row[1] += turns
                row[2] += sum(
                    1 for e in events if getattr(e.body, "level", None) == "max_iterations"
                )
                if isinstance(final, RunFinished) and "max_steps" in (final.error or ""):
                    row[3] += 1
                provider.cases.pop(case_id, None)

            return go

        await _run_all([job(i, c) for i, c in enumerate(cases)])
    return {
        "violations": violations,
        "per_judge": per_judge,
        "turns": total_turns,
        "seconds": time.perf_counter() - started,
    }


# ---------------------------------------------------------------------------- judge cost


def judge_contexts() -> dict[str, JudgeContext]:
    """The hot-path contexts: bail-out, Level 0 RETRY, Level 0 ACCEPT."""
    keys = ["flight_options", "hotel_recommendations", "budget_estimate"]
    partial = {"flight_options": "TP 209", "hotel_recommendations": "The Marlton (4.6/5)"}
    full = dict(partial, budget_estimate={"total": 2188})
    return {
        "bail_out": judge_context(
            node_id="planner",
            iteration=3,
            accumulator=partial,
            expected_keys=keys,
            turn_had_tool_calls=True,
        ),
        "structural_retry": judge_context(
            node_id="planner",
            iteration=4,
            accumulator=partial,
            expected_keys=keys,
            turn_had_tool_calls=False,
        ),
        "structural_accept": judge_context(
            node_id="planner",
            iteration=5,
            accumulator=full,
            expected_keys=keys,
            turn_had_tool_calls=False,
        ),
    }


async def _time_calls(call: Callable[[], Awaitable[Any]], batches: int, per_batch: int) -> float:
    """Median over ``batches`` of the mean seconds per call within a batch."""
    for _ in range(per_batch):  # warm-up
        await call()
    means = []
    for _ in range(batches):
        started = time.perf_counter()
        for _ in range(per_batch):
            await call()
        means.append((time.perf_counter() - started) / per_batch)
    return statistics.median(means)


async def _judge_part(batches: int, per_batch: int) -> dict[str, tuple[float, float, str]]:
    implicit = ImplicitJudge()
    results: dict[str, tuple[float, float, str]] = {}
    async with ActorSystem() as system:
        ref = system.spawn(JudgeActor(implicit), name="judge")
        for name, context in judge_contexts().items():
            verdict = await rule(context, judge=None, implicit=implicit)
            request = JudgeRequest(context=context)

            async def direct(context: JudgeContext = context) -> Any:
                return await rule(context, judge=None, implicit=implicit)

            async def hop(request: JudgeRequest = request) -> Any:
                return await ref.ask(request)

            assert await ref.ask(request) == verdict
            direct_s = await _time_calls(direct, batches, per_batch)
            actor_s = await _time_calls(hop, batches, per_batch)
            results[name] = (direct_s * 1e6, actor_s * 1e6, f"{verdict.action}/{verdict.level}")
        await ref.stop()
    return results


# ---------------------------------------------------------------------------- main


async def _main(quick: bool) -> None:
    stall_runs = 200 if quick else 1000
    bounds_runs = 120 if quick else 600
    batches, per_batch = (40, 200) if quick else (200, 500)

    stall = await _stall_part(stall_runs, seed=7)
    outcome: dict[str, list[int]] = stall["outcome"]
    print_table(
        f"Stall detection ({stall_runs} repeating + {stall_runs} non-repeating runs, "
        f"in-memory log, {stall['seconds']:.1f}s)",
        ["model", "runs", "exact", "false detections", "missed"],
        [[kind, *row] for kind, row in sorted(outcome.items())],
    )

    bounds = await _bounds_part(bounds_runs, seed=11)
    per_judge: dict[str, list[int]] = bounds["per_judge"]
    print_table(
        f"Bounded iteration ({bounds_runs} cyclic runs, max_iterations 1..60, max_steps 1..20, "
        f"{bounds['turns']} turns, in-memory log, {bounds['seconds']:.1f}s)",
        ["judge", "runs", "turns", "max_iterations stops", "max_steps stops"],
        [[judge, *row] for judge, row in sorted(per_judge.items())],
    )
    for violation in bounds["violations"][:10]:
        print(f"VIOLATION {violation}")

    judge = await _judge_part(batches, per_batch)
    print_table(
        f"Implicit judge cost per turn (median of {batches} batches x {per_batch} calls)",
        ["context", "verdict", "direct us", "via JudgeActor us"],
        [[name, verdict, d, a] for name, (d, a, verdict) in judge.items()],
    )

    repeats = outcome.get("repeats", [0, 0, 0, 0])
    false_positives = sum(row[2] for kind, row in outcome.items() if kind != "repeats")
    print()
    print(f"guarantees.stall.detected_at_3rd: {repeats[1]}/{repeats[0]}")
    print(f"guarantees.stall.false_positives: {false_positives}")
    print(f"guarantees.bounds.runs: {bounds_runs}")
    print(f"guarantees.bounds.violations: {len(bounds['violations'])}")
    figure("guarantees.judge.us_per_turn", max(d for d, _, _ in judge.values()), "us")
    figure("guarantees.judge.actor_us_per_turn", max(a for _, a, _ in judge.values()), "us")


def main(quick: bool) -> None:
    """Run the three parts and print their tables and figures."""
    anyio.run(_main, quick)
