"""Encodings of stored lineage: the paper's FullOne, FullMany, PayOne, PayMany (Fig. 4) and
FullRange (range rules, after ProvRC).

Each encoder's module is imported when it is first used (`encoder_for`, or an attribute such
as ``subzero.encoders.FullRange``): a query that reads one encoding loads only that one.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from subzero.encoders.base import Encoder, EncodedTile, Batch, merge_tiles
from subzero.modes import Mode, Strategy

if TYPE_CHECKING:
    from subzero.encoders.full_many import FullMany
    from subzero.encoders.full_one import FullOne
    from subzero.encoders.full_range import FullRange
    from subzero.encoders.pay_many import PayMany
    from subzero.encoders.pay_one import PayOne

__all__ = ["Encoder", "EncodedTile", "Batch", "merge_tiles", "FullOne", "FullMany", "FullRange",
           "PayOne", "PayMany", "encoder_for"]

#: each encoder class and the module defining it (imported on first use)
_MODULES = {"FullOne": "full_one", "FullMany": "full_many", "FullRange": "full_range",
            "PayOne": "pay_one", "PayMany": "pay_many"}

_BY_ENCODING = {
    (Mode.FULL, "One"): "FullOne", (Mode.FULL, "Many"): "FullMany", (Mode.FULL, "Range"): "FullRange",
    (Mode.PAY, "One"): "PayOne", (Mode.PAY, "Many"): "PayMany",
    (Mode.COMP, "One"): "PayOne", (Mode.COMP, "Many"): "PayMany",
}


def __getattr__(name: str) -> Any:
    if name in _MODULES:
        return getattr(importlib.import_module(f"subzero.encoders.{_MODULES[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def encoder_for(strategy: Strategy) -> Encoder:
    """The encoder that stores ``strategy`` (Comp stores its overrides as Pay)."""
    cls: type[Encoder] = __getattr__(_BY_ENCODING[(strategy.mode, strategy.encoding)])
    return cls(strategy.direction)
