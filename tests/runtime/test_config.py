"""The Runtime's configuration objects: their defaults, their checks, and that a runtime
acts on what they say (a worker id that names the claims, a lease that expires, a
recovery interval that picks runs up)."""

from __future__ import annotations

import math
import re
from pathlib import Path

import anyio
import msgspec
import pytest

from runtime import OwnershipConfig, RecoveryConfig, Runtime, TimeoutConfig
from runtime.testing import linear_graph
from tests.pgsupport import wait_until

pytestmark = pytest.mark.anyio


def test_the_defaults_are_the_documented_ones() -> None:
    assert TimeoutConfig() == TimeoutConfig(node=600.0, tool=120.0, judge=300.0)
    assert OwnershipConfig() == OwnershipConfig(
        worker_id=None, lease_seconds=15.0, control_interval=0.25
    )
    assert RecoveryConfig() == RecoveryConfig(interval=None, concurrency=100)


def test_configs_are_frozen() -> None:
    with pytest.raises(AttributeError):
        TimeoutConfig().node = 1.0  # type: ignore[misc]
    with pytest.raises(AttributeError):
        OwnershipConfig().lease_seconds = 1.0  # type: ignore[misc]


@pytest.mark.parametrize(
    "make",
    [
        lambda: OwnershipConfig(lease_seconds=0),
        lambda: OwnershipConfig(control_interval=-1.0),
        lambda: RecoveryConfig(concurrency=0),
        lambda: RecoveryConfig(interval=0),
        # NaN compares false to everything; an infinite lease never runs out.
        lambda: OwnershipConfig(lease_seconds=math.nan),
        lambda: OwnershipConfig(lease_seconds=math.inf),
        lambda: OwnershipConfig(control_interval=math.nan),
        lambda: RecoveryConfig(interval=math.inf),
    ],
)
def test_settings_that_cannot_work_are_refused_when_made(make: object) -> None:
    with pytest.raises(ValueError):
        make()  # type: ignore[operator]


def test_configs_convert_from_plain_data() -> None:
    # As an application reads them from its own settings file.
    timeouts = msgspec.convert({"node": None, "tool": 5}, TimeoutConfig)
    assert timeouts == TimeoutConfig(node=None, tool=5.0)


async def test_the_worker_id_names_the_claims(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    async with Runtime(path) as default:
        assert re.fullmatch(r".+:\d+:[0-9a-f]{6}", default.worker_id)
    release = anyio.Event()

    async def hold(inputs: dict[str, object]) -> dict[str, object]:
        await release.wait()
        return {}

    async with Runtime(
        path, functions={"hold": hold}, ownership=OwnershipConfig(worker_id="w-1")
    ) as rt:
        handle = await rt.start(linear_graph(["hold"]))
        assert rt.store is not None
        (info,) = await rt.store.list_runs()
        assert info.owner == "w-1"
        release.set()
        assert (await handle.result()).status == "completed"


async def test_a_runtime_with_recovery_runs_what_is_submitted(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    functions = {"step": lambda inputs: {"step": True}}
    async with Runtime(path, functions=functions) as submitter:
        run_id = await submitter.submit(linear_graph(["step"]))
    async with Runtime(
        path,
        functions=functions,
        ownership=OwnershipConfig(worker_id="w-2", lease_seconds=2.0),
        recovery=RecoveryConfig(interval=0.05, concurrency=1),
    ) as worker:

        async def finished() -> bool:
            return (await worker.get_state(run_id)).status != "running"

        await wait_until(finished, 30)
        result = await worker.result(run_id)
    assert result.status == "completed" and result.memory == {"step": True}
