"""``python -m dashboards.compare``: see :mod:`dashboards.compare.cli`."""

import sys

from dashboards.compare.cli import main

sys.exit(main())
