"""The event stores' writer counters as Prometheus metrics, read at scrape time.

A :class:`StoreCollector` sums ``store.statistics()`` over the stores a
:class:`~runtime.observe._metrics.RuntimeMetrics` watches: appends, events, group commits
and their sizes, commit time, conflicts, queued appends.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator, Sequence
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from eventstore import EventStore, StoreStatistics

__all__ = ["StoreCollector", "batch_sizes"]


class StoreCollector(Collector):
    """The stores' writer counters, summed over the stores this metrics object watches."""

    def __init__(self, stores: weakref.WeakSet[EventStore]) -> None:
        self._stores = stores  # the metrics object's set: stores it watches later count too

    def collect(self) -> Iterator[Any]:
        stats = [store.statistics() for store in list(self._stores)]
        counters = [
            ("magistrate_eventstore_appends", "Append requests committed", "appends"),
            ("magistrate_eventstore_events", "Events committed", "events"),
            (
                "magistrate_eventstore_batches",
                "Group commits (transactions); appends_total / batches_total is the mean "
                "batch size",
                "batches",
            ),
            (
                "magistrate_eventstore_conflicts",
                "Appends refused by the (run, seq) fence",
                "conflicts",
            ),
        ]
        for name, doc, field in counters:
            yield CounterMetricFamily(name, doc, value=sum(getattr(s, field) for s in stats))
        yield CounterMetricFamily(
            "magistrate_eventstore_commit_seconds",
            "Time spent committing group commits",
            value=sum(s.commit_seconds_total for s in stats),
        )
        yield batch_sizes(stats)
        yield GaugeMetricFamily(
            "magistrate_eventstore_batch_size_max",
            "The largest group commit so far (appends in one transaction)",
            value=max((s.max_batch_size for s in stats), default=0),
        )
        yield GaugeMetricFamily(
            "magistrate_eventstore_queued_appends",
            "Appends waiting for the writer",
            value=sum(s.queued for s in stats),
        )

    def describe(self) -> Iterator[Any]:
        # Registering must not call collect() (no store is watched yet).
        return iter(())


def batch_sizes(stats: Sequence[StoreStatistics]) -> HistogramMetricFamily:
    """The group commits' sizes as a histogram, summed over the stores' bucket counts."""
    bounds = StoreStatistics.BATCH_SIZE_BOUNDS
    counts = [0] * (len(bounds) + 1)
    for stat in stats:
        for index, count in enumerate(stat.batch_size_counts):
            counts[index] += count
    buckets: list[tuple[str, float]] = []
    total = 0
    for bound, count in zip((*map(str, bounds), "+Inf"), counts, strict=True):
        total += count
        buckets.append((bound, total))
    return HistogramMetricFamily(
        "magistrate_eventstore_batch_size",
        "Group commits by size (appends in one transaction)",
        buckets=buckets,
        sum_value=sum(stat.appends for stat in stats if stat.batch_size_counts),
    )
