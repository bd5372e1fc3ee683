"""``python -m estimator``: the command line of :mod:`estimator.cli`."""

import sys

from .cli import main

sys.exit(main())
