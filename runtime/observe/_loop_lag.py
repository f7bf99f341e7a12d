"""How late the event loop wakes up: the lag operators see when something blocks it.

Every run of a runtime shares one event loop. Code that keeps the loop from running (a
blocking call in an ``async def`` node, or a C extension call that holds the GIL, which
stops every thread of the process) delays every run and every timer at once. A task asks
the loop to wake it every :data:`INTERVAL` seconds and measures how much later it woke;
the gauge holds the largest lag of the last :data:`WINDOW` seconds, so a scrape that
comes after a stall still sees it.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Final

from prometheus_client import Gauge

__all__ = ["INTERVAL", "WINDOW", "watch_loop_lag"]

#: How often the loop is asked to wake the watcher, in seconds.
INTERVAL: Final = 0.25
#: The window, in seconds, whose largest lag the gauge holds.
WINDOW: Final = 15.0


async def watch_loop_lag(gauge: Gauge) -> None:
    """Set ``gauge`` to the loop's largest wake-up lag of the last WINDOW seconds, for
    as long as the task runs (cancel it to stop)."""
    loop = asyncio.get_running_loop()
    recent: deque[tuple[float, float]] = deque()
    while True:
        before = loop.time()
        await asyncio.sleep(INTERVAL)
        now = loop.time()
        recent.append((now, max(0.0, now - before - INTERVAL)))
        while recent[0][0] < now - WINDOW:
            recent.popleft()
        gauge.set(max(lag for _, lag in recent))
