"""Request bodies the HTTP API reads as their schema says: a ``\\u`` escape naming a lone
surrogate is refused as text no UTF-8 body holds (not "truncated"), and a field the
OpenAPI description types ``integer`` takes an integral number written ``1.0`` (JSON
Schema's integer), not ``1.5`` or ``"1"``; the input's own numbers stay as written."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from runtime import Runtime
from runtime.server import create_app

from .server.support import AUTH, TOKEN, live_server
from .test_heads_file import GRAPH, step

pytestmark = pytest.mark.anyio

JSON = {**AUTH, "Content-Type": "application/json"}


async def test_bodies_are_read_as_their_schema_says(tmp_path: Path) -> None:
    async with Runtime(tmp_path / "runs.db", functions={"step": step}) as rt:
        handle = await rt.start(GRAPH, input={"amount": 100})
        assert (await handle.result()).status == "paused"
        run_id = handle.run_id
        now = (await rt.get_state(run_id)).last_seq
        app = create_app(rt, token=TOKEN)
        async with live_server(app) as url, httpx.AsyncClient(base_url=url, timeout=30) as c:
            fork = f"/api/runs/{run_id}/fork"
            for body in (b'{"at_seq": "\\ud800"}', b'{"at_seq": 1, "input": {"k": "a\\udc00"}}'):
                lone = await c.post(fork, content=body, headers=JSON)
                assert lone.status_code == 400, lone.text
                assert lone.json() == {
                    "error": "invalid_json",
                    "detail": "request body is not valid UTF-8 JSON text: a \\u escape in it "
                    "names a lone surrogate (half of a UTF-16 pair), which no UTF-8 text holds",
                }
            cut = await c.post(fork, content=b'{"at_seq": 1', headers=JSON)
            assert cut.status_code == 400 and "truncated" in cut.json()["detail"]
            # Past a field refused as typed, the rest of the body is still read.
            for body in (b'{"at_seq": 1.0, "input": {"k": "\\ud800"}}', b'{"at_seq": 1.5, "x": {'):
                malformed = await c.post(fork, content=body, headers=JSON)
                assert malformed.status_code == 400, malformed.text
                assert malformed.json()["error"] == "invalid_json"
            huge = await c.post(fork, content=b'{"at_seq": 1e400}', headers=JSON)
            assert huge.status_code == 422, huge.text
            assert huge.json()["detail"] == "Number out of range - at `$.at_seq`"
            paired = await c.post(
                fork,
                content=b'{"at_seq": 1.0, "input": {"k": "\\ud83d\\ude00", "f": 2.0}}',
                headers=JSON,
            )
            assert paired.status_code == 201, paired.text
            forked = await rt.get_state(paired.json()["run_id"])
            assert forked.forked_from is not None and forked.forked_from.seq == 1
            assert forked.memory["k"] == "\U0001f600"
            assert type(forked.memory["f"]) is float  # input is not the schema's integer
            for at_seq in ("1.5", '"1"', "1e300", "0.0"):
                refused = await c.post(fork, content=f'{{"at_seq": {at_seq}}}', headers=JSON)
                assert refused.status_code == 422, (at_seq, refused.text)
                assert "at_seq" in refused.json()["detail"]
            approved = await c.post(
                f"/api/runs/{run_id}/approve",
                content=f'{{"by": "ann", "expected_seq": {now}.0}}',
                headers=JSON,
            )
            assert approved.status_code == 202, approved.text
        assert (await rt.get_state(run_id)).last_seq > now
