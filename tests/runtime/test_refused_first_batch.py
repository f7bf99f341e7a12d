"""A run whose first batch a store refuses as bad input (a PostgreSQL store's ValueError
for text it cannot hold: a graph id over 2,000 bytes of UTF-8, or holding NUL) was never
written: ``start`` raises that error and the store holds nothing of the run (no events,
no listing row, no claim), through the library and the HTTP API alike. A later batch
refused so still ends its run failed."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anyio
import httpx
import psycopg
import pytest
from psycopg import sql

from runtime import (
    EdgeSpec,
    GraphSpec,
    LlmRequest,
    LlmResponse,
    NodeSpec,
    ProviderError,
    Runtime,
)
from runtime.events import RunFinished, RunStarted
from runtime.server import create_app
from runtime.testing import linear_graph
from tests.pgsupport import drop_schemas, fresh_prefix, pg_url

from .server.support import live_server

pytestmark = pytest.mark.anyio

TOKEN = "test-token-0123456789"
LONG = "g" * 2001
FUNCTIONS: dict[str, Any] = {n: (lambda inputs: {"x": 1}) for n in "abc"}


@pytest.fixture
def schema() -> Iterator[str]:
    pg_url()
    prefix = fresh_prefix()
    yield f"{prefix}_store"
    drop_schemas(prefix)


def _url(schema: str) -> str:
    return f"{pg_url()}?schema={schema}"


def _rows(schema: str) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """The store's runs (a claim is recorded in its run's row) and events, as held."""
    with psycopg.connect(pg_url()) as conn:
        runs = conn.execute(
            sql.SQL("SELECT run_id, status, owner FROM {}.runs").format(sql.Identifier(schema))
        ).fetchall()
        events = conn.execute(
            sql.SQL("SELECT run, seq FROM {}.events").format(sql.Identifier(schema))
        ).fetchall()
    return runs, events


def _nothing_of_a_run(schema: str) -> bool:
    """No event, and no run: at most a claim's row given up (status new, no owner)."""
    runs, events = _rows(schema)
    return events == [] and all(row[1:] == ("new", None) for row in runs)


@pytest.mark.parametrize("graph_id", [LONG, "g\x00h"], ids=["long", "nul"])
@pytest.mark.parametrize("run_id", [None, "named-run"], ids=["new-id", "named"])
@pytest.mark.parametrize("durability", ["sync", "async"])
async def test_a_start_the_store_refuses_raises_and_records_nothing(
    schema: str, graph_id: str, run_id: str | None, durability: str
) -> None:
    graph = linear_graph(["a"], graph_id=graph_id, durability=durability)
    async with Runtime(_url(schema), functions=FUNCTIONS) as rt:
        with pytest.raises(ValueError, match="nothing was written"):
            await rt.start(graph, run_id=run_id)
        assert _nothing_of_a_run(schema)  # its claim given up before start raised
        assert rt.store is not None and await rt.store.list_runs() == []
        if run_id is not None:
            assert await rt.store.get_run(run_id) is None
        # Nothing of it is left here either: the same id starts a run of a graph it keeps.
        handle = await rt.start(linear_graph(["a"], graph_id="kept"), run_id=run_id)
        with anyio.fail_after(20):
            assert (await handle.result()).status == "completed"
        assert [info.run_id for info in await rt.store.list_runs()] == [handle.run_id]


async def test_a_submit_the_store_refuses_raises_and_records_nothing(schema: str) -> None:
    async with Runtime(_url(schema), functions=FUNCTIONS) as rt:
        with pytest.raises(ValueError, match="nothing was written"):
            await rt.start(linear_graph(["a"], graph_id=LONG))
        with pytest.raises(ValueError, match="nothing was written"):
            await rt.submit(linear_graph(["a"], graph_id="g\x00h"), run_id="submitted")
        assert _nothing_of_a_run(schema)


@pytest.mark.parametrize("execute", ["server", "workers"])
async def test_the_api_answers_a_start_the_store_refuses_400(schema: str, execute: str) -> None:
    graph = linear_graph(["a"], graph_id=LONG)
    async with Runtime(_url(schema), functions=FUNCTIONS) as rt:
        app = create_app(rt, graphs=[graph], token=TOKEN)
        async with (
            live_server(app) as url,
            httpx.AsyncClient(base_url=url, timeout=30) as client,
        ):
            response = await client.post(
                "/api/runs",
                json={"graph": LONG, "execute": execute},
                headers={"Authorization": f"Bearer {TOKEN}"},
            )
    assert response.status_code == 400
    answer = response.json()
    assert answer["error"] == "bad_graph"
    assert "is 2001 bytes long" in answer["detail"] and "nothing was written" in answer["detail"]
    assert _nothing_of_a_run(schema)


class _SurrogateError:
    """A provider whose failure message holds a lone surrogate (text no log can store)."""

    name = "odd"

    async def complete(self, request: LlmRequest) -> LlmResponse:
        raise ProviderError("odd", "gateway said \ud800")


async def test_a_later_batch_refused_as_bad_input_still_fails_its_run(schema: str) -> None:
    # The edge's decision records the provider's error, which no log can encode: that
    # batch is refused (UnicodeEncodeError, a ValueError) after the run's start committed.
    routed = GraphSpec(
        id="g",
        entry_node="a",
        nodes=[NodeSpec(id=n, function=n) for n in "abc"],
        edges=[
            EdgeSpec(source="a", target="b", condition="llm_decide", fallback="c"),
            EdgeSpec(source="a", target="c", condition="llm_decide", fallback="c"),
        ],
    )
    async with Runtime(_url(schema), provider=_SurrogateError(), functions=FUNCTIONS) as rt:
        with pytest.raises(ValueError, match="nothing was written"):
            await rt.start(linear_graph(["a"], graph_id=LONG))
        handle = await rt.start(routed)
        with anyio.fail_after(20):
            result = await handle.result()
        events = await rt.read_events(handle.run_id)
    assert result.status == "failed"
    assert result.error is not None and result.error.startswith("UnicodeEncodeError")
    assert isinstance(events[0].body, RunStarted) and isinstance(events[-1].body, RunFinished)
    runs, _ = _rows(schema)
    assert [row for row in runs if row[1] != "new"] == [(handle.run_id, "failed", None)]
