"""Modes and strategies: every strategy name parses, round-trips, and impossible ones say why."""

from __future__ import annotations

import pytest

import subzero as sz
from subzero.modes import STRATEGY_NAMES, Mode, Strategy

STORED = ["FullOne", "FullMany", "PayOne", "PayMany", "CompOne", "CompMany"]
FORWARD_OK = ["FullOne", "FullMany"]
PAYLOAD = ["PayOne", "PayMany", "CompOne", "CompMany"]
NOTHING_STORED = ["Map", "BlackBox"]

EXPECTED = {  # name -> (mode, encoding)
    "BlackBox": (Mode.BLACKBOX, None), "Map": (Mode.MAP, None),
    "FullOne": (Mode.FULL, "One"), "FullMany": (Mode.FULL, "Many"),
    "PayOne": (Mode.PAY, "One"), "PayMany": (Mode.PAY, "Many"),
    "CompOne": (Mode.COMP, "One"), "CompMany": (Mode.COMP, "Many"),
    "FullRange": (Mode.FULL, "Range"),
}


def test_the_eight_names_of_the_design_and_range_rules():
    assert sorted(STRATEGY_NAMES) == sorted(EXPECTED)


@pytest.mark.parametrize("name", ["FullRange", "FullRange/backward", "FullRange/forward"])
def test_full_range_has_no_direction(name):
    """Range rules index both directions: any suffix names the one strategy."""
    s = Strategy.parse(name)
    assert s.name == "FullRange" and s.stored and s.both_directions and s.mode is Mode.FULL
    assert s == Strategy.parse("FullRange")


@pytest.mark.parametrize("base", STORED)
@pytest.mark.parametrize("suffix", ["", "/backward"])
def test_stored_strategies_default_to_backward(base, suffix):
    s = Strategy.parse(base + suffix)
    assert (s.base, s.direction) == (base, "backward")
    assert s.name == f"{base}/backward" == str(s)
    assert repr(s) == f"Strategy('{base}/backward')"


@pytest.mark.parametrize("base", FORWARD_OK)
def test_full_strategies_parse_forward(base):
    s = Strategy.parse(f"{base}/forward")
    assert s.direction == "forward" and s.name == f"{base}/forward"
    assert s != Strategy.parse(base)


@pytest.mark.parametrize("base", PAYLOAD)
def test_payload_forward_is_rejected_with_the_reason(base):
    with pytest.raises(sz.WorkflowError) as err:
        Strategy.parse(f"{base}/forward")
    message = str(err.value)
    assert f"'{base}/forward'" in message and "impossible" in message
    assert "stores no input cells" in message  # why
    assert f"'{base}/backward'" in message and "FullOne/forward" in message  # the fix


@pytest.mark.parametrize("base", NOTHING_STORED)
@pytest.mark.parametrize("suffix", ["", "/backward", "/forward"])
def test_map_and_blackbox_have_no_direction(base, suffix):
    s = Strategy.parse(base + suffix)
    assert s.name == base == str(s) and "/" not in repr(s)
    assert s == Strategy.parse(base)  # the direction is dropped, so every spelling is one strategy
    assert not s.stored and s.encoding is None


@pytest.mark.parametrize("name", list(EXPECTED))
def test_mode_encoding_and_stored(name):
    s = Strategy.parse(name)
    mode, encoding = EXPECTED[name]
    assert s.mode is mode and s.encoding == encoding
    assert s.stored == (encoding is not None)


@pytest.mark.parametrize("name", [f"{b}/backward" for b in STORED] + [f"{b}/forward" for b in FORWARD_OK]
                         + NOTHING_STORED)
def test_canonical_names_round_trip(name):
    s = Strategy.parse(name)
    assert s.name == name
    assert Strategy.parse(s.name) == s and Strategy.parse(str(s)) == s
    assert Strategy.parse(s) is s
    assert hash(Strategy.parse(name)) == hash(s)


def test_surrounding_whitespace_is_ignored():
    assert Strategy.parse("  FullMany/forward ") == Strategy("FullMany", "forward")


def test_strategies_are_frozen_and_ordered():
    s = Strategy.parse("FullOne")
    with pytest.raises(AttributeError):
        s.direction = "forward"  # type: ignore[misc]
    names = ["PayOne", "FullMany/forward", "FullOne", "FullMany"]
    assert [x.name for x in sorted(map(Strategy.parse, names))] == [
        "FullMany/backward", "FullMany/forward", "FullOne/backward", "PayOne/backward"]


@pytest.mark.parametrize("name", ["fullone", "Full", "FullTwo", "", "/backward", "Full One", "PayMany/backward/x"])
def test_unknown_names_list_the_valid_ones(name):
    with pytest.raises(sz.WorkflowError) as err:
        Strategy.parse(name)
    message = str(err.value)
    if name != "PayMany/backward/x":
        assert "unknown strategy" in message and all(b in message for b in STRATEGY_NAMES)
    else:
        assert "unknown direction" in message


@pytest.mark.parametrize("name", ["FullOne/sideways", "FullMany/Forward", "Map/up", "BlackBox/back"])
def test_unknown_directions(name):
    with pytest.raises(sz.WorkflowError, match="unknown direction") as err:
        Strategy.parse(name)
    assert "'/backward' or '/forward'" in str(err.value)


@pytest.mark.parametrize("value", [None, 3, Mode.FULL, ["FullOne"]])
def test_non_strings_are_rejected(value):
    with pytest.raises(sz.WorkflowError, match="must be a string"):
        Strategy.parse(value)


def test_workflow_error_is_also_a_value_error():
    with pytest.raises(ValueError):
        Strategy.parse("Nope")
    assert issubclass(sz.WorkflowError, sz.SubZeroError)


def test_mode_repr():
    assert repr(Mode.FULL) == "Mode.FULL" and Mode("Pay") is Mode.PAY


def test_direction_parses_once_and_equals_its_name():
    from subzero.modes import Direction

    assert Direction.parse(" Forward ") is Direction.FORWARD
    assert Direction.parse(Direction.BACKWARD) is Direction.BACKWARD
    assert Direction.BACKWARD == "backward" and str(Direction.FORWARD) == "forward"
    assert {"backward": 1}[Direction.BACKWARD] == 1


def test_unknown_direction_is_a_workflow_error():
    from subzero.errors import WorkflowError
    from subzero.modes import Direction

    with pytest.raises(WorkflowError, match="use 'backward' or 'forward'"):
        Direction.parse("sideways")
