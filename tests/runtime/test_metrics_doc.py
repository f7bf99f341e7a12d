"""docs/metrics.md is the contract: every metric the runtime registers is in its table with
its name, type and labels, and nothing else is; the ``graph`` label goes where it says."""

from __future__ import annotations

import re
from pathlib import Path

from prometheus_client import CollectorRegistry
from prometheus_client.metrics import MetricWrapperBase

from runtime import RuntimeMetrics

DOC = (Path(__file__).resolve().parents[2] / "docs" / "metrics.md").read_text()


def _documented() -> dict[str, tuple[str, frozenset[str]]]:
    """The table's rows: name -> (type, label names)."""
    rows = {}
    for line in DOC.splitlines():
        if line.startswith("| `magistrate_"):
            name, kind, labels = (cell.strip() for cell in line.split("|")[1:4])
            label_names = frozenset(re.findall(r"`([a-z_]+)`", labels))
            rows[name.strip("`")] = (kind, label_names)
    return rows


def _registered(per_graph: bool) -> dict[str, tuple[str, frozenset[str]]]:
    """What a RuntimeMetrics registers: name as scraped -> (type, label names)."""
    registry = CollectorRegistry()
    metrics = RuntimeMetrics(registry, per_graph=per_graph)
    labels = {
        metric._name: frozenset(metric._labelnames)
        for metric in vars(metrics).values()
        if isinstance(metric, MetricWrapperBase)
    }
    found = {}
    for family in registry.collect():
        name = family.name + ("_total" if family.type == "counter" else "")
        found[name] = (family.type, labels.get(family.name, frozenset()))
    return found


def test_every_registered_metric_is_documented_with_its_type_and_labels() -> None:
    documented = _documented()
    registered = _registered(per_graph=False)
    assert len(documented) >= 25
    assert set(registered) == set(documented), set(registered) ^ set(documented)
    for name, (kind, labels) in registered.items():
        assert documented[name] == (kind, labels), name


def test_the_graph_label_is_on_the_metrics_the_doc_names() -> None:
    paragraph = DOC[DOC.index("`RuntimeMetrics(per_graph=True)`") :].split("\n\n")[0]
    named = set(re.findall(r"`(magistrate_[a-z_]+)`", paragraph))
    plain, per_graph = _registered(per_graph=False), _registered(per_graph=True)
    with_graph = {name for name, (_kind, labels) in per_graph.items() if "graph" in labels}
    assert with_graph == named
    for name in with_graph:
        assert per_graph[name][1] == plain[name][1] | {"graph"}
