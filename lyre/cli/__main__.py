"""``python -m lyre.cli``: the ``lyre`` command."""

import sys

from lyre.cli import main

sys.exit(main())
