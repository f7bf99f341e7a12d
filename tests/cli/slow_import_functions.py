"""A module whose import blocks its importer (test_cli_worker_stalled_exit.py).

Imported by a worker when it first resumes a run whose graph names ``late``: the import
creates the file named by ``MAGISTRATE_TEST_IMPORTING`` (if set), then blocks the
worker's event loop until the file named by ``MAGISTRATE_TEST_IMPORTED`` exists (at most a
minute), so that a test can signal the worker while it is between two runs of a batch it
claimed.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

_importing = os.environ.get("MAGISTRATE_TEST_IMPORTING")
_imported = os.environ.get("MAGISTRATE_TEST_IMPORTED")
if _importing and _imported:
    Path(_importing).touch()
    _until = time.monotonic() + 60
    while not Path(_imported).exists() and time.monotonic() < _until:
        time.sleep(0.02)


async def late(inputs: dict[str, Any]) -> dict[str, Any]:
    return {"late": True}
