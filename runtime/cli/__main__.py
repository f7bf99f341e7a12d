"""``python -m runtime.cli``: the ``magistrate`` command."""

import sys

from ._app import main

sys.exit(main())
