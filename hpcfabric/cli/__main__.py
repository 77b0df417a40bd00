"""``python -m hpcfabric.cli``: the console script ``hpcfabric``."""

import sys

from hpcfabric.cli import main

sys.exit(main())
