"""Tools from Python callables: schemas, validated invocation, the registry, run_tool_calls."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Literal, Optional, TypedDict

import anyio
import anyio.lowlevel
import msgspec
import pytest

from runtime._errors import UnknownToolError
from runtime.llm._tools import Tool, ToolRegistry, run_tool_calls, tool
from runtime.providers._base import ToolCall, ToolSpec

pytestmark = pytest.mark.anyio


class Point(msgspec.Struct):
    x: int
    y: int = 0


class Address(TypedDict):
    street: str
    city: str


class Opaque:
    pass


@tool
def get_weather(city: str, unit: Literal["C", "F"] = "C", days: int = 1) -> dict[str, Any]:
    """Current weather for a city.

    Uses the scripted weather service.

    Args:
        city: The city name,
            e.g. "Lisbon".
        unit (str): Temperature unit.
        days: How many days to forecast.

    Returns:
        A forecast.
    """
    return {"city": city, "unit": unit, "days": days}


async def test_schema_from_signature_and_docstring() -> None:
    assert isinstance(get_weather, Tool)
    assert get_weather.name == "get_weather"
    assert get_weather.description == "Current weather for a city."
    assert get_weather.parameters == {
        "type": "object",
        "properties": {
            "city": {"type": "string", "description": 'The city name, e.g. "Lisbon".'},
            "unit": {"enum": ["C", "F"], "default": "C", "description": "Temperature unit."},
            "days": {
                "type": "integer",
                "default": 1,
                "description": "How many days to forecast.",
            },
        },
        "required": ["city"],
        "additionalProperties": False,
    }
    assert get_weather.spec() == ToolSpec(
        name="get_weather",
        description="Current weather for a city.",
        parameters=get_weather.parameters,
    )


async def test_schema_for_containers_optionals_and_structs() -> None:
    def plot(  # type: ignore[no-untyped-def]
        points: list[Point],
        labels: dict[str, str],
        title: Optional[str] = None,  # noqa: UP045 - Optional is what users write too
        where: Address | None = None,
        scale: float = 1.0,
        verbose: bool = False,
        extra=None,
    ) -> str:
        return "ok"

    schema = Tool.from_callable(plot).parameters
    props = schema["properties"]
    assert schema["required"] == ["points", "labels"]
    assert props["points"] == {"type": "array", "items": {"$ref": "#/$defs/Point"}}
    assert props["labels"] == {"type": "object", "additionalProperties": {"type": "string"}}
    assert props["title"] == {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None}
    assert props["scale"] == {"type": "number", "default": 1.0}
    assert props["verbose"] == {"type": "boolean", "default": False}
    assert props["extra"] == {"default": None}
    assert schema["$defs"]["Point"]["properties"] == {
        "x": {"type": "integer"},
        "y": {"type": "integer", "default": 0},
    }
    assert sorted(schema["$defs"]["Address"]["required"]) == ["city", "street"]
    # msgspec's "title" noise is gone, but a parameter *named* title stays.
    assert "title" not in schema and "title" not in schema["$defs"]["Point"]
    assert "title" in props


async def test_decorator_with_options_and_direct_calls() -> None:
    @tool(name="adder", description="Adds.", serial=True)
    def add(a: int, b: int) -> int:
        """Ignored docstring."""
        return a + b

    assert (add.name, add.description, add.serial) == ("adder", "Adds.", True)
    assert add(2, 3) == 5  # a decorated function stays callable


async def test_invoke_converts_arguments_and_encodes_results() -> None:
    assert await get_weather.invoke({"city": "Lisbon"}) == '{"city":"Lisbon","unit":"C","days":1}'
    # Lax conversion: models often send numbers as strings.
    text = await get_weather.invoke({"city": "Porto", "unit": "F", "days": "3"})
    assert text == '{"city":"Porto","unit":"F","days":3}'

    @tool
    def greet(name: str) -> str:
        return f"hello {name}"

    assert await greet.invoke({"name": "Ada"}) == "hello Ada"


async def test_invoke_builds_structs_from_nested_objects() -> None:
    @tool
    def norm(p: Point) -> int:
        assert isinstance(p, Point)
        return abs(p.x) + abs(p.y)

    assert await norm.invoke({"p": {"x": -3, "y": 4}}) == "7"


async def test_bad_arguments_are_an_error_text_not_a_crash() -> None:
    wrong_type = await get_weather.invoke({"city": "Lisbon", "days": "many"})
    assert wrong_type.startswith("ToolArgumentsError")
    assert "get_weather" in wrong_type and "$.days" in wrong_type
    missing = await get_weather.invoke({})
    assert "ToolArgumentsError" in missing and "city" in missing
    unknown = await get_weather.invoke({"city": "x", "colour": "red"})
    assert "ToolArgumentsError" in unknown and "colour" in unknown
    bad_literal = await get_weather.execute({"city": "x", "unit": "K"})
    assert bad_literal[1] is True and "ToolArgumentsError" in bad_literal[0]


async def test_sync_tools_run_in_a_worker_thread_and_async_ones_in_the_loop() -> None:
    main_thread = threading.get_ident()

    @tool
    def where_sync() -> bool:
        return threading.get_ident() == main_thread

    @tool
    async def where_async() -> bool:
        await anyio.lowlevel.checkpoint()
        return threading.get_ident() == main_thread

    assert await where_sync.invoke({}) == "false"
    assert await where_async.invoke({}) == "true"


async def test_invoke_propagates_and_execute_catches_tool_exceptions() -> None:
    @tool
    def fails(x: int) -> None:
        raise ValueError(f"bad x {x}")

    with pytest.raises(ValueError, match="bad x 1"):
        await fails.invoke({"x": 1})
    assert await fails.execute({"x": 2}) == ("ValueError: bad x 2", True)


async def test_unsupported_signatures_are_refused() -> None:
    def star(*args: int) -> None: ...

    def star_star(**kwargs: int) -> None: ...

    def opaque(o: Opaque) -> None: ...

    class Local:
        pass

    def unresolvable(o: Local) -> None: ...

    cases: list[tuple[Callable[..., Any], str]] = [
        (star, "args"),
        (star_star, "kwargs"),
        (opaque, "no JSON schema"),
        (unresolvable, "cannot resolve"),
    ]
    for fn, why in cases:
        with pytest.raises(TypeError, match=why):
            Tool.from_callable(fn)
    with pytest.raises(TypeError, match="name"):
        Tool.from_callable(lambda: None)
    assert Tool.from_callable(lambda: None, name="noop").name == "noop"


async def test_positional_only_and_mutable_defaults() -> None:
    @tool
    def tag(item: str, /, tags: list[str] = ["a"]) -> list[str]:  # noqa: B006
        tags.append(item)
        return tags

    assert await tag.invoke({"item": "b"}) == '["a","b"]'
    # Each call gets a fresh copy of the default.
    assert await tag.invoke({"item": "c"}) == '["a","c"]'


async def test_registry_lookup_and_specs() -> None:
    registry = ToolRegistry([get_weather])

    @registry.register
    def ping() -> str:
        """Answers pong."""
        return "pong"

    assert isinstance(ping, Tool)
    assert registry.names == ["get_weather", "ping"]
    assert "ping" in registry and len(registry) == 2
    assert registry.get("ping") is ping
    assert [s.name for s in registry.specs(["ping", "get_weather"])] == ["ping", "get_weather"]
    assert [s.name for s in registry.specs()] == ["get_weather", "ping"]
    with pytest.raises(UnknownToolError, match=r"'pong'.*get_weather, ping") as caught:
        registry.get("pong")
    assert isinstance(caught.value, LookupError)
    with pytest.raises(UnknownToolError):
        registry.specs(["ping", "nope"])
    with pytest.raises(ValueError, match="already registered"):
        registry.register(ping)
    registry.register(Tool.from_callable(lambda: "new", name="ping"), replace=True)
    assert await registry.get("ping").invoke({}) == "new"


async def test_run_tool_calls_runs_independent_calls_concurrently() -> None:
    arrived = 0
    all_here = anyio.Event()

    @tool
    async def gather(n: int) -> int:
        nonlocal arrived
        arrived += 1
        if arrived == 3:
            all_here.set()
        # Only returns once all three calls are running at the same time.
        with anyio.fail_after(10):
            await all_here.wait()
        return n * 10

    registry = ToolRegistry([gather])
    calls = [ToolCall(id=f"c{i}", name="gather", arguments={"n": i}) for i in range(3)]
    results = await run_tool_calls(registry, calls)
    assert results == [(calls[0], "0", False), (calls[1], "10", False), (calls[2], "20", False)]


async def test_serial_tools_run_alone_after_the_concurrent_group() -> None:
    running = 0
    log: list[str] = []

    async def enter(label: str) -> int:
        nonlocal running
        running += 1
        log.append(f"start {label} ({running} running)")
        await anyio.sleep(0.01)
        running -= 1
        return running

    @tool(serial=True)
    async def write(path: str) -> str:
        await enter(f"write {path}")
        return "written"

    @tool
    async def read(path: str) -> str:
        await enter(f"read {path}")
        return "content"

    registry = ToolRegistry([write, read])
    calls = [
        ToolCall(id="1", name="write", arguments={"path": "a"}),
        ToolCall(id="2", name="read", arguments={"path": "b"}),
        ToolCall(id="3", name="write", arguments={"path": "c"}),
        ToolCall(id="4", name="read", arguments={"path": "d"}),
    ]
    results = await run_tool_calls(registry, calls)
    assert [(c.id, text, err) for c, text, err in results] == [
        ("1", "written", False),
        ("2", "content", False),
        ("3", "written", False),
        ("4", "content", False),
    ]
    writes = [entry for entry in log if entry.startswith("start write")]
    assert writes == ["start write a (1 running)", "start write c (1 running)"]
    assert log.index("start write a (1 running)") > 1  # after both reads started


async def test_run_tool_calls_turns_failures_into_error_results() -> None:
    @tool
    def boom() -> str:
        raise RuntimeError("kaput")

    @tool
    def ok() -> str:
        return "fine"

    registry = ToolRegistry([boom, ok])
    calls = [
        ToolCall(id="1", name="boom", arguments={}),
        ToolCall(id="2", name="missing", arguments={}),
        ToolCall(id="3", name="ok", arguments={"unexpected": 1}),
        ToolCall(id="4", name="ok", arguments={}),
    ]
    results = await run_tool_calls(registry, calls)
    assert [c.id for c, _, _ in results] == ["1", "2", "3", "4"]
    assert results[0][1:] == ("RuntimeError: kaput", True)
    assert results[1][2] is True and "unknown tool 'missing'" in results[1][1]
    assert results[2][2] is True and "ToolArgumentsError" in results[2][1]
    assert results[3][1:] == ("fine", False)


async def test_run_tool_calls_respects_max_concurrency() -> None:
    running = 0
    peak = 0

    @tool
    async def work(n: int) -> int:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await anyio.sleep(0.01)
        running -= 1
        return n

    registry = ToolRegistry([work])
    calls = [ToolCall(id=str(i), name="work", arguments={"n": i}) for i in range(6)]
    results = await run_tool_calls(registry, calls, max_concurrency=2)
    assert [text for _, text, _ in results] == [str(i) for i in range(6)]
    assert peak == 2


async def test_a_directly_built_tool_gets_raw_arguments() -> None:
    def lookup(**kwargs: Any) -> dict[str, Any]:
        return kwargs

    schema = {"type": "object", "properties": {"q": {"type": "string"}}}
    handmade = Tool(name="lookup", description="Hand-written.", parameters=schema, fn=lookup)
    assert handmade.spec().parameters == schema
    assert await handmade.invoke({"q": "x", "n": 2}) == '{"q":"x","n":2}'


async def test_run_tool_calls_with_no_calls() -> None:
    assert await run_tool_calls(ToolRegistry(), []) == []


async def test_run_tool_calls_refuses_arguments_a_run_log_cannot_store() -> None:
    seen: list[float] = []

    @tool
    def half(x: float) -> float:
        """Half x."""
        seen.append(x)
        return x / 2

    calls = [
        ToolCall(id="1", name="half", arguments={"x": float("nan")}),
        ToolCall(id="2", name="half", arguments={"x": 3.0}),
    ]
    results = await run_tool_calls(ToolRegistry([half]), calls)
    assert [(c.id, text, err) for c, text, err in results] == [
        (
            "1",
            "ToolArgumentsError: invalid arguments for tool 'half': argument 'x' is nan "
            "(JSON has no NaN or infinity)",
            True,
        ),
        ("2", "1.5", False),
    ]
    assert seen == [3.0]
