"""Tests of parsing users' disk and runtime budgets."""

from __future__ import annotations

import math

import pytest

from subzero.errors import WorkflowError
from subzero.optimizer.budgets import parse_disk_budget, parse_runtime_budget

INPUT_BYTES = 8_000_000
BASE_SECONDS = 40.0


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, None),
        (0, 0.0),
        (1234, 1234.0),
        (2.5e6, 2.5e6),
        ("123", 123.0),
        ("7B", 7.0),
        ("200kb", 200e3),
        ("50MB", 50e6),
        ("50 mb", 50e6),
        ("3GB", 3e9),
        ("1TB", 1e12),
        ("4KiB", 4096.0),
        ("2 MiB", 2 * 1024**2),
        ("1.5 GiB", 1.5 * 1024**3),
        ("1tib", 1024.0**4),
        ("1e3MB", 1e9),
        (" 0.5MB ", 0.5e6),
        ("2x", 2 * INPUT_BYTES),
        ("2.5X", 2.5 * INPUT_BYTES),
        ("0x", 0.0),
    ],
)
def test_disk_accepted(value, expected):
    assert parse_disk_budget(value, INPUT_BYTES) == expected


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("abc", "'abc'"),
        ("-1MB", "'-1MB'"),
        (-1, "-1"),
        (math.nan, "nan"),
        (math.inf, "inf"),
        ("nan", "'nan'"),
        ("", "''"),
        ("1.2.3MB", "'1.2.3MB'"),
        ("5 parsecs", "unknown unit 'parsecs'"),
        ("5M", "unknown unit 'm'"),
        (True, "True"),
        ([5], "[5]"),
    ],
)
def test_disk_rejected(value, shown):
    with pytest.raises(WorkflowError) as info:
        parse_disk_budget(value, INPUT_BYTES)
    message = str(info.value)
    assert message.startswith("max_disk: got ")
    assert shown in message
    assert "'50MB'" in message and "'2x'" in message


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, None),
        (0, 0.0),
        (12, 12.0),
        (0.25, 0.25),
        ("30", 30.0),
        ("30s", 30.0),
        ("30 S", 30.0),
        ("2m", 120.0),
        ("1.5h", 5400.0),
        ("1x", 0.0),
        ("1.5x", 0.5 * BASE_SECONDS),
        ("3X", 2 * BASE_SECONDS),
    ],
)
def test_runtime_accepted(value, expected):
    assert parse_runtime_budget(value, BASE_SECONDS) == expected


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("abc", "'abc'"),
        ("-5s", "'-5s'"),
        (-5, "-5"),
        (math.nan, "nan"),
        ("0.5x", "negative overhead"),
        ("10 fortnights", "unknown unit 'fortnights'"),
        ("5MB", "unknown unit 'mb'"),
        ([30], "[30]"),
    ],
)
def test_runtime_rejected(value, shown):
    with pytest.raises(WorkflowError) as info:
        parse_runtime_budget(value, BASE_SECONDS)
    message = str(info.value)
    assert message.startswith("max_runtime: got ")
    assert shown in message
    assert "'30s'" in message and "'1.5x'" in message


def test_errors_are_value_errors():
    with pytest.raises(ValueError, match="max_disk"):
        parse_disk_budget("lots", INPUT_BYTES)
