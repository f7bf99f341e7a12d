"""The benchmarks' peer plumbing: the JSON-lines wire and a peer that is not there.

A real peer (LangGraph, DBOS) needs its own venv and the network, so a small peer script
built on the same ``_peer_protocol`` stands in for it; nothing here is timed.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from benchmarks._peer_protocol import payload
from benchmarks._peers import PeerError, PeerProcess, PeerSession

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"

SCRIPT = """
import sys
sys.path.insert(0, {benchmarks!r})
from _peer_protocol import payload, serve_main

def handle(request):
    name = request.pop("workload", None)
    if name == "info":
        return {{"versions": {{"fake": "1"}}}}
    if name == "payload":
        print("noise a library prints")  # must not reach the benchmark as a reply
        return {{"text": payload(request["step"], request["size"])}}
    return {{"error": f"unknown workload {{name!r}}"}}

sys.exit(serve_main(sys.argv[1:], None, handle))
"""


@pytest.fixture
def fake_peer(tmp_path: Path) -> Path:
    script = tmp_path / "fake_peer.py"
    script.write_text(SCRIPT.format(benchmarks=str(BENCHMARKS)))
    return script


def test_payload_is_deterministic_ascii_of_the_asked_size() -> None:
    text = payload(7, 2048)
    assert len(text) == 2048
    assert text.isascii()
    assert text == payload(7, 2048)
    assert text != payload(8, 2048)


def test_a_peer_answers_over_json_lines_and_its_prints_do_not_break_the_wire(
    fake_peer: Path,
) -> None:
    with PeerProcess("fake", Path(sys.executable), fake_peer) as peer:
        assert peer.request("info") == {"versions": {"fake": "1"}}
        # The same bytes on both sides of the wire: the size figure compares like with like.
        assert peer.request("payload", step=3, size=100) == {"text": payload(3, 100)}
        with pytest.raises(PeerError, match="unknown workload 'nope'"):
            peer.request("nope")
        assert peer.request("info") == {"versions": {"fake": "1"}}


def test_a_session_reports_a_failed_request_and_carries_on(
    fake_peer: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    session = PeerSession("fake", lambda: Path(sys.executable), fake_peer, enabled=True)
    try:
        assert session.available
        assert session.info == {"versions": {"fake": "1"}}
        assert session.request("nope") is None
        assert "unknown workload 'nope'" in capsys.readouterr().out
        assert session.request("payload", step=1, size=10) == {"text": payload(1, 10)}
    finally:
        session.close()
    assert not session.available


def test_a_peer_that_cannot_be_installed_is_unavailable_with_a_reason(fake_peer: Path) -> None:
    session = PeerSession("fake", lambda: None, fake_peer, enabled=True)
    assert not session.available
    assert "not installed" in session.reason
    assert session.request("info") is None


def test_a_peer_that_exits_at_start_is_unavailable_with_a_reason(tmp_path: Path) -> None:
    broken = tmp_path / "broken.py"
    broken.write_text("import sys\nsys.exit(3)\n")
    session = PeerSession("broken", lambda: Path(sys.executable), broken, enabled=True)
    assert not session.available
    assert "exited with code 3" in session.reason
    assert session.request("info") is None


def test_a_skipped_peer_is_not_started() -> None:
    def never() -> Path:
        raise AssertionError("a skipped peer must not be installed")

    session = PeerSession("skipped", never, BENCHMARKS / "missing.py", enabled=False)
    assert not session.available
    assert session.reason == "skipped"
