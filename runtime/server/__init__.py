"""The HTTP server: a JSON API, live event streams and a web dashboard over one runtime.

``create_app(runtime, graphs=..., token=...)`` is an ASGI (Starlette) app to mount in a
host's own app; :func:`serve` runs it on uvicorn, as ``magistrate serve`` does.
"""

from ._app import create_app
from ._limits import ServerLimits
from ._serve import serve

__all__ = ["ServerLimits", "create_app", "serve"]
