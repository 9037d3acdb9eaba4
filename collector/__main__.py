"""``python -m ldpkit.collector``: the ``ldpkit`` command."""

import sys

from .cli import main

sys.exit(main())
