"""``python -m subzero``: the same command line as the ``subzero`` console script."""

from __future__ import annotations

import sys

from subzero.cli import main

if __name__ == "__main__":
    sys.exit(main())
