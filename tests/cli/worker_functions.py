"""Functions for the worker command's test (imported by the worker process)."""

from __future__ import annotations

from typing import Any

import anyio


async def double(inputs: dict[str, Any]) -> dict[str, Any]:
    return {"x": int(inputs["x"]) * 2}


async def explode(inputs: dict[str, Any]) -> dict[str, Any]:
    raise RuntimeError("the ledger is on fire")


async def step(inputs: dict[str, Any]) -> dict[str, Any]:
    await anyio.sleep(0.05)
    return {"x": int(inputs["x"]) + 1}
