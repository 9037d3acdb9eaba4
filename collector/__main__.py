"""``python -m ldpkit.collector``: the ``ldpkit`` command (:mod:`ldpkit.cli`), kept for the
scripts written when the command lived here. An entry point, imported by nothing."""

import sys

from ..cli import main

sys.exit(main())
