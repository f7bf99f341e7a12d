"""The package's curated surface."""

from __future__ import annotations

import eventstore


def test_all_lists_exactly_the_public_names() -> None:
    public = {
        name
        for name, value in vars(eventstore).items()
        if not name.startswith("_") and not isinstance(value, type(eventstore))
    }
    assert set(eventstore.__all__) == public
    assert all(not name.startswith("_") for name in eventstore.__all__)
    for name in eventstore.__all__:
        assert getattr(eventstore, name) is not None


def test_errors_hang_from_the_magistrate_root() -> None:
    from actors import MagistrateError

    for name in (
        "StoreError",
        "ConcurrencyError",
        "CorruptLogError",
        "NotAStoreError",
        "SchemaVersionError",
        "StoreClosedError",
        "UnknownEventError",
    ):
        cls = getattr(eventstore, name)
        assert issubclass(cls, eventstore.StoreError)
        assert issubclass(cls, MagistrateError)
