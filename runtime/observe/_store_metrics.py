"""The event stores' writer counters as Prometheus metrics, read at scrape time.

A :class:`StoreCollector` sums ``store.statistics()`` over the stores a
:class:`~runtime.observe._metrics.RuntimeMetrics` watches: appends, events, group commits
and their sizes, commit time, conflicts, queued appends. A store is read while a runtime
uses it; once the last one is done with it (:meth:`StoreCollector.unwatch`), what it
counted stays in the totals, so no counter goes back when a runtime closes and its store
is let go.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from eventstore import EventStore, StoreStatistics

__all__ = ["StoreCollector", "StoreTotals", "batch_sizes"]


class StoreTotals:
    """Stores' statistics added up, or the parts of them counted since a point (``add``)."""

    __slots__ = (
        "appends",
        "batches",
        "commit_seconds",
        "conflicts",
        "events",
        "largest",
        "sized_appends",
        "sizes",
    )

    def __init__(self) -> None:
        self.appends = self.events = self.batches = self.conflicts = self.largest = 0
        self.commit_seconds = 0.0
        #: Group commits by size, and the appends they hold (of the writers that keep sizes).
        self.sizes = [0] * (len(StoreStatistics.BATCH_SIZE_BOUNDS) + 1)
        self.sized_appends = 0

    def add(self, now: StoreStatistics, since: StoreStatistics | None = None) -> None:
        """Add what a store counted since its statistics were ``since`` (None: its open)."""
        before = since or _NONE
        self.appends += now.appends - before.appends
        self.events += now.events - before.events
        self.batches += now.batches - before.batches
        self.conflicts += now.conflicts - before.conflicts
        self.commit_seconds += now.commit_seconds_total - before.commit_seconds_total
        self.largest = max(self.largest, now.max_batch_size)
        if now.batch_size_counts:
            earlier = before.batch_size_counts or (0,) * len(now.batch_size_counts)
            for index, (count, was) in enumerate(zip(now.batch_size_counts, earlier, strict=True)):
                self.sizes[index] += count - was
            self.sized_appends += now.appends - before.appends

    def copy(self) -> StoreTotals:
        other = StoreTotals()
        for name in self.__slots__:
            setattr(other, name, getattr(self, name))
        other.sizes = list(self.sizes)
        return other


_NONE = StoreStatistics(
    appends=0, events=0, batches=0, mean_batch_size=0.0, max_batch_size=0, commit_seconds_total=0.0
)


class StoreCollector(Collector):
    """The stores' writer counters: those of the stores watched now, read at each scrape,
    and what the stores no longer watched had counted while they were."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # scrapes come from another thread
        #: Each store watched, and by how many runtimes (held weakly).
        self._watchers: weakref.WeakKeyDictionary[EventStore, int] = weakref.WeakKeyDictionary()
        #: A store's statistics when it was last let go: what of it ``_kept`` holds already.
        self._counted: weakref.WeakKeyDictionary[EventStore, StoreStatistics] = (
            weakref.WeakKeyDictionary()
        )
        self._kept = StoreTotals()

    def watch(self, store: EventStore) -> None:
        """Read ``store`` at each scrape, until as many :meth:`unwatch` calls as these."""
        with self._lock:
            self._watchers[store] = self._watchers.get(store, 0) + 1

    def unwatch(self, store: EventStore) -> None:
        """One runtime is done with ``store``: the last one's call keeps what it counted."""
        with self._lock:
            watchers = self._watchers.get(store)
            if watchers is None:
                return
            if watchers > 1:
                self._watchers[store] = watchers - 1
                return
            del self._watchers[store]
            now = store.statistics()
            self._kept.add(now, self._counted.get(store))
            self._counted[store] = now

    def collect(self) -> Iterator[Any]:
        with self._lock:
            totals = self._kept.copy()
            queued = 0
            for store in list(self._watchers):
                now = store.statistics()
                totals.add(now, self._counted.get(store))
                queued += now.queued
        counters = [
            ("magistrate_eventstore_appends", "Append requests committed", totals.appends),
            ("magistrate_eventstore_events", "Events committed", totals.events),
            (
                "magistrate_eventstore_batches",
                "Group commits (transactions); appends_total / batches_total is the mean "
                "batch size",
                totals.batches,
            ),
            (
                "magistrate_eventstore_conflicts",
                "Appends refused by the (run, seq) fence",
                totals.conflicts,
            ),
            (
                "magistrate_eventstore_commit_seconds",
                "Time spent committing group commits",
                totals.commit_seconds,
            ),
        ]
        for name, doc, value in counters:
            yield CounterMetricFamily(name, doc, value=value)
        yield batch_sizes(totals)
        yield GaugeMetricFamily(
            "magistrate_eventstore_batch_size_max",
            "The largest group commit so far (appends in one transaction)",
            value=totals.largest,
        )
        yield GaugeMetricFamily(
            "magistrate_eventstore_queued_appends", "Appends waiting for the writer", value=queued
        )

    def describe(self) -> Iterator[Any]:
        # Registering must not call collect() (no store is watched yet).
        return iter(())


def batch_sizes(totals: StoreTotals) -> HistogramMetricFamily:
    """The group commits' sizes as a histogram."""
    buckets: list[tuple[str, float]] = []
    total = 0
    bounds = (*map(str, StoreStatistics.BATCH_SIZE_BOUNDS), "+Inf")
    for bound, count in zip(bounds, totals.sizes, strict=True):
        total += count
        buckets.append((bound, total))
    return HistogramMetricFamily(
        "magistrate_eventstore_batch_size",
        "Group commits by size (appends in one transaction)",
        buckets=buckets,
        sum_value=totals.sized_appends,
    )
