"""Runs log under ``magistrate.*`` with run and node ids as ``extra``, and print nothing."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap

import pytest

from runtime import Runtime

from .test_metrics import FAILING, FUNCTIONS, TRIAGE, _provider

pytestmark = pytest.mark.anyio


async def test_run_lifecycle_is_info_and_verdicts_and_retries_are_debug(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="magistrate")
    async with Runtime(None, functions=FUNCTIONS, provider=_provider()) as rt:
        paused = await (await rt.start(TRIAGE, input={"text": "x"})).result()
        approved = await rt.approve(paused.run_id, by="ops", input={"approved_by": "ops"})
        assert approved is not None
        await approved.result()
        failed = await (await rt.start(FAILING)).result()
    runs = [r for r in caplog.records if r.name == "magistrate.runs"]
    info = [(r.getMessage(), getattr(r, "run_id", None)) for r in runs if r.levelno == logging.INFO]
    run = paused.run_id
    assert (f"run {run} started: graph triage", run) in info
    assert (f"run {run} paused (hitl) before act", run) in info
    assert (f"run {run}: approved by ops at gate act", run) in info
    assert (f"run {run} resumed", run) in info
    assert (f"run {run} finished: completed, quality clean", run) in info
    assert (f"run {failed.run_id} finished: failed, quality failed", failed.run_id) in info
    retry = [r for r in runs if r.levelno == logging.DEBUG]
    assert [r.getMessage() for r in retry] == [
        f"run {failed.run_id}: node boom failed (attempt 1), will retry: the ledger is on fire"
    ]
    assert retry[0].node_id == "boom"  # type: ignore[attr-defined]
    verdicts = [r for r in caplog.records if r.name == "magistrate.judge"]
    assert all(r.levelno == logging.DEBUG for r in verdicts)
    quality = [r for r in verdicts if r.level == "quality"]  # type: ignore[attr-defined]
    assert [r.verdict for r in quality] == ["retry", "accept"]  # type: ignore[attr-defined]
    assert quality[0].node_id == "classify" and quality[0].run_id == run  # type: ignore[attr-defined]
    assert quality[0].getMessage().endswith("RETRY [quality]: billing or technical")


def test_the_library_prints_nothing() -> None:
    # A process that configures no logging: Python's last-resort handler would print
    # WARNING and above to stderr; a run's records stay below it, and nothing else prints.
    code = textwrap.dedent(
        """
        import anyio
        from runtime import Runtime
        from runtime.testing import linear_graph

        def step(inputs):
            return {"x": 1}

        def boom(inputs):
            raise RuntimeError("no")

        async def main():
            async with Runtime(None, functions={"step": step, "boom": boom}) as rt:
                await (await rt.start(linear_graph(["step"]))).result()
                await (await rt.start(linear_graph(["boom"]))).result()

        anyio.run(main)
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "" and done.stderr == ""
