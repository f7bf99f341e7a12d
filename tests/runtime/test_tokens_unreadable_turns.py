"""A paid model call that gave no answer the log records elsewhere is recorded with what
it ended, and the run's log, report and token metric agree with the providers'
``statistics()``.

An HTTP answer that cannot be read but says what it cost (a ``MalformedResponseError``
carrying ``usage``), asked by an LLM node's turn (``node.failed``'s ``usage``, purpose
``turn``; a cut answer asked again counts too), by a parallel branch (``branch.finished``'s
``usage``), by the branch judge (``branches.judged``'s counts) or by an ``llm_judge``
verifier (``node.failed``'s ``usage``, purpose ``verify``); and the Level 2 judge calls
that returned in a node attempt its ``timeout`` cut before the judge ruled
(``node.failed``'s ``usage``, purpose ``judge``). Each run whose calls the replay can
serve replays equal (its token counts are not compared; a call cut by a node's timeout
has no recorded answer to serve).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from prometheus_client import CollectorRegistry

from runtime import LlmRequest, LlmResponse, Runtime, RuntimeMetrics, TimeoutConfig, Usage
from runtime.events import (
    BranchesJudged,
    BranchFinished,
    BranchTurn,
    EdgeTaken,
    LlmTurn,
    NodeFailed,
    RunFinished,
    Verdict,
    VerificationRecorded,
)
from runtime.providers._asked import where_asked
from runtime.providers._openai import OpenAIProvider
from runtime.reads import RunReader, RunReport, Tokens
from runtime.spec import (
    BranchJudgeSpec,
    BranchSpec,
    GraphSpec,
    LlmJudgeVerifier,
    NodeSpec,
    ParallelSpec,
)
from runtime.testing import ScriptedProvider, tool_call

from .llm_servers import OpenAIServer, openai_completion
from .test_llm_node import edge, graph, llm

pytestmark = pytest.mark.anyio

FIELDS = ("input_tokens", "output_tokens", "input_cached", "input_cache_write")
DIRECTIONS = ("input", "output", "input_cached", "input_cache_write")


# ------------------------------------------------------------------ reading the totals


def logged(events: list[Any]) -> Counter[str]:
    """The tokens the log's events record, read field by field (not through
    ``runtime.events._tokens.paid``, which the report and the metric share)."""
    total: Counter[str] = Counter()
    for body in events:
        if isinstance(body, LlmTurn | BranchTurn | BranchesJudged | Verdict | VerificationRecorded):
            source: Any = body
        elif isinstance(body, EdgeTaken | NodeFailed | BranchFinished):
            source = getattr(body, "usage", None)  # None: nothing paid
        elif isinstance(body, RunFinished):
            for name in FIELDS:
                total[name] += getattr(body, f"goal_{name}")
            continue
        else:
            continue
        for name in FIELDS:
            total[name] += getattr(source, name, 0)
    return +total


def spent(body: Any) -> tuple[Any, ...] | None:
    """What ``body``'s ``usage`` says was paid (and, on ``node.failed``, for what)."""
    usage = getattr(body, "usage", None)  # an older body has none
    if usage is None:
        return None
    return (getattr(usage, "purpose", None), *(getattr(usage, name) for name in FIELDS))


def counted(*providers: Any) -> Counter[str]:
    """The tokens the providers' own ``statistics()`` count."""
    total: Counter[str] = Counter()
    for provider in providers:
        stats = provider.statistics()
        for name in FIELDS:
            total[name] += getattr(stats, name)
    return +total


def reported(report: RunReport) -> Counter[str]:
    t = report.tokens
    counts = (t.input, t.output, t.input_cached, t.input_cache_write)
    return +Counter(dict(zip(FIELDS, counts, strict=True)))


async def run(
    tmp_path: Path,
    spec: GraphSpec,
    provider: Any,
    *,
    input: dict[str, Any] | None = None,
    **runtime: Any,
) -> tuple[Any, list[Any], RunReport, Counter[str]]:
    """Run ``spec``; its result, its log's bodies, its report and the token metric's
    counts (on a registry of its own, by event field name)."""
    registry = CollectorRegistry()
    async with Runtime(
        tmp_path / "run.db", provider=provider, metrics=RuntimeMetrics(registry), **runtime
    ) as rt:
        result = await (await rt.start(spec, input=input)).result()
        events = [e.body for e in await rt.read_events(result.run_id)]
        assert rt.store is not None
        report = await RunReader(rt.store).report(result.run_id)
    metric: Counter[str] = Counter()
    for direction, name in zip(DIRECTIONS, FIELDS, strict=True):
        sample = {"direction": direction}
        metric[name] = int(registry.get_sample_value("magistrate_llm_tokens_total", sample) or 0)
    return result, events, report, +metric


async def replays_equal(tmp_path: Path, run_id: str, **runtime: Any) -> None:
    """The recorded run replays equal (its calls served from the log)."""
    async with Runtime(tmp_path / "run.db", **runtime) as rt:
        replayed = await rt.replay(run_id)
    assert replayed.equal, replayed.summary()


def unreadable(prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
    """A billed answer that cannot be read (no choices) but whose usage can."""
    body = openai_completion(
        "lost", prompt_tokens=prompt_tokens, completion_tokens=completion_tokens
    )
    body["choices"] = []
    return body


def openai(server: OpenAIServer) -> OpenAIProvider:
    return OpenAIProvider(api_key=server.api_key, base_url=server.base_url, model="gpt-4o-mini")


@pytest.fixture
def second_server() -> Iterator[OpenAIServer]:
    server = OpenAIServer()
    server.start()
    try:
        yield server
    finally:
        server.close()


# ------------------------------------------------------------------ an LLM node's turn


@pytest.mark.parametrize("cut_first", [False, True], ids=["unreadable", "cut-then-unreadable"])
async def test_an_unreadable_answer_to_a_turn_is_recorded_with_the_nodes_failure(
    tmp_path: Path, openai_server: OpenAIServer, cut_first: bool
) -> None:
    openai_server.respond(
        openai_completion(
            "",
            tool_calls=[("c1", "set_output", '{"key": "draft", "value": "Dear Ann"}')],
            prompt_tokens=10,
            completion_tokens=1,
        )
    )
    if cut_first:  # cut at the token cap: asked once more, and that answer is unreadable
        openai_server.respond(
            openai_completion("Dear", prompt_tokens=50, completion_tokens=5, finish_reason="length")
        )
    openai_server.respond(unreadable(400, 4))
    spec = graph([llm("write", output_keys=["draft"])])
    async with openai(openai_server) as model:
        result, events, report, metric = await run(tmp_path, spec, model)
        stats = model.statistics()
    assert result.status == "failed"
    assert stats.failures == 1 and stats.input_tokens == (460 if cut_first else 410)
    # The turn had no answer to record: its cost is in the node's failure, as a turn's.
    [failed] = [e for e in events if isinstance(e, NodeFailed)]
    assert failed.error_type == "MalformedResponseError"
    paid = (450, 9) if cut_first else (400, 4)
    assert spent(failed) == ("turn", *paid, 0, 0)
    # Before, these tokens were in statistics() only.
    assert report.tokens_by_purpose == {"turn": Tokens(input=10 + paid[0], output=1 + paid[1])}
    assert logged(events) == counted(model)
    assert reported(report) == counted(model)
    assert metric == counted(model)
    await replays_equal(tmp_path, result.run_id)


# ------------------------------------------------------------------ a parallel branch


async def test_an_unreadable_answer_to_a_branch_is_recorded_with_its_end(
    tmp_path: Path, openai_server: OpenAIServer, second_server: OpenAIServer
) -> None:
    # Each branch asks its own server, so each gets its own answer whichever asks first.
    openai_server.respond(unreadable(300, 3))
    second_server.respond(openai_completion("Paris", prompt_tokens=20, completion_tokens=2))
    node = llm(
        "answer",
        parallel=ParallelSpec(
            branches=[BranchSpec(label="a", provider="p0"), BranchSpec(label="b", provider="p1")],
            strategy="first_success",
        ),
    )
    async with openai(openai_server) as p0, openai(second_server) as p1:
        providers = {"p0": p0, "p1": p1}
        result, events, report, metric = await run(tmp_path, graph([node]), p0, providers=providers)
        paid = counted(p0, p1)
    assert result.status == "completed", result
    finished = {e.label: e for e in events if isinstance(e, BranchFinished)}
    assert not finished["a"].ok and "MalformedResponseError" in (finished["a"].error or "")
    assert spent(finished["a"]) == (None, 300, 3, 0, 0)
    assert (finished["a"].turns, finished["a"].input_tokens) == (0, 0)  # no turn of its own
    assert finished["b"].ok and spent(finished["b"]) is None
    # Before, branch a's 300 tokens were in statistics() only.
    assert report.tokens_by_purpose == {"branch": Tokens(input=320, output=5)}
    assert paid["input_tokens"] == 320
    assert logged(events) == paid
    assert reported(report) == paid
    assert metric == paid
    await replays_equal(tmp_path, result.run_id)


async def test_an_unreadable_answer_of_the_branch_judge_is_recorded_with_its_call(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    openai_server.respond(unreadable(400, 4))
    branches = {
        name: ScriptedProvider(
            [LlmResponse(text=text, usage=Usage(input_tokens=n, output_tokens=1))], name=name
        )
        for name, text, n in (("p0", "Paris", 20), ("p1", "Lyon", 30))
    }
    node = llm(
        "answer",
        parallel=ParallelSpec(
            branches=[BranchSpec(label="a", provider="p0"), BranchSpec(label="b", provider="p1")],
            strategy="llm_judge",
            judge=BranchJudgeSpec(provider="bj"),
        ),
    )
    async with openai(openai_server) as judge:
        providers = {**branches, "bj": judge}
        result, events, report, metric = await run(
            tmp_path, graph([node]), branches["p0"], providers=providers
        )
        paid = counted(judge, *branches.values())
    assert result.status == "completed", result
    [judged] = [e for e in events if isinstance(e, BranchesJudged)]
    assert judged.error is not None and "MalformedResponseError" in judged.error
    # Before: 0 and 0, the 400 tokens in statistics() only.
    assert (judged.input_tokens, judged.output_tokens) == (400, 4)
    assert report.tokens_by_purpose["branch_judge"] == Tokens(input=400, output=4)
    assert logged(events) == paid
    assert reported(report) == paid
    assert metric == paid
    await replays_equal(tmp_path, result.run_id)


# ------------------------------------------------------------------ an llm_judge verifier


async def test_an_unreadable_evaluator_answer_is_recorded_with_the_verifiers_failure(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    openai_server.respond(unreadable(200, 2))
    openai_server.respond(
        openai_completion(
            '{"score": 0.9, "reasoning": "polite"}', prompt_tokens=30, completion_tokens=3
        )
    )
    verifier = NodeSpec(
        id="grade",
        kind="verifier",
        output_keys=["grade_verification", "grade_verification_passed"],
        verifier=LlmJudgeVerifier(target_key="draft", evaluation_criteria="polite"),
    )
    async with openai(openai_server) as model:
        result, events, report, metric = await run(
            tmp_path, graph([verifier]), model, input={"draft": "Dear Ann"}
        )
        paid = counted(model)
    assert result.status == "completed", result
    # The first attempt failed (retried by the graph's policy); its answer was paid for.
    [failed] = [e for e in events if isinstance(e, NodeFailed)]
    assert failed.will_retry and failed.error_type == "MalformedResponseError"
    assert spent(failed) == ("verify", 200, 2, 0, 0)
    # Before, only the second attempt's 30 tokens were recorded.
    assert report.tokens_by_purpose == {"verify": Tokens(input=230, output=5)}
    assert paid["input_tokens"] == 230
    assert logged(events) == paid
    assert reported(report) == paid
    assert metric == paid
    await replays_equal(tmp_path, result.run_id)


# ------------------------------------------------------------------ a node's timeout


def used(n: int) -> Usage:
    return Usage(input_tokens=100 * n, output_tokens=10 * n, input_cached=3 * n)


class Hanging(ScriptedProvider):
    """The scripted model: each node's turns from its own script (``turns``), the judge's
    from ``judge``. The calls ``hung`` names (``"<node> turn"`` or ``"judge"``: its call
    number) wait until they are cancelled (the node's timeout). A hung turn's answer
    never comes (an abandoned HTTP call: no usage); a hung judge call's comes all the
    same with ``late=True`` (the judge script's next answer, counted: a call that runs to
    its end once made), not otherwise."""

    def __init__(
        self,
        turns: dict[str, list[LlmResponse]],
        *,
        judge: list[Any],
        hung: dict[str, int],
        late: bool,
    ) -> None:
        super().__init__(self._turn, judge=judge)
        self.turns = turns
        self.hung = hung
        self.late = late
        self.numbers: Counter[str] = Counter()
        self.cancelled: list[str] = []

    def _turn(self, request: LlmRequest) -> LlmResponse:
        return self.turns[self._who(request).removesuffix(" turn")].pop(0)

    @staticmethod
    def _who(request: LlmRequest) -> str:
        place = where_asked()
        if request.purpose != "turn" or place is None:
            return request.purpose
        return f"{place.node} turn"

    async def complete(self, request: LlmRequest) -> LlmResponse:
        who = self._who(request)
        self.numbers[who] += 1
        if self.hung.get(who) == self.numbers[who]:
            try:
                await anyio.sleep_forever()
            except anyio.get_cancelled_exc_class():
                self.cancelled.append(who)
                if who != "judge" or not self.late:
                    raise
        return await super().complete(request)


def set_draft(key: str, n: int) -> LlmResponse:
    return LlmResponse(
        tool_calls=[tool_call("set_output", key=key, value="Dear Ann")],
        usage=used(n),
        stop="tool_use",
    )


async def hold_first_verdict(run_id: str, seq: int, batch: list[Any]) -> None:
    """A commit hook that holds the commit of node `first`'s quality verdict until it is
    cancelled (the node's timeout): the verdict is in the log, the attempt is cut before
    it goes on."""
    if any(isinstance(b, Verdict) and b.level == "quality" and b.node_id == "first" for b in batch):
        await anyio.sleep_forever()


@pytest.mark.parametrize(
    ("first_cut", "late"),
    [
        # `first` hangs two turns after its verdict (the one between not judged);
        # `second`'s hung judge call never answers
        pytest.param("later-turn", False, id="later-turn-hung"),
        # `first` is cut as its verdict is committed; `second`'s hung call answers as stopped
        pytest.param("verdict-commit", True, id="verdict-commit-answered-as-stopped"),
    ],
)
async def test_judge_calls_of_an_attempt_cut_by_its_timeout_are_recorded_with_it(
    tmp_path: Path, first_cut: str, late: bool
) -> None:
    model = Hanging(
        {
            # `first`: its output, an answer the judge sends back (recorded), its output
            # again (a tool turn, not judged), then a turn that hangs until the node's
            # timeout (unless cut before)
            "first": [
                set_draft("a", 1),
                LlmResponse(text="Done.", usage=used(2)),
                set_draft("a", 8),
            ],
            # `second`: its output, an answer whose judge does not rule before the timeout
            "second": [set_draft("b", 3), LlmResponse(text="Done.", usage=used(4))],
        },
        judge=[
            LlmResponse(
                text='{"verdict": "RETRY", "confidence": 0.8, "feedback": "warmer"}',
                usage=used(5),
            ),
            # no verdict in it: asked again, and that call hangs
            LlmResponse(text="hmm, hard to say", usage=used(7)),
            LlmResponse(text='{"verdict": "ACCEPT", "confidence": 0.9}', usage=used(6)),
        ],
        hung={"first turn": 4, "judge": 3},
        late=late,
    )
    criteria = ["the draft is polite"]
    first_node = llm("first", output_keys=["a"], success_criteria=criteria, judge_every_n_turns=2)
    spec = graph(
        [first_node, llm("second", output_keys=["b"], success_criteria=criteria)],
        [edge("first", "second", "on_failure")],
    )
    hooks = [hold_first_verdict] if first_cut == "verdict-commit" else []
    result, events, report, metric = await run(
        tmp_path, spec, model, timeouts=TimeoutConfig(node=1.0, judge=600.0), hooks=hooks
    )
    assert result.status == "failed"
    if first_cut == "later-turn":
        assert model.cancelled == ["first turn", "judge"]
        turns = [t for t in events if isinstance(t, LlmTurn) and t.node_id == "first"]
        assert len(turns) == 3  # the third not judged: the verdict is on the second
    else:
        assert model.cancelled == ["judge"]
    first, second = [e for e in events if isinstance(e, NodeFailed)]
    assert (first.node_id, first.error_type) == ("first", "NodeTimeoutError")
    # Its judge's calls are in the RETRY verdict it recorded (whether the attempt was cut
    # later or while it was committed): not counted again with the timeout.
    [retry] = [v for v in events if isinstance(v, Verdict) and v.level == "quality"]
    assert (retry.node_id, retry.action, retry.input_tokens) == ("first", "retry", 500)
    assert spent(first) is None
    # `second`'s judge never ruled: the calls it paid for are recorded with the timeout
    # (before, they were in statistics() only), the one answered as it stopped too.
    assert (second.node_id, second.error_type) == ("second", "NodeTimeoutError")
    n = 7 + 6 if late else 7
    assert spent(second) == ("judge", 100 * n, 10 * n, 3 * n, 0)
    assert report.tokens_by_purpose["judge"] == Tokens(
        input=100 * (5 + n), output=10 * (5 + n), input_cached=3 * (5 + n)
    )
    paid = counted(model)
    asked = 1 + 2 + 3 + 4 + (8 if first_cut == "later-turn" else 0)
    assert paid["input_tokens"] == 100 * (asked + 5 + n)
    assert logged(events) == paid
    assert reported(report) == paid
    assert metric == paid
