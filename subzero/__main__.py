"""``python -m subzero``: the same command line as the ``subzero`` console script.

``python -m`` puts the current directory first on ``sys.path``; the console script does not.
It is taken off here, so a file in the working directory named like a module Python or Spark
imports (``profile.py``, ``types.py``, ``inspect.py``) cannot replace that module: both
commands import the same code.  Workflow files are still run by path.
"""

from __future__ import annotations

import os
import sys

if __name__ == "__main__":
    _cwd = os.path.realpath(os.getcwd())
    sys.path[:] = [p for p in sys.path if p and os.path.realpath(p) != _cwd]
    from subzero.tools.cli import main

    sys.exit(main())
