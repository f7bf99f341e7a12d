from __future__ import annotations

import pytest


@pytest.fixture
def anyio_backend() -> str:
    # aiosqlite needs asyncio.
    return "asyncio"
