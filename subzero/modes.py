"""Lineage modes and storage strategies: the vocabulary of SubZero section V and VI-B.

A *mode* is what an operator can produce (``FULL`` region pairs, ``MAP`` mapping
functions, ``PAY`` payloads, ``COMP`` mapping default plus payload overrides,
``BLACKBOX`` nothing).  A *strategy* is what the runtime stores for a node: a mode,
an encoding (``One``/``Many``) and a direction (``backward``/``forward``).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from subzero.errors import WorkflowError

__all__ = ["Mode", "Direction", "Strategy", "STRATEGY_NAMES"]


class Mode(enum.Enum):
    """A kind of lineage an operator can produce (paper Table I)."""

    FULL = "Full"
    MAP = "Map"
    PAY = "Pay"
    COMP = "Comp"
    BLACKBOX = "BlackBox"

    def __repr__(self) -> str:
        return f"Mode.{self.name}"


_BASES = {
    "BlackBox": (Mode.BLACKBOX, None),
    "Map": (Mode.MAP, None),
    "FullOne": (Mode.FULL, "One"),
    "FullMany": (Mode.FULL, "Many"),
    "FullRange": (Mode.FULL, "Range"),
    "PayOne": (Mode.PAY, "One"),
    "PayMany": (Mode.PAY, "Many"),
    "CompOne": (Mode.COMP, "One"),
    "CompMany": (Mode.COMP, "Many"),
}
STRATEGY_NAMES = tuple(_BASES)


class Direction(str, enum.Enum):
    """Which way a lineage step or query goes.

    A ``str`` enum, so a `Direction` equals its name (``Direction.BACKWARD == "backward"``)
    and serializes as that name; parse user input once with `Direction.parse`.
    """

    BACKWARD = "backward"
    FORWARD = "forward"

    @classmethod
    def parse(cls, value: "str | Direction") -> "Direction":
        """``"backward"``/``"forward"`` (or a `Direction`) as a `Direction`.

        Raises
        ------
        WorkflowError
            When ``value`` names no direction.
        """
        if isinstance(value, Direction):
            return value
        try:
            return cls(str(value).strip().lower())
        except ValueError:
            raise WorkflowError(f"unknown direction {value!r}; use 'backward' or 'forward'") from None

    def __str__(self) -> str:
        return self.value

    def __repr__(self) -> str:
        return f"Direction.{self.name}"


DIRECTIONS = tuple(d.value for d in Direction)


@dataclass(frozen=True, order=True)
class Strategy:
    """A storage strategy: mode + encoding + direction.

    Examples
    --------
    >>> Strategy.parse("FullOne/forward")
    Strategy('FullOne/forward')
    >>> Strategy.parse("PayMany").stored
    True
    """

    base: str
    direction: Direction = Direction.BACKWARD

    def __post_init__(self) -> None:
        if not isinstance(self.direction, Direction):  # Strategy("FullOne", "forward"): the name, parsed once
            object.__setattr__(self, "direction", Direction.parse(self.direction))

    @classmethod
    def parse(cls, name: "str | Strategy") -> "Strategy":
        """Parse ``"FullOne"``, ``"FullMany/forward"``, ... into a `Strategy`."""
        if isinstance(name, Strategy):
            return name
        if not isinstance(name, str):
            raise WorkflowError(
                f"strategy must be a string such as 'FullOne/backward', got {name!r}"
            )
        base, _, direction = name.strip().partition("/")
        if base not in _BASES:
            raise WorkflowError(
                f"unknown strategy {name!r}; expected one of {', '.join(STRATEGY_NAMES)}, "
                "optionally suffixed '/backward' or '/forward'"
            )
        if (direction or "backward") not in DIRECTIONS:
            raise WorkflowError(
                f"unknown direction {direction!r} in strategy {name!r}; use '/backward' or '/forward'"
            )
        keyed = Direction(direction or "backward")
        mode = _BASES[base][0]
        if mode in (Mode.MAP, Mode.BLACKBOX) or _BASES[base][1] == "Range":
            keyed = Direction.BACKWARD  # nothing is keyed: nothing stored, or both directions indexed
        elif mode in (Mode.PAY, Mode.COMP) and keyed is Direction.FORWARD:
            raise WorkflowError(
                f"strategy {name!r} is impossible: payload lineage stores no input cells to key "
                "on (SubZero V-A.3); forward queries over it iterate the pairs. "
                f"Use '{base}/backward', or 'FullOne/forward' for an indexed forward strategy"
            )
        return cls(base, keyed)

    @property
    def mode(self) -> Mode:
        """The strategy's lineage mode."""
        return _BASES[self.base][0]

    @property
    def encoding(self) -> str | None:
        """``"One"``, ``"Many"`` or None for strategies that store nothing."""
        return _BASES[self.base][1]

    @property
    def stored(self) -> bool:
        """True when the strategy writes lineage to the store."""
        return self.encoding is not None

    @property
    def both_directions(self) -> bool:
        """True when the strategy indexes both directions (FullRange), so has no direction."""
        return self.encoding == "Range"

    @property
    def name(self) -> str:
        """The canonical name: ``"FullOne/backward"``, or the base alone when no direction applies."""
        return f"{self.base}/{self.direction}" if self.stored and not self.both_directions else self.base

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"Strategy({self.name!r})"


def parse_node_strategies(items: list[str] | None, what: str) -> dict[str, list[str]]:
    """``NODE=STRATEGY[,STRATEGY]`` items (the CLI's ``--strategy``/``--using``) as strategy names
    per node, in the order given; a malformed item is a `WorkflowError` naming ``what``."""
    out: dict[str, list[str]] = {}
    for item in items or []:
        node, sep, value = item.partition("=")
        if not sep or not node or not value:
            raise WorkflowError(f"{what} {item!r} must look like NODE=STRATEGY[,STRATEGY]")
        out.setdefault(node, []).extend(v for v in value.split(",") if v)
    return out
