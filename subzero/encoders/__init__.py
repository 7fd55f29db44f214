"""Encodings of stored lineage: the paper's FullOne, FullMany, PayOne, PayMany (Fig. 4) and
FullRange (range rules, after ProvRC)."""

from __future__ import annotations

from subzero.encoders.base import Encoder, EncodedTile, Batch, merge_tiles
from subzero.encoders.full_many import FullMany
from subzero.encoders.full_one import FullOne
from subzero.encoders.full_range import FullRange
from subzero.encoders.pay_many import PayMany
from subzero.encoders.pay_one import PayOne
from subzero.modes import Mode, Strategy

__all__ = ["Encoder", "EncodedTile", "Batch", "merge_tiles", "FullOne", "FullMany", "FullRange",
           "PayOne", "PayMany", "encoder_for"]

_BY_ENCODING = {
    (Mode.FULL, "One"): FullOne, (Mode.FULL, "Many"): FullMany, (Mode.FULL, "Range"): FullRange,
    (Mode.PAY, "One"): PayOne, (Mode.PAY, "Many"): PayMany,
    (Mode.COMP, "One"): PayOne, (Mode.COMP, "Many"): PayMany,
}


def encoder_for(strategy: Strategy) -> Encoder:
    """The encoder that stores ``strategy`` (Comp stores its overrides as Pay)."""
    return _BY_ENCODING[(strategy.mode, strategy.encoding)](strategy.direction)
