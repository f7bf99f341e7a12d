"""A node function for worker tests (imported by the worker processes).

``hold`` creates the file named by ``MAGISTRATE_TEST_HOLDING`` (if set), then waits a
minute: the run it belongs to stays live on whichever worker runs it.
"""

from __future__ import annotations

import os
from typing import Any

import anyio


async def hold(inputs: dict[str, Any]) -> dict[str, Any]:
    holding = os.environ.get("MAGISTRATE_TEST_HOLDING")
    if holding:
        await anyio.Path(holding).touch()
    await anyio.sleep(60)
    return {"held": True}
