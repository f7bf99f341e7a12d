"""A run's claim given up with its final append asks the store only where it can."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from eventstore import Claim, ClaimingStore
from runtime.control._ownership import RunOwnership


class _OlderStore:
    """A store of one's own whose submit_release predates ``with_append``."""

    def __init__(self) -> None:
        self.released: list[Claim] = []

    def submit_release(
        self, claim: Claim, on_done: Callable[[None, BaseException | None], None]
    ) -> bool:
        self.released.append(claim)
        return False


class _Store(_OlderStore):
    def submit_release(  # type: ignore[override]
        self,
        claim: Claim,
        on_done: Callable[[None, BaseException | None], None],
        *,
        with_append: int | None = None,
    ) -> bool:
        self.released.append(claim)
        on_done(None, None)  # as a store whose append committed the release
        return True


def _ownership(store: Any) -> RunOwnership:
    ownership = RunOwnership(
        cast(ClaimingStore, store), "me", lease=30, control_interval=1, recover_interval=1
    )
    ownership.claims["r1"] = Claim("r1", "me", 3, 0.0)
    ownership.confirmed["r1"] = 0.0
    return ownership


def test_a_store_whose_release_predates_with_append_is_not_asked() -> None:
    store = _OlderStore()
    ownership = _ownership(store)
    ownership.release_with_append("r1", 7)
    assert store.released == [] and "r1" in ownership.claims  # released at its end instead


def test_a_claim_given_up_with_the_final_append_is_no_longer_held() -> None:
    store = _Store()
    ownership = _ownership(store)
    ownership.release_with_append("r1", 7)
    assert store.released == [Claim("r1", "me", 3, 0.0)]
    assert "r1" not in ownership.claims and not ownership.holds("r1")
