"""``python -m estimator``: the command line of :mod:`estimator.cli`."""

import sys

from .cli.commands import main

sys.exit(main())
