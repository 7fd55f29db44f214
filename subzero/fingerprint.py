"""Fingerprints of a run: what must not change for a killed run to be resumed.

A run's catalog keeps (``RunRecord.fingerprint``) the xxh3-64 digests of

- ``workflow``: its structure (node names, inputs, operator classes and arguments);
- ``operator:NODE``: each operator, its class's code (every method's bytecode and
  constants, along its class hierarchy) and its public attributes (those not starting
  with ``_``; private attributes are state the run itself sets, e.g. a two-pass
  operator's seams);
- ``settings``: the tile shape, pinned strategies, workload and budgets;
- ``input:NAME``: each input's contents, shape and dtype, added when the input is stored.
  The contents are digested tile by tile as they are written (one digest per chunk,
  then one over the chunk digests), so a numpy input and a Zarr input holding the same
  values have the same digest, and a Zarr input is digested by the tasks that copy it.

`Workflow.run(..., resume=True)` recomputes these and refuses to continue a run whose
workflow, operators, settings or inputs differ (`differences` says which).
"""

from __future__ import annotations

import enum
import json
import re
import threading
import types
import weakref
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Iterable

import numpy as np
from numpy.typing import DTypeLike
import xxhash

__all__ = ["block_digest", "combine_digests", "array_digest", "CopyBeside", "operator_digest", "run_fingerprint",
           "differences"]

_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
_BOUND = ("input_shapes", "output_shape")
_PLAIN = frozenset({type(None), bool, int, float, complex, str, bytes})


def block_digest(block: np.ndarray) -> str:
    """The digest of one tile's values (little-endian, C order).

    Examples
    --------
    >>> block_digest(np.arange(3, dtype=">i4")) == block_digest(np.arange(3, dtype="<i4"))
    True
    """
    block = np.asarray(block)
    data = np.ascontiguousarray(block, dtype=block.dtype.newbyteorder("<"))
    return xxhash.xxh3_64_hexdigest(memoryview(data).cast("B") if data.size else b"")


def combine_digests(shape: tuple[int, ...], dtype: DTypeLike, digests: Iterable[str]) -> str:
    """One digest of an array from its tiles' digests (in tile order), its shape and dtype."""
    h = xxhash.xxh3_64()
    h.update(f"{tuple(int(n) for n in shape)}|{np.dtype(dtype).str.replace('>', '<')}|".encode())
    for d in digests:
        h.update(d.encode())
    return h.hexdigest()


def array_digest(array: np.ndarray, chunks: tuple[int, ...]) -> str:
    """The digest of an in-memory (or memory-mapped) array, read one chunk at a time."""
    from subzero.tiling import tile_grid

    array = np.asarray(array) if not isinstance(array, np.ndarray) else array
    shape = tuple(int(n) for n in array.shape)
    tiles = tile_grid(shape, tuple(range(len(shape))), tuple(chunks))
    return combine_digests(shape, array.dtype,
                           (block_digest(array[tuple(slice(lo, hi) for lo, hi in t.box)]) for t in tiles))


class CopyBeside:
    """A copy of a caller's input being made, then digested, on a thread of its own (numpy copies
    without the GIL: the caller traces or computes meanwhile).  A run written behind stores the
    copy (the caller may change its array once the run returns) and records its digest.

    Parameters
    ----------
    value : numpy.ndarray
        The caller's array (only read).
    chunks : tuple of int
        The chunks its digest is taken over (`array_digest`).

    Attributes
    ----------
    block : concurrent.futures.Future
        The copy, in C order.
    digest : concurrent.futures.Future
        Its digest, once copied.

    Examples
    --------
    >>> x = np.arange(6.0).reshape(2, 3)
    >>> c = CopyBeside(x, (2, 3))
    >>> c.block.result() is not x and c.digest.result() == array_digest(x, (2, 3))
    True
    """

    _pool: list[ThreadPoolExecutor] = []  # one thread for the process, started when first needed
    _pool_lock = threading.Lock()

    def __init__(self, value: np.ndarray, chunks: tuple[int, ...]):
        self.source, self.chunks = value, tuple(chunks)
        self.block: Future[np.ndarray] = Future()
        self.block.set_running_or_notify_cancel()
        self.digest: Future[str] = self._thread().submit(self._copy_and_digest)

    def _copy_and_digest(self) -> str:
        try:
            got = np.array(self.source, copy=True, order="C")
        except BaseException as exc:
            self.block.set_exception(exc)
            raise
        self.block.set_result(got)
        return array_digest(got, self.chunks)

    def of(self, value: np.ndarray, chunks: tuple[int, ...]) -> bool:
        """Whether this is the copy of ``value`` over ``chunks`` (started before the run knew it)."""
        return self.source is value and self.chunks == tuple(chunks)

    @classmethod
    def _thread(cls) -> ThreadPoolExecutor:
        with cls._pool_lock:
            if not cls._pool:
                cls._pool.append(ThreadPoolExecutor(1, thread_name_prefix="subzero-digest"))
            return cls._pool[0]


# -- operators -----------------------------------------------------------------------------------------------------

def _canon(value: Any, h, depth: int = 0, seen: set[int] | None = None, memo: _Memo | None = None) -> None:
    """Feed a canonical description of ``value`` to the hash ``h`` (the same in every process:
    no addresses, no hash-seed-dependent set order).  ``memo``: the bytes of the objects, functions
    and classes met before in the same fingerprint (`_Memo`), fed again instead of made again."""
    if depth > 12:
        h.update(b"<deep>")
        return
    kind = type(value)
    if kind in _PLAIN:  # most of an operator's state: what the first branch below does, with no more tests
        h.update(f"{kind.__name__}:{value!r};".encode())
        return
    seen = seen if seen is not None else set()
    if value is None or isinstance(value, (bool, int, float, complex, str, bytes)):
        h.update(f"{type(value).__name__}:{value!r};".encode())
    elif isinstance(value, np.ndarray):
        h.update(f"nd{value.shape}{value.dtype.str};".encode())
        h.update(block_digest(value).encode() if value.dtype != object else repr(value.tolist()).encode())
    elif isinstance(value, np.generic):
        h.update(f"np:{value.dtype.str}:{value.item()!r};".encode())
    elif isinstance(value, enum.Enum):
        h.update(f"enum:{type(value).__qualname__}.{value.name};".encode())
    elif isinstance(value, (list, tuple)):
        h.update(f"{type(value).__name__}[".encode())
        for v in value:
            _canon(v, h, depth + 1, seen, memo)
        h.update(b"]")
    elif isinstance(value, (set, frozenset)):
        parts = []
        for v in value:
            sub = xxhash.xxh3_64()
            _canon(v, sub, depth + 1, seen, memo)
            parts.append(sub.hexdigest())
        h.update(f"set{sorted(parts)};".encode())
    elif isinstance(value, dict):
        h.update(b"{")
        for k in sorted(value, key=repr):
            _canon(k, h, depth + 1, seen, memo)
            _canon(value[k], h, depth + 1, seen, memo)
        h.update(b"}")
    elif isinstance(value, types.CodeType):
        _code(value, h, depth, seen, memo)
    elif isinstance(value, types.FunctionType):
        _memoised(_function, value, h, depth, seen, memo)
    elif isinstance(value, type):
        _memoised(_class, value, h, depth, seen, memo)
    elif id(value) in seen:
        h.update(b"<cycle>")
    elif hasattr(value, "__dict__") and not isinstance(value, types.ModuleType):
        _memoised(_object, value, h, depth, seen, memo)
    else:
        h.update(_ADDRESS.sub("", f"{type(value).__module__}.{type(value).__qualname__}:{value!r}").encode())


class _Memo:
    """The bytes `_canon` fed for each object, function and class (at each depth) within one
    fingerprint, and the objects and classes it marked seen on the way (what those bytes depend
    on: the same bytes follow wherever none of them is seen yet).  A traced workflow's nodes share
    their numpy functions: each is canonicalised once per fingerprint, not once per node."""

    def __init__(self) -> None:
        #: (id, depth) -> (the value, kept alive so that its id stays its own; its bytes; the ids it marks seen)
        self.entries: dict[tuple[int, int], tuple[Any, bytes, frozenset[int]]] = {}


def _memoised(canon: Any, value: Any, h, depth: int, seen: set[int], memo: _Memo | None) -> None:
    """``canon(value, h, depth, seen, memo)``, its bytes made once per ``memo``: they are made
    from an empty ``seen`` and fed wherever none of the ids they mark is in ``seen`` (then each
    test of ``seen`` they made answers as it did), else made again in place."""
    if memo is None:
        canon(value, h, depth, seen, memo)
        return
    key = (id(value), depth)
    got = memo.entries.get(key)
    if got is None:
        recorder, fresh = _Recorder(), set[int]()
        canon(value, recorder, depth, fresh, memo)
        got = memo.entries[key] = (value, b"".join(recorder.parts), frozenset(fresh))
    if got[2].isdisjoint(seen):
        h.update(got[1])
        seen.update(got[2])
    else:
        canon(value, h, depth, seen, memo)


def _object(value: Any, h, depth: int, seen: set[int], memo: _Memo | None) -> None:
    seen.add(id(value))
    cls = type(value)
    h.update(f"obj:{cls.__module__}.{cls.__qualname__}".encode())
    _canon({k: v for k, v in vars(value).items()}, h, depth + 1, seen, memo)


def _code(code: types.CodeType, h, depth: int, seen: set[int], memo: _Memo | None = None) -> None:
    h.update(code.co_code)
    h.update(repr((code.co_names, code.co_varnames, code.co_argcount, code.co_kwonlyargcount)).encode())
    for const in code.co_consts:
        _canon(const, h, depth + 1, seen, memo)


def _function(fn: types.FunctionType, h, depth: int, seen: set[int], memo: _Memo | None = None) -> None:
    h.update(f"fn:{fn.__qualname__};".encode())
    _code(fn.__code__, h, depth, seen, memo)
    _canon(fn.__defaults__, h, depth + 1, seen, memo)
    _canon(fn.__kwdefaults__, h, depth + 1, seen, memo)
    if fn.__closure__:
        for cell in fn.__closure__:
            try:
                _canon(cell.cell_contents, h, depth + 1, seen, memo)
            except ValueError:  # an empty cell
                h.update(b"<empty>")


def _class(cls: type, h, depth: int, seen: set[int], memo: _Memo | None = None) -> None:
    """A class's code: the attributes its own body defines, for every class of its hierarchy."""
    for klass in cls.__mro__:
        if klass is object or klass.__module__ == "builtins":
            continue
        key = id(klass)
        h.update(f"class:{klass.__module__}.{klass.__qualname__};".encode())
        if key in seen:
            continue
        seen.add(key)
        for name in sorted(vars(klass)):
            if name in ("__dict__", "__weakref__", "__doc__", "__module__", "__qualname__", "__annotations__",
                        "__firstlineno__", "__static_attributes__", "__slotnames__", "__abstractmethods__",
                        "_abc_impl"):
                continue
            attr = vars(klass)[name]
            if isinstance(attr, (staticmethod, classmethod)):
                attr = attr.__func__
            if isinstance(attr, property):
                attr = (attr.fget, attr.fset, attr.fdel)
            h.update(f"{name}=".encode())
            _canon(attr, h, depth + 1, seen, memo)


class _Recorder:
    """Takes what a hasher would, to feed it to hashers later (`operator_digest`'s cache)."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def update(self, data: bytes) -> None:
        self.parts.append(bytes(data))


_CLASS_BYTES: "weakref.WeakKeyDictionary[type, tuple[tuple, bytes, frozenset[int]]]" = weakref.WeakKeyDictionary()


def operator_digest(op: Any, checked: set[type] | None = None, memo: _Memo | None = None) -> str:
    """The digest of an operator: its class's code and its public attributes (not the
    shapes the runtime binds, nor private state a run sets).  ``checked``: the classes whose
    cached code was found current since the caller began (`run_fingerprint`: once per class
    and run, not once per node); ``memo``: the bytes of the functions and objects canonicalised
    since the caller began (`_Memo`; the digest is the same with or without)."""
    h = xxhash.xxh3_64()
    cls = type(op)
    # a class's code is canonicalized once per process while its attributes stay the same objects
    # (a traced workflow has hundreds of nodes of a few classes; a patched method is seen)
    cached = _CLASS_BYTES.get(cls)
    if cached is None or checked is None or cls not in checked:
        stamp = tuple((id(k), tuple(map(id, vars(k).values()))) for k in cls.__mro__)
    else:
        stamp = cached[0]
    if checked is not None:
        checked.add(cls)
    if cached is None or cached[0] != stamp:
        recorder = _Recorder()
        class_seen: set[int] = set()
        _class(cls, recorder, 0, class_seen)
        cached = _CLASS_BYTES[cls] = (stamp, b"".join(recorder.parts), frozenset(class_seen))
    h.update(cached[1])
    seen: set[int] = set(cached[2])
    state = {k: v for k, v in vars(op).items() if not k.startswith("_") and k not in _BOUND}
    _canon(state, h, 0, seen, memo)
    return h.hexdigest()


# -- a run ---------------------------------------------------------------------------------------------------------

def run_fingerprint(wf: Any, settings: dict[str, Any], workflow: dict[str, Any] | None = None) -> dict[str, str]:
    """The fingerprint of a run before it stores anything: workflow, operators and settings
    (`subzero.catalog.RunRecord.fingerprint`; inputs are added as they are stored).
    ``workflow``: ``wf.to_dict()`` when the caller made it already (the catalog keeps it)."""
    workflow = wf.to_dict() if workflow is None else workflow
    out = {"workflow": xxhash.xxh3_64_hexdigest(json.dumps(workflow, sort_keys=True, default=repr).encode()),
           "settings": xxhash.xxh3_64_hexdigest(json.dumps(settings, sort_keys=True, default=repr).encode())}
    checked: set[type] = set()
    memo = _Memo()  # the numpy functions a traced workflow's nodes share, canonicalised once
    for node in wf.nodes:
        if not node.is_input:
            out[f"operator:{node.name}"] = operator_digest(node.operator, checked, memo)
    return out


_WHAT = {"workflow": "the workflow's nodes, inputs or operator arguments",
         "settings": "the run's settings (tile shape, pinned strategies, workload or budgets)"}


def differences(stored: dict[str, str], current: dict[str, str]) -> list[str]:
    """What differs between a stored fingerprint and the current one, in words (empty: the same).

    Only keys present in ``current`` are compared; inputs are compared by the caller
    once their digests are known.
    """
    out = []
    for key in sorted(current):
        if stored.get(key) == current[key]:
            continue
        kind, _, name = key.partition(":")
        if kind == "operator":
            out.append(f"the operator of node {name!r} (its code or arguments)" if key in stored
                       else f"node {name!r} (not in the stored run)")
        elif kind == "input":
            out.append(f"input {name!r} (its values, shape or dtype)")
        else:
            out.append(_WHAT.get(key, key))
    extra = sorted(k.partition(":")[2] for k in stored if k.startswith("operator:") and k not in current)
    if extra:
        out.append(f"node(s) {', '.join(map(repr, extra))} (in the stored run, not in this workflow)")
    return out
