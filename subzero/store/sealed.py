"""Checksummed metadata: the JSON records and pickles a store keeps besides chunks and shards.

Array chunks carry CRC32C (`subzero.store.arrays`) and shard files are checked against
the xxh3 checksums of their manifest (`subzero.store.shards`); the records that say
what those are (the catalog and the manifests) and the operators are sealed here, so a
changed byte in any of them is refused instead of read (the store's marker,
``subzero-store.json``, only says a directory is a store and is not sealed):

- a JSON record carries ``"checksum": "xxh3-64:<hex>"``, the digest of its canonical form
  (keys sorted, no spaces), so the checksum is of what the record says, not of its layout;
- a pickle is framed as ``SZPK1`` + the 8-byte xxh3-64 digest of the payload + the payload, or,
  from 1 MiB, as ``SZPK2`` + the digest of the zstd-compressed payload + that compressed payload.
"""

from __future__ import annotations

import json
from typing import Any

import xxhash

from subzero.errors import StoreError

__all__ = ["seal_json", "unseal_json", "seal_pickle", "unseal_pickle", "CHECKSUM_KEY"]

CHECKSUM_KEY = "checksum"
_PREFIX = "xxh3-64:"
_MAGIC = b"SZPK1"
_MAGIC_ZSTD = b"SZPK2"  # the payload zstd-compressed (the digest is of the compressed bytes, as stored)
#: pickles of at least this many bytes are stored compressed (when that makes them smaller): an
#: operator holding a traced mask's positions is most of a small run's store otherwise
COMPRESS_PICKLES_FROM = 1 << 14


def _canonical(data: dict[str, Any]) -> bytes:
    return json.dumps(data, sort_keys=True, separators=(",", ":")).encode()


def seal_json(data: dict[str, Any], indent: int | None = None) -> bytes:
    """``data`` as JSON bytes carrying the checksum of its contents.

    Examples
    --------
    >>> unseal_json(seal_json({"a": [1, 2.5]}), "x")
    {'a': [1, 2.5]}
    """
    if CHECKSUM_KEY in data:
        raise ValueError(f"a sealed record cannot hold its own {CHECKSUM_KEY!r} key")
    canonical = _canonical(data)
    checksum = _PREFIX + xxhash.xxh3_64_hexdigest(canonical)
    if indent is None:  # the canonical form itself, the checksum first: serialized once, by json's C encoder
        return b'{"%s":"%s"%s' % (CHECKSUM_KEY.encode(), checksum.encode(), b"}" if canonical == b"{}" else
                                  b"," + canonical[1:])
    sealed = dict(data)
    sealed[CHECKSUM_KEY] = checksum
    return json.dumps(sealed, indent=indent, sort_keys=True).encode()


def parse_json(raw: bytes, where: str) -> Any:
    """JSON bytes parsed; undecodable bytes are a `StoreError` naming ``where``."""
    try:
        return json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise StoreError(f"{where} is corrupt ({type(exc).__name__}: {exc}); the store is damaged") from exc


def unseal_json(data: Any, where: str) -> dict[str, Any]:
    """A parsed sealed record without its checksum, once the checksum matches.

    ``data`` may be the raw bytes or the already parsed object (callers that look at a
    record's format first parse it themselves).  A missing or wrong checksum is a
    `StoreError` naming ``where``.
    """
    if isinstance(data, (bytes, bytearray)):
        data = parse_json(bytes(data), where)
    if not isinstance(data, dict):
        raise StoreError(f"{where} is damaged (not a JSON object)")
    data = dict(data)
    got = data.pop(CHECKSUM_KEY, None)
    if not isinstance(got, str):
        raise StoreError(f"{where} is damaged: it carries no checksum")
    if got != _PREFIX + xxhash.xxh3_64_hexdigest(_canonical(data)):
        raise StoreError(f"{where} does not match its checksum (its bytes were changed); the store is damaged")
    return data


def seal_pickle(payload: bytes) -> bytes:
    """A pickle framed with its checksum; one of at least `COMPRESS_PICKLES_FROM` bytes (an
    operator holding the positions a traced mask selects) compressed with zstd first, unless
    that does not make it smaller (values that do not compress).

    Examples
    --------
    >>> unseal_pickle(seal_pickle(b"abc"), "x")
    b'abc'
    >>> big = bytes(range(256)) * 8192
    >>> framed = seal_pickle(big)
    >>> framed.startswith(b"SZPK2") and len(framed) < len(big) // 10 and unseal_pickle(framed, "x") == big
    True
    """
    if len(payload) >= COMPRESS_PICKLES_FROM:
        from numcodecs import Zstd

        packed = bytes(Zstd(level=1).encode(payload))
        if len(packed) < len(payload):
            return _MAGIC_ZSTD + xxhash.xxh3_64_digest(packed) + packed
    return _MAGIC + xxhash.xxh3_64_digest(payload) + payload


def unseal_pickle(raw: bytes, where: str) -> bytes:
    """The payload of `seal_pickle` (either frame); a wrong frame or checksum is a `StoreError`
    naming ``where``."""
    head = len(_MAGIC) + 8
    if len(raw) < head or not raw.startswith((_MAGIC, _MAGIC_ZSTD)):
        raise StoreError(f"{where} is damaged (not a checksummed subzero pickle)")
    payload = raw[head:]
    if xxhash.xxh3_64_digest(payload) != raw[len(_MAGIC):head]:
        raise StoreError(f"{where} does not match its checksum (its bytes were changed or cut); the store is damaged")
    if raw.startswith(_MAGIC_ZSTD):
        from numcodecs import Zstd

        try:
            return bytes(Zstd().decode(payload))
        except Exception as exc:  # a frame whose checksum matched but does not decode: written wrong
            raise StoreError(f"{where} cannot be decompressed ({exc}); the store is damaged") from exc
    return payload
