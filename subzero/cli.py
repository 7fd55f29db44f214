"""Deprecated: the command line is :mod:`subzero.tools.cli`; ``from subzero.cli import main``
still works and warns.  The ``subzero`` console script of an older install imports it here
until subzero is installed again (``pip install -e .``).
"""

from __future__ import annotations

import warnings

from subzero.tools.cli import main

warnings.warn("subzero.cli moved to subzero.tools.cli: import main from there (or reinstall subzero "
              "if the `subzero` command printed this)", DeprecationWarning, stacklevel=2)

__all__ = ["main"]
