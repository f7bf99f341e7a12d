"""The domain: graph specs, the executor, nodes, judges, LLM providers and interfaces."""

__all__: list[str] = []
