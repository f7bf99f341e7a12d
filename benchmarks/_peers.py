"""Peer frameworks for comparisons, each in its own virtual environment.

Peers are never project dependencies: the benchmark creates
``benchmarks/peers/<name>-venv`` (git-ignored) with ``python -m venv`` the first time it
needs one and pip-installs pinned versions into it. A marker file records what was
installed, so later runs reuse the environment and a changed pin reinstalls. When the
package index is unreachable the peer is "unavailable": callers print their own figures
and say so instead of failing.

The peer side of a workload is a standalone script run with the peer's interpreter
(``_langgraph_peer.py``, ``_dbos_executor_peer.py``); it speaks JSON lines over
stdin/stdout (see ``PeerProcess`` and ``_peer_protocol``). ``PeerSession`` is the
benchmark's handle on one such process, or on the reason there is none.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

__all__ = [
    "DBOS_REQUIREMENTS",
    "LANGGRAPH_REQUIREMENTS",
    "PEERS_DIR",
    "PeerError",
    "PeerProcess",
    "PeerSession",
    "ensure_dbos",
    "ensure_langgraph",
    "ensure_venv",
]

PEERS_DIR = Path(__file__).resolve().parent / "peers"

#: Pinned so that figures from different days compare the same peer.
LANGGRAPH_REQUIREMENTS: tuple[str, ...] = (
    "langgraph==1.2.22",
    "langgraph-checkpoint-sqlite==3.1.2",
    "aiosqlite==0.22.1",
)
DBOS_REQUIREMENTS: tuple[str, ...] = ("dbos==3.4.0",)

_MARKER = "installed.json"
_INSTALL_TIMEOUT_S = 900


class PeerError(RuntimeError):
    """The peer process failed, exited or answered something that is not a result."""

    def __init__(self, peer: str, detail: str) -> None:
        self.peer = peer
        self.detail = detail
        super().__init__(f"peer {peer}: {detail}")


def _venv_python(venv: Path) -> Path:
    if os.name == "nt":  # pragma: no cover - the benchmark machines are POSIX
        return venv / "Scripts" / "python.exe"
    return venv / "bin" / "python"


def _base_python() -> str:
    # A venv made from inside another venv should hang off the real interpreter.
    return getattr(sys, "_base_executable", None) or sys.executable


def ensure_venv(name: str, requirements: tuple[str, ...]) -> Path | None:
    """Return the interpreter of peer venv ``name`` with ``requirements``, creating it if
    needed; None (after printing why) when it cannot be created or installed.

    Blocks on ``python -m venv`` and ``pip install`` (minutes, the first time only).
    """
    venv = PEERS_DIR / f"{name}-venv"
    python = _venv_python(venv)
    marker = venv / _MARKER
    wanted = sorted(requirements)
    if python.exists() and marker.exists():
        try:
            if json.loads(marker.read_text()) == wanted:
                return python
        except (OSError, ValueError):
            pass  # an unreadable marker means "reinstall", below
    PEERS_DIR.mkdir(parents=True, exist_ok=True)
    try:
        if not python.exists():
            print(f"[peers] creating {venv} (python -m venv)", flush=True)
            subprocess.run(
                [_base_python(), "-m", "venv", str(venv)], check=True, timeout=_INSTALL_TIMEOUT_S
            )
        print(
            f"[peers] installing {name} (once; may take minutes): "
            f"pip install {' '.join(requirements)} into {venv}",
            flush=True,
        )
        done = subprocess.run(
            [
                str(python),
                "-m",
                "pip",
                "install",
                "--disable-pip-version-check",
                "-q",
                *requirements,
            ],
            capture_output=True,
            text=True,
            timeout=_INSTALL_TIMEOUT_S,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        print(f"[peers] {name} unavailable: {exc}", flush=True)
        return None
    if done.returncode != 0:
        tail = " | ".join((done.stderr or done.stdout).strip().splitlines()[-2:])
        print(f"[peers] {name} unavailable: pip failed: {tail[:300]}", flush=True)
        return None
    marker.write_text(json.dumps(wanted))
    print(f"[peers] {name} ready", flush=True)
    return python


def ensure_langgraph() -> Path | None:
    """The LangGraph peer's interpreter (langgraph + the SQLite checkpointer), or None."""
    return ensure_venv("langgraph", LANGGRAPH_REQUIREMENTS)


def ensure_dbos() -> Path | None:
    """The DBOS Transact peer's interpreter, or None."""
    return ensure_venv("dbos", DBOS_REQUIREMENTS)


class PeerProcess:
    """A long-lived peer script: one JSON request per stdin line, one JSON reply per line.

    Keeping one warm process for the whole benchmark puts both sides on equal footing
    (imports and first-call costs are paid once, as they are in our own process).
    ``request`` blocks until the peer answers; a reply with an ``"error"`` key, an exit or
    a non-JSON line raises PeerError.
    """

    def __init__(self, name: str, python: Path, script: Path) -> None:
        self.name = name
        self._proc = subprocess.Popen(
            [str(python), str(script), "serve"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )

    def request(self, workload: str, **params: Any) -> dict[str, Any]:
        proc = self._proc
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write(json.dumps({"workload": workload, **params}) + "\n")
            proc.stdin.flush()
        except OSError as exc:
            raise PeerError(self.name, f"cannot send request: {exc}") from exc
        line = proc.stdout.readline()
        if not line:
            raise PeerError(self.name, f"exited with code {proc.wait()}")
        try:
            reply = json.loads(line)
        except ValueError as exc:
            raise PeerError(self.name, f"answered a non-JSON line: {line[:200]!r}") from exc
        if not isinstance(reply, dict):
            raise PeerError(self.name, f"answered {reply!r}")
        if "error" in reply:
            raise PeerError(self.name, str(reply["error"]))
        return reply

    def close(self) -> None:
        proc = self._proc
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()

    def __enter__(self) -> PeerProcess:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class PeerSession:
    """A warm peer process for a whole benchmark, or the reason it is unavailable.

    ``request`` answers None (after printing why) when there is no process or the peer
    failed on that request, so a benchmark prints its own figures and carries on.
    ``info`` is the peer's answer to the ``info`` workload (empty when unavailable).
    """

    def __init__(
        self, name: str, ensure: Callable[[], Path | None], script: Path, enabled: bool
    ) -> None:
        self.name = name
        self.process: PeerProcess | None = None
        self.info: dict[str, Any] = {}
        if not enabled:
            self.reason = "skipped"
            return
        self.reason = "not installed (see [peers] above)"
        python = ensure()
        if python is None:
            return
        self.process = PeerProcess(name, python, script)
        try:
            self.info = self.process.request("info")
        except PeerError as exc:
            print(f"[peers] {exc}", flush=True)
            self.reason = f"failed to start: {exc.detail[:80]}"
            self.close()

    @property
    def available(self) -> bool:
        return self.process is not None

    def request(self, workload: str, **params: Any) -> dict[str, Any] | None:
        if self.process is None:
            return None
        try:
            return self.process.request(workload, **params)
        except PeerError as exc:
            print(f"[peers] {workload}: {exc}", flush=True)
            return None

    def close(self) -> None:
        if self.process is not None:
            self.process.close()
            self.process = None
