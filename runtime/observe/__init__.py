"""Watching runs: Prometheus metrics and standard logging, derived from committed events.

The metrics names are imported on first use, so that ``import runtime`` (which imports
the logging half) does not load prometheus_client.
"""

import importlib as _importlib
import typing as _typing

if _typing.TYPE_CHECKING:
    from ._metrics import RuntimeMetrics, default_metrics
    from ._metrics_server import MetricsServer, serve_metrics

__all__ = ["MetricsServer", "RuntimeMetrics", "default_metrics", "serve_metrics"]

#: The module of each metrics name.
_LAZY = {
    "MetricsServer": "._metrics_server",
    "RuntimeMetrics": "._metrics",
    "default_metrics": "._metrics",
    "serve_metrics": "._metrics_server",
}


def __getattr__(name: str) -> _typing.Any:
    """The metrics names, imported on first use."""
    if name in _LAZY:
        return getattr(_importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
