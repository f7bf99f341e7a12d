"""A Runtime inside an anyio cancel scope that is cancelled (``move_on_after`` in an app, a
worker cancelled by its caller): the scope absorbs the cancellation, with metrics on (the
loop-lag watcher is one more task the close waits for) or off."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from prometheus_client import CollectorRegistry

from runtime import Runtime, RuntimeMetrics

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("metrics", [True, False])
async def test_a_cancelled_scope_around_a_runtime_absorbs_the_cancellation(
    tmp_path: Path, metrics: bool
) -> None:
    kept = {"metrics": RuntimeMetrics(CollectorRegistry())} if metrics else {}
    with anyio.move_on_after(0.3) as scope:
        async with Runtime(tmp_path / "runs.db", **kept):  # type: ignore[arg-type]
            await anyio.sleep_forever()
    assert scope.cancelled_caught
