"""``python -m ldpkit.cli``: the ``ldpkit`` command."""

import sys

from . import main

sys.exit(main())
