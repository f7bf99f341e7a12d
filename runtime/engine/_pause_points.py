"""Where a run pauses: the nodes held at a pause point until nothing else runs."""

from __future__ import annotations

from ..events._catalogue import PauseReason

__all__ = ["PausePoints"]


class PausePoints:
    """The nodes of one run held before they start (a pause node, a pause asked for, a
    node waiting for input), and those a resume lets through without pausing again."""

    __slots__ = ("held", "passed", "pause_nodes", "requested")

    def __init__(self, pause_nodes: frozenset[str]) -> None:
        self.pause_nodes = pause_nodes
        #: (node, branch, why), the first being the pause's resume point.
        self.held: list[tuple[str, str | None, PauseReason]] = []
        self.passed: set[str] = set()
        self.requested = False

    def hold(self, node_id: str, branch: str | None, attempt: int) -> bool:
        """Whether ``node_id``'s attempt is held instead of starting."""
        if attempt == 1 and node_id not in self.passed:
            if self.requested:
                self.held.append((node_id, branch, "user"))
            elif node_id in self.pause_nodes:
                self.held.append((node_id, branch, "hitl"))
            if self.held and self.held[-1][0] == node_id:
                return True
        self.passed.discard(node_id)
        return False

    def wait_for_input(self, node_id: str, branch: str | None) -> None:
        """``node_id`` stopped to wait for input: the pause resumes it (it runs again)."""
        self.held.insert(0, (node_id, branch, "input"))
