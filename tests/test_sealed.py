"""Checksummed records and pickles: any changed byte is a StoreError, layout changes are not."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, strategies as st

import subzero as sz
from subzero.errors import StoreError
from subzero.store.sealed import seal_json, seal_pickle, unseal_json, unseal_pickle

records = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
                       lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
                       max_leaves=20)


@given(st.dictionaries(st.text().filter(lambda k: k != "checksum"), records, max_size=6), st.sampled_from([None, 1]))
def test_sealed_records_round_trip(data, indent):
    assert unseal_json(seal_json(data, indent=indent), "x") == data


@given(st.dictionaries(st.sampled_from("abcdef"), st.integers() | st.text(max_size=5), min_size=1, max_size=5),
       st.data())
def test_every_changed_byte_is_refused(data, draw):
    raw = bytearray(seal_json(data))
    pos = draw.draw(st.integers(0, len(raw) - 1))
    bit = draw.draw(st.integers(0, 7))
    raw[pos] ^= 1 << bit
    try:
        back = unseal_json(bytes(raw), "the record")
    except sz.StoreError as exc:
        assert "the record" in str(exc)
    else:  # only a change that does not change what the record says (e.g. a space became another space)
        assert back == data


def test_layout_does_not_matter_but_values_do():
    raw = seal_json({"a": [1, 2.5, "x"], "b": {"c": None}})
    pretty = json.dumps(json.loads(raw), indent=4).encode()
    assert unseal_json(pretty, "x") == {"a": [1, 2.5, "x"], "b": {"c": None}}
    changed = json.loads(raw)
    changed["a"][0] = 2
    with pytest.raises(sz.StoreError, match="does not match its checksum"):
        unseal_json(json.dumps(changed).encode(), "x")
    unsealed = json.loads(raw)
    del unsealed["checksum"]
    with pytest.raises(sz.StoreError, match="carries no checksum"):
        unseal_json(json.dumps(unsealed).encode(), "x")
    assert math.isinf(unseal_json(seal_json({"v": float("inf")}), "x")["v"])


def test_a_record_cannot_hold_its_own_checksum_key():
    with pytest.raises(ValueError):
        seal_json({"checksum": 1})


@pytest.mark.parametrize("how", ["flip", "cut", "empty", "unframed"])
def test_framed_pickles(how):
    raw = bytearray(seal_pickle(b"payload of an operator"))
    assert unseal_pickle(bytes(raw), "x") == b"payload of an operator"
    if how == "flip":
        raw[-3] ^= 1
    elif how == "cut":
        raw = raw[:-1]
    elif how == "empty":
        raw = bytearray()
    else:
        raw = bytearray(b"\x80\x05plain pickle")
    with pytest.raises(sz.StoreError, match="the operator"):
        unseal_pickle(bytes(raw), "the operator")


def test_a_large_pickle_is_stored_compressed_and_read_back_checked():
    """An operator holding a traced mask's positions (megabytes of sorted int64) is stored
    zstd-compressed; the checksum covers the stored bytes, so a changed byte is refused; the
    frame of smaller pickles (and of older stores) is read as before."""
    import pickle

    import numpy as np

    from subzero.store.sealed import COMPRESS_PICKLES_FROM

    positions = np.flatnonzero(np.random.default_rng(0).random(1 << 19) > 0.5)
    payload = pickle.dumps(positions)
    assert len(payload) >= COMPRESS_PICKLES_FROM
    framed = seal_pickle(payload)
    assert framed.startswith(b"SZPK2") and len(framed) < len(payload) / 3
    assert unseal_pickle(framed, "op") == payload
    damaged = framed[:-10] + bytes(10)
    with pytest.raises(StoreError, match="checksum"):
        unseal_pickle(damaged, "op")
    small = seal_pickle(b"abc")
    assert small.startswith(b"SZPK1") and unseal_pickle(small, "op") == b"abc"
    noise = np.random.default_rng(1).bytes(COMPRESS_PICKLES_FROM)  # values that do not compress: kept as they are
    assert seal_pickle(noise).startswith(b"SZPK1") and unseal_pickle(seal_pickle(noise), "op") == noise
    mask = pickle.dumps(np.flatnonzero(np.random.default_rng(2).random(4096) > 0.3))  # a small run's mask
    assert len(mask) < 1 << 20 and len(seal_pickle(mask)) < len(mask) / 3
