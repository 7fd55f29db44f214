"""Deprecated: linked brushing is :mod:`subzero.tools.brush`; ``subzero.brush.brush`` still
works and warns.
"""

from __future__ import annotations

import warnings

from subzero.tools.brush import brush, brush_data, default_source

warnings.warn("subzero.brush moved to subzero.tools.brush: import brush from there", DeprecationWarning,
              stacklevel=2)

__all__ = ["brush", "brush_data", "default_source"]
