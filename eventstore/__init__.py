"""The event log: event types, stores, projections, replay and audit."""

__all__: list[str] = []
