"""Watching runs: Prometheus metrics and standard logging, derived from committed events.

The metrics names are imported on first use, so that ``import runtime`` (which imports
the logging half) does not load prometheus_client.
"""

import typing as _typing

if _typing.TYPE_CHECKING:
    from ._metrics import MetricsServer, RuntimeMetrics, default_metrics, serve_metrics

__all__ = ["MetricsServer", "RuntimeMetrics", "default_metrics", "serve_metrics"]


def __getattr__(name: str) -> _typing.Any:
    """The metrics names, imported on first use."""
    if name in __all__:
        from . import _metrics

        return getattr(_metrics, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
