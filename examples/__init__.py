"""Runnable example graphs. Each runs offline by default: ``python -m examples.<name>``."""
