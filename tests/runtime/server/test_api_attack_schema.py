"""Every error answer agrees with /openapi.json, over real HTTP: its status code is one the
operation declares, and its body is the one ApiError shape (``error`` and ``detail``,
``run_id`` and ``status`` only when a run is concerned, never null), whether the app, its
routing or its guard refused the request, or a failure nobody expected met it."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import httpx
import pytest

from eventstore import EventStore, SqliteEventStore
from runtime import Runtime
from runtime.server import create_app
from runtime.server._params import MAX_BODY

from .support import AUTH, FUNCTIONS, QUICK, TOKEN, Served, draft_script, live_server, served

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

_FIELDS = {"error", "detail", "run_id", "status"}


def _check_error(answer: httpx.Response) -> None:
    assert answer.headers["content-type"] == "application/json", answer.text
    body = answer.json()
    assert isinstance(body, dict) and {"error", "detail"} <= body.keys() <= _FIELDS, body
    assert all(isinstance(value, str) and value for value in body.values()), body


def _probes(run_id: str) -> list[tuple[str, str, str, int, dict[str, Any]]]:
    """Requests each refused: (method, operation's path, URL, status expected, arguments)."""
    run = f"/api/runs/{run_id}"
    one = "/api/runs/{run_id}"  # the operation's path; `run` names the run
    nobody: dict[str, Any] = {"headers": {}}
    taken, by = run_id, {"by": "ann"}
    return [
        ("get", "/api/graphs", "/api/graphs", 401, nobody),
        ("get", "/api/graphs", "/api/graphs?x=1", 400, {}),
        ("get", "/api/runs", "/api/runs?limit=0", 400, {}),
        ("get", "/api/runs", "/api/runs?cursor=abc", 400, {}),
        ("get", one, "/api/runs/a%00b", 400, {}),
        ("get", one, "/api/runs/nope", 404, {}),
        ("get", f"{one}/events", f"{run}/events?after=-1", 400, {}),
        ("get", f"{one}/events", "/api/runs/nope/events", 404, {}),
        ("get", f"{one}/state", f"{run}/state?at=9999", 400, {}),
        ("get", f"{one}/verify", "/api/runs/nope/verify", 404, {}),
        ("get", f"{one}/verify", "/api/runs/a%00b/verify", 400, {}),
        ("get", f"{one}/stream", "/api/runs/nope/stream", 404, {}),
        ("get", "/api/stream", "/api/stream", 401, nobody),
        ("get", "/api/stream", "/api/stream?after=3", 400, {}),
        ("post", "/api/runs", "/api/runs", 401, {"json": {"graph": "quick"}, **nobody}),
        ("post", "/api/runs", "/api/runs", 400, {"content": b"{no"}),
        ("post", "/api/runs", "/api/runs", 413, {"content": b" " * (MAX_BODY + 1)}),
        ("post", "/api/runs", "/api/runs", 415, {"data": {"graph": "quick"}}),
        ("post", "/api/runs", "/api/runs", 422, {"json": {"graph": 1}}),
        ("post", "/api/runs", "/api/runs", 404, {"json": {"graph": "nope"}}),
        ("post", "/api/runs", "/api/runs", 409, {"json": {"graph": "quick", "run_id": taken}}),
        ("post", f"{one}/approve", f"{run}/approve", 422, {}),
        ("post", f"{one}/approve", "/api/runs/nope/approve", 404, {"json": {"by": "a"}}),
        ("post", f"{one}/approve", f"{run}/approve", 409, {"json": {**by, "expected_seq": 1}}),
        ("post", f"{one}/resume", f"{run}/resume", 409, {}),
        ("post", f"{one}/pause", f"{run}/pause", 409, {}),
        ("post", f"{one}/fork", f"{run}/fork", 422, {"json": {"at_seq": 0}}),
        ("post", f"{one}/fork", f"{run}/fork", 409, {"json": {"at_seq": 9999}}),
        ("post", f"{one}/reject", f"{run}/reject?by=a", 400, {"json": {"by": "a"}}),
        ("post", f"{one}/replay", f"{run}/replay", 404, {"json": {"graph": "x"}}),
    ]  # fmt: skip


async def test_every_refusal_is_declared_and_has_the_one_error_shape(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    async with Runtime(path, provider=draft_script(), functions=FUNCTIONS) as rt:
        app = create_app(
            rt, graphs=[QUICK], token=TOKEN, read_token=True, allowed_hosts=["127.0.0.1"]
        )
        async with (
            live_server(app) as url,
            httpx.AsyncClient(base_url=url, timeout=30) as client,
            httpx.AsyncClient(base_url=url, timeout=30, headers=AUTH) as reader,
        ):
            document = (await client.get("/openapi.json", headers=AUTH)).json()
            started = await client.post("/api/runs", json={"graph": "quick"}, headers=AUTH)
            run_id = started.json()["run_id"]
            seen = (await Served(url, rt, reader).wait_status(run_id, "paused"))["summary"]
            run = f"/api/runs/{run_id}"
            for method, operation, target, status, kwargs in _probes(run_id):
                answer = await client.request(method.upper(), target, **{"headers": AUTH, **kwargs})
                assert answer.status_code == status, (method, target, answer.text)
                declared = document["paths"][operation][method]["responses"]
                assert str(status) in declared, (method, operation, status)
                _check_error(answer)
            # Refused by the guard before the app: the same shape, and declared.
            refused = await client.get("/api/graphs", headers={**AUTH, "Host": "evil.test"})
            assert refused.status_code == 400, refused.text
            assert "400" in document["paths"]["/api/graphs"]["get"]["responses"]
            _check_error(refused)
            # Refused by routing: no such path, a method the path does not take.
            for answer in (
                await client.get("/api/nothing", headers=AUTH),
                await client.delete(run, headers=AUTH),
            ):
                assert answer.status_code in (404, 405)
                _check_error(answer)
            # Nothing any of it was recorded.
            after = (await client.get(f"/api/runs/{run_id}", headers=AUTH)).json()["summary"]
            assert (after["status"], after["last_seq"]) == ("paused", seen["last_seq"])
            listed = (await client.get("/api/runs", headers=AUTH)).json()["runs"]
            assert [r["run_id"] for r in listed] == [run_id]


async def test_a_body_with_required_fields_is_declared_required(tmp_path: Path) -> None:
    """An approval, a rejection or a fork sent without a body is refused (422: ``by`` or
    ``at_seq`` is missing): the schema must not offer the body as optional."""
    async with served(tmp_path / "runs.db") as s:
        document = (await s.client.get("/openapi.json")).json()
        schemas = document["components"]["schemas"]
        checked = []
        for path, operations in document["paths"].items():
            for method, operation in operations.items():
                body = operation.get("requestBody")
                if body is None:
                    continue
                name = body["content"]["application/json"]["schema"]["$ref"].rpartition("/")[2]
                required = bool(schemas[name].get("required"))
                assert body["required"] is required, (method, path, name)
                checked.append((path, required))
        assert ("/api/runs/{run_id}/approve", True) in checked
        assert ("/api/runs/{run_id}/resume", False) in checked


class _Failing:
    """A store whose run listing fails in a way no handler expects (a bug, say)."""

    def __init__(self, inner: EventStore) -> None:
        self._inner = inner

    async def query_runs(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("an unexpected failure")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


async def test_an_unexpected_failure_is_answered_in_the_error_shape(tmp_path: Path) -> None:
    async with SqliteEventStore(tmp_path / "runs.db") as inner:
        async with served(cast(EventStore, _Failing(inner))) as s:
            answer = await s.client.get("/api/runs")
            assert answer.status_code == 500
            _check_error(answer)
            assert answer.json()["error"] == "internal"
            assert "an unexpected failure" not in answer.text  # the log has it, not clients
            assert (await s.client.get("/api/graphs")).status_code == 200
