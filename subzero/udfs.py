"""``sz.udf``: any function of numpy arrays as a workflow step, with declared lineage.

A numpy or scipy call the front end does not know, a C extension, a loop: wrap it, say
what each output cell reads, and the trace adds it as one operator::

    @sz.udf(lineage=sz.Window(radius=3))
    def despike(x, threshold=5.0):
        return my_c_filter(x, threshold)

    despike(image, threshold=4.0)        # inside @sz.workflow: one node

Arguments: symbolic arrays, positional or keyword (``f(x, mask=m)``), are the node's inputs
in call order (positional first); every other argument is a constant of the call.

Declared lineage (``lineage=``), laid on the inputs' broadcast shape (numpy's rules):

- ``"elementwise"``: each output cell reads the same cell of every input;
- ``sz.Window(radius=r)``: each output cell reads the box of radius ``r`` around it
  (clipped to the array); tiles carry that halo, so ``fn`` must be a true window function;
- ``sz.Lines(axis=a)``: each output cell reads its whole line along ``a``;
- ``sz.Reduce(axis=a, keepdims=False)``: the output drops (or keeps with length 1) the
  axes ``a`` (None: all); each output cell reads the whole line(s) along them;
- ``"all"``: every output cell reads every input cell (``shape=`` the output's shape when
  it is not input 0's; one shape per output for several);
- ``map_b=`` / ``map_f=``: your own mapping functions, ``(cells, i)`` or ``(cells, i, shapes)``
  (`subzero.udf_operators.MapShapes`: ``shapes.inputs``, ``shapes.output``);
- a tuple of patterns, one per array a function returning a tuple gives;
- ``"infer"``: probe ``fn`` on a sample (``sample=``, or seeded random arrays of the traced
  inputs' shapes and dtypes, at most 24 cells per axis: floats normal, integers in
  ``[0, 4]`` (a 0-d integer is 4), booleans random) with the perturbation oracle (integers
  perturbed within the sample's range), and take the smallest pattern of the family
  (elementwise, windows of radius 1..8, lines along each axis, reductions) that explains
  every change; refused when none does.  The choice is stored labelled as inferred.

0-d values (``np.mean(x)``, the count of ``ndimage.label``) reach the function as numpy
scalars.  `check_lineage` runs the oracle on a udf and returns its report (``.ok``,
``.misses``).  Outside a traced function, a udf is the plain function.
"""

from __future__ import annotations

import hashlib
import itertools
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from subzero.errors import WorkflowError
from subzero.operator import Operator
from subzero.udf_operators import (
    UdfBlackBox, UdfElementwise, UdfLines, UdfMapped, UdfOperator, UdfPattern, UdfReduce, UdfWindow,
    suggest_pattern,
)

if TYPE_CHECKING:
    from subzero.oracle import OracleReport

__all__ = ["udf", "Udf", "Window", "Lines", "Reduce", "check_lineage", "infer_lineage", "UdfWindow", "UdfLines",
           "UdfReduce", "UdfBlackBox", "UdfMapped", "UdfElementwise", "MAX_INFERRED_RADIUS"]

#: the largest window radius ``lineage="infer"`` tries
MAX_INFERRED_RADIUS = 8
_SAMPLE_SIDE = 24   # inference samples: at most this many cells per axis (plus the axis number)
_PROBE_SIDE = 6     # the trace-time probe of a large input's output shape
_INT_HIGH = 4       # sampled integers lie in [0, _INT_HIGH]
_FLOAT_KINDS = ("tiny", "+5sigma", "-5sigma", "spike", "zero")
_PATTERNS = ("lineage='elementwise', sz.Window(radius=r), sz.Lines(axis=a), sz.Reduce(axis=a), 'all', 'infer', "
             "or map_b= and map_f=")


@dataclass(frozen=True)
class Window:
    """Lineage of a window function: the box of ``radius`` cells (an int or one per axis)."""

    radius: int | tuple[int, ...] = 1


@dataclass(frozen=True)
class Lines:
    """Lineage of a line function: the whole line along ``axis``."""

    axis: int = -1


@dataclass(frozen=True)
class Reduce:
    """Lineage of a reduction over ``axis`` (an int, a tuple, or None for every axis): the
    output drops those axes (keeps them with length 1 when ``keepdims``); an output cell
    reads the whole line(s) along them."""

    axis: int | tuple[int, ...] | None = None
    keepdims: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.axis, list):
            object.__setattr__(self, "axis", tuple(self.axis))


def _code(p: Any) -> str:
    """A pattern as the code that declares it."""
    return repr(p) if isinstance(p, str) else f"sz.{p!r}"


def _is_pattern(p: Any) -> bool:
    return (isinstance(p, str) and p in ("elementwise", "all")) or isinstance(p, (Window, Lines, Reduce))


@dataclass(frozen=True)
class _Site:
    """One call of a udf: the function with its constants bound, its inputs' node shapes
    and dtypes, which inputs are 0-d values."""

    call: Callable[..., Any]
    shapes: tuple[tuple[int, ...], ...]
    dtypes: tuple[np.dtype, ...]
    scalars: tuple[bool, ...]

    @property
    def key(self) -> tuple:
        """What inference depends on: shapes, dtypes and the call's constants (arrays by content)."""
        args, kwargs = getattr(self.call, "args", ()), getattr(self.call, "kwargs", {})
        constants = tuple(_constant_key(a) for a in args) + tuple((k, _constant_key(v)) for k, v in kwargs.items())
        return (self.shapes, tuple(d.str for d in self.dtypes), self.scalars, constants)


def _constant_key(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return ("array", value.shape, value.dtype.str, hashlib.sha1(value.tobytes()).hexdigest())
    return repr(value)


# -- the udf ---------------------------------------------------------------------------------------
class Udf:
    """A function with declared lineage (see the module docstring)."""

    def __init__(self, fn: Callable, lineage: Any = None, map_b: Callable | None = None,
                 map_f: Callable | None = None, shape: Sequence[Any] | None = None, sample: Sequence | None = None,
                 name: str | None = None):
        if not callable(fn):
            raise WorkflowError(f"sz.udf: fn must be a function of numpy arrays, got {fn!r}")
        if (map_b is None) != (map_f is None):
            raise WorkflowError("sz.udf: give both map_b and map_f (or neither)")
        if lineage is None and map_b is None:
            raise WorkflowError(f"sz.udf: declare the lineage: {_PATTERNS}")
        if lineage is not None and map_b is not None:
            raise WorkflowError("sz.udf: give lineage= or map_b/map_f, not both")
        if isinstance(lineage, list):
            lineage = tuple(lineage)
        if isinstance(lineage, tuple):
            bad = [p for p in lineage if not _is_pattern(p)]
            if bad or not lineage:
                raise WorkflowError(f"sz.udf: lineage=(...) declares one pattern per output of a function returning "
                                    f"a tuple; {bad[0] if bad else 'an empty tuple'!r} is not one: each is "
                                    "'elementwise', sz.Window(radius=r), sz.Lines(axis=a), sz.Reduce(axis=a) or 'all'")
        elif not (lineage is None or lineage == "infer" or _is_pattern(lineage)):
            raise WorkflowError(f"sz.udf: unknown lineage {lineage!r}; use {_PATTERNS}")
        self.fn, self.lineage, self.map_b, self.map_f = fn, lineage, map_b, map_f
        self.shape, self.sample = shape, sample
        self.name = name or str(getattr(fn, "__name__", "udf"))
        self.inferred: Any = None  # the pattern(s) "infer" chose last (set on a trace or infer_lineage)
        self._inferred: dict[tuple, Any] = {}
        self.__name__ = self.name
        self.__doc__ = getattr(fn, "__doc__", None)

    # -- operators -------------------------------------------------------------------------------
    def _shape(self, pick: int | None) -> Sequence[int] | None:
        """``shape=`` for output ``pick`` (``shape`` may give one shape per output)."""
        shape = self.shape
        if shape is not None and len(shape) and isinstance(shape[0], (tuple, list)):
            if pick is None or pick >= len(shape):
                raise WorkflowError(f"sz.udf {self.name}: shape= gives {len(shape)} shapes, one per output, but the "
                                    "lineage declares a different number of outputs; give one pattern per shape")
            return shape[pick]
        return shape

    def _build(self, site: _Site, pattern: Any, source: str, pick: int | None) -> UdfOperator:
        fn, name, scalars = site.call, self.name, site.scalars
        if self.map_b is not None and self.map_f is not None:  # __init__ takes both or neither
            return UdfMapped(fn, self.map_b, self.map_f, self._shape(pick), name=name, scalars=scalars, pick=pick)
        if pattern == "elementwise":
            return UdfElementwise(fn, name, source, scalars, pick)
        if pattern == "all":
            return UdfBlackBox(fn, self._shape(pick), name, source, scalars, pick)
        if isinstance(pattern, Window):
            return UdfWindow(fn, pattern.radius, name, source, scalars, pick)
        if isinstance(pattern, Lines):
            return UdfLines(fn, pattern.axis, name, source, scalars, pick)
        if isinstance(pattern, Reduce):
            return UdfReduce(fn, pattern.axis, pattern.keepdims, name, source, scalars, pick)
        raise WorkflowError(f"sz.udf {self.name}: unknown lineage {pattern!r}; use {_PATTERNS}")  # pragma: no cover

    def _operators(self, site: _Site, outputs: int | None) -> list[UdfOperator]:
        """One operator per output (``outputs``: how many arrays the function returns, None: one
        array, or not known)."""
        if self.map_b is not None:
            if outputs is not None:
                raise WorkflowError(f"sz.udf {self.name}: the function returns {outputs} arrays; map_b/map_f "
                                    "describe one output: return one array, or declare lineage=(...) per output")
            return [self._build(site, None, "declared", None)]
        lineage, source = self.lineage, "declared"
        if lineage == "infer":
            key = site.key
            if key not in self._inferred:
                self._inferred[key] = _infer(self, site, self._samples(site), cells=48, seed=0)
            lineage, source = self._inferred[key], "inferred"
            self.inferred = lineage
        if isinstance(lineage, tuple):
            if outputs is not None and outputs != len(lineage):
                raise WorkflowError(f"sz.udf {self.name}: lineage declares {len(lineage)} outputs, the function "
                                    f"returns {outputs} arrays; give one pattern per array")
            return [self._build(site, p, source, k) for k, p in enumerate(lineage)]
        if outputs is not None:
            raise WorkflowError(f"sz.udf {self.name}: the function returns a tuple of {outputs} arrays; declare one "
                                f"pattern per output: lineage=({', '.join([_code(lineage)] * outputs)}) (or lineage="
                                "'infer')")
        return [self._build(site, lineage, source, None)]

    def operator(self, n_inputs: int = 1, shapes: Sequence[tuple[int, ...]] | None = None,
                 dtypes: Sequence[Any] | None = None, output: int = 0) -> Operator:
        """The operator this udf stands for on ``n_inputs`` inputs of ``shapes`` (needed by
        ``"infer"`` without ``sample=``) and ``dtypes`` (default float64); ``output``: which
        output of a function returning several."""
        if shapes is None and self.sample is not None:
            shapes = [np.shape(s) for s in self.sample]
            dtypes = dtypes or [np.asarray(s).dtype for s in self.sample]
        if shapes is None:
            if self.lineage == "infer":
                raise WorkflowError("sz.udf(lineage='infer') needs sample arrays (sample=[...]) or the inputs' shapes "
                                    "outside a traced function")
            shapes = [()] * n_inputs
        shapes = [tuple(int(n) for n in s) for s in shapes]
        dtypes = [np.dtype(d) for d in (dtypes or [np.float64] * len(shapes))]
        site = _Site(self.fn, tuple(shapes), tuple(dtypes), (False,) * len(shapes))
        multi = len(self.lineage) if isinstance(self.lineage, tuple) else None
        ops = self._operators(site, multi)
        return ops[output]

    def _samples(self, site: _Site) -> list[np.ndarray]:
        """The arrays inference probes: ``sample=`` (0-d values given as numbers), else seeded
        random arrays of the site's shapes (cut) and dtypes."""
        if self.sample is not None:
            if len(self.sample) != len(site.shapes):
                raise WorkflowError(f"sz.udf {self.name}: sample= has {len(self.sample)} arrays, the call has "
                                    f"{len(site.shapes)} inputs; give one sample per input array, in call order")
            return [np.asarray(s).reshape(shape) if scalar else np.asarray(s)
                    for s, shape, scalar in zip(self.sample, site.shapes, site.scalars)]
        return _sample_arrays(_cut(site.shapes, _SAMPLE_SIDE), site.dtypes, site.scalars)

    # -- calls -----------------------------------------------------------------------------------
    def __call__(self, *args, **kwargs):
        from subzero.trace.symbolic import SymbolicArray

        values = list(args) + list(kwargs.values())
        for v in values:
            items = v.values() if isinstance(v, dict) else v if isinstance(v, (list, tuple)) else ()
            if any(isinstance(item, SymbolicArray) for item in items):
                from subzero.trace.errors import TraceError

                raise TraceError(f"udf {self.name}: an argument is a list/tuple/dict holding symbolic arrays; pass "
                                 "each array as its own argument (f(a, b), or f(x, mask=m)) so it becomes an input")
        # arrays the traced code wrote down (np.ones((3, 3)) in it) are constants of the call, not inputs
        args = tuple(_constant_value(a) for a in args)
        kwargs = {k: _constant_value(v) for k, v in kwargs.items()}
        values = list(args) + list(kwargs.values())
        if any(isinstance(v, SymbolicArray) for v in values):
            return self._trace(args, kwargs)
        return self.fn(*args, **kwargs)

    def _trace(self, args: tuple, kwargs: dict):
        from subzero import operators as ops
        from subzero.trace.building import add_node
        from subzero.trace.calls import ARG, NumpyCall
        from subzero.trace.errors import TraceError
        from subzero.trace.symbolic import SymbolicArray

        def is_sym(v: Any) -> bool:
            return isinstance(v, SymbolicArray)

        syms = [a for a in args if is_sym(a)] + [v for v in kwargs.values() if is_sym(v)]
        call: Callable[..., Any] = self.fn
        if kwargs or len(syms) != len(args):
            call = NumpyCall(self.fn, tuple(ARG if is_sym(a) else a for a in args),
                             {k: ARG if is_sym(v) else v for k, v in kwargs.items()})
        scalars = tuple(s.shape == () for s in syms)
        depth = max(len(s.shape) for s in syms)
        inputs = [add_node(ops.Reshape((1,) * depth), [s], "reshape", dtype=s.dtype)
                  if s.shape == () and depth and len(s.entry.shape) > depth else s for s in syms]
        site = _Site(call, tuple(tuple(s.entry.shape) for s in inputs), tuple(s.dtype for s in syms), scalars)
        probe = _probe(site)
        if probe is not None and probe[0] is not None and _is_pattern(self.lineage):
            raise TraceError(f"udf {self.name}: the function returns a tuple of {probe[0]} arrays; declare one pattern "
                             f"per output: lineage=({', '.join(self._per_output(site, probe))}) (or lineage='infer')")
        try:
            operators = self._operators(site, None if probe is None else probe[0])
        except WorkflowError as exc:
            raise TraceError(str(exc)) from None
        out = []
        for k, op in enumerate(operators):
            if probe is not None:
                _check_shape(self.name, op, site, probe[2], probe[1][k])
            dtype = probe[1][k].dtype if probe is not None else np.result_type(*site.dtypes)
            logical = None
            if isinstance(op, UdfReduce):
                logical = op.logical_shape(np.broadcast_shapes(*site.shapes))
            elif all(scalars) and isinstance(op, (UdfElementwise, UdfPattern)):
                logical = ()
            out.append(add_node(op, inputs, self.name, shape=logical, dtype=dtype))
        several = (probe is not None and probe[0] is not None) or isinstance(self.lineage, tuple)
        return tuple(out) if several or len(out) > 1 else out[0]

    def _per_output(self, site: _Site, probe: tuple) -> list[str]:
        """The declared pattern for each output the probe saw whose shape it fits, else the
        pattern the output's shape calls for, as code."""
        out = []
        for k, got in enumerate(probe[1]):
            op = self._build(site, self.lineage, "declared", k)
            try:
                fits = tuple(op.infer_output_shape(tuple(probe[2])) or ()) == got.shape
            except WorkflowError:
                fits = False
            hint = suggest_pattern(probe[2], got.shape)
            out.append(_code(self.lineage) if fits or not hint.startswith(("sz.", "lineage='all'")) else
                       hint if hint.startswith("sz.") else "'all'")
        return out

    def __repr__(self) -> str:
        return f"<sz.udf {self.name} lineage={self.inferred if self.lineage == 'infer' else self.lineage!r}>"


def udf(fn: Callable | None = None, *, lineage: Any = None, map_b: Callable | None = None,
        map_f: Callable | None = None, shape: Sequence[Any] | None = None, sample: Sequence | None = None,
        name: str | None = None) -> "Udf | Callable[[Callable], Udf]":
    """Wrap ``fn`` with declared lineage; a decorator (``@sz.udf(lineage=...)``) or a call
    (``sz.udf(fn, lineage=...)``).  See the module docstring.

    Examples
    --------
    >>> import numpy as np, subzero as sz
    >>> smooth = sz.udf(lambda x: (np.roll(x, 1) + x + np.roll(x, -1)) / 3, lineage="all")
    >>> smooth(np.arange(3.0)).tolist()
    [1.0, 1.0, 1.0]
    """
    if fn is None:
        return lambda f: Udf(f, lineage, map_b, map_f, shape, sample, name)
    return Udf(fn, lineage, map_b, map_f, shape, sample, name)


# -- samples and the trace-time probe ----------------------------------------------------------------
def _cut(shapes: Sequence[tuple[int, ...]], side: int) -> list[tuple[int, ...]]:
    """``shapes`` cut to at most ``side + k`` cells along broadcast axis ``k`` (distinct
    lengths, so a reduced axis is told from the others), still broadcasting together."""
    b = tuple(np.broadcast_shapes(*shapes))
    cut = [min(n, side + k) for k, n in enumerate(b)]
    return [tuple(1 if n == 1 else cut[len(b) - len(s) + k] for k, n in enumerate(s)) for s in shapes]


def _sample_arrays(shapes: Sequence[tuple[int, ...]], dtypes: Sequence[np.dtype], scalars: Sequence[bool],
                   seed: int = 0) -> list[np.ndarray]:
    """Seeded random arrays of ``shapes`` and ``dtypes``: floats normal, integers in
    ``[0, _INT_HIGH]`` (a 0-d integer, a count, is ``_INT_HIGH``), booleans random."""
    rng = np.random.default_rng(seed)
    out = []
    for shape, dtype, scalar in zip(shapes, dtypes, scalars):
        dtype = np.dtype(dtype)
        a: np.ndarray
        if dtype == bool:
            a = rng.random(shape) < 0.5
        elif dtype.kind in "iu":
            a = np.full(shape, _INT_HIGH) if scalar else rng.integers(0, _INT_HIGH + 1, size=shape)
        elif dtype.kind == "c":
            a = rng.normal(size=shape) + 1j * rng.normal(size=shape)
        else:
            a = rng.normal(size=shape)
        out.append(np.asarray(a).astype(dtype))
    return out


def _raw(site: _Site, arrays: Sequence[np.ndarray]) -> Any:
    """The function on ``arrays`` (0-d values as numpy scalars), numpy's warnings off."""
    args = [np.asarray(a).reshape(())[()] if s else a for a, s in zip(arrays, site.scalars)]
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return site.call(*args)


def _probe(site: _Site) -> tuple[int | None, list[np.ndarray], list[tuple[int, ...]]] | None:
    """``(arrays returned or None for one, outputs, input shapes)`` of the function on a small
    sample of the site's inputs (the real shapes when small), or None when it raises there."""
    shapes = list(site.shapes)
    if int(np.prod(np.broadcast_shapes(*shapes))) > 4096:
        shapes = _cut(shapes, _PROBE_SIDE)
    try:
        got = _raw(site, _sample_arrays(shapes, site.dtypes, site.scalars, seed=1))
    except Exception:  # noqa: BLE001 - a function needing real values: the run checks what it returns
        return None
    if isinstance(got, tuple):
        return len(got), [np.asarray(g) for g in got], shapes
    return None, [np.asarray(got)], shapes


def _check_shape(name: str, op: UdfOperator, site: _Site, shapes: list[tuple[int, ...]], out: np.ndarray) -> None:
    """Refuse a declared pattern whose output shape is not the function's (on the probe)."""
    from subzero.trace.errors import TraceError

    if isinstance(op, (UdfBlackBox, UdfMapped)) and op.shape is not None:
        return
    try:
        expected = op.infer_output_shape(tuple(shapes))
    except WorkflowError:
        return  # the trace reports it on the real shapes
    if expected is None or out.shape == tuple(expected) or (out.ndim == 0 and int(np.prod(expected)) == 1):
        return
    hint = suggest_pattern(shapes, out.shape)
    if hint.startswith("lineage='all'") and list(shapes) != list(site.shapes):
        hint = "lineage='all' with shape= the output's shape"
    raise TraceError(f"udf {name}: declared lineage {op.lineage} gives an output of shape {tuple(expected)} for "
                     f"inputs of shapes {shapes}, but {name} returns shape {out.shape}; declare {hint}")


# -- checking and inferring lineage --------------------------------------------------------------------
def _site_of(u: Udf, samples: Sequence[Any], kwargs: dict | None) -> tuple[_Site, list[np.ndarray]]:
    """The site of calling ``u`` on sample values (arrays in ``kwargs`` are inputs too)."""
    from subzero.trace.calls import ARG, NumpyCall

    kwargs = dict(kwargs or {})
    arrays = [np.asarray(s) for s in samples] + [np.asarray(v) for v in kwargs.values() if isinstance(v, np.ndarray)]
    call: Callable[..., Any] = u.fn
    if kwargs:
        call = NumpyCall(u.fn, (ARG,) * len(samples), {k: ARG if isinstance(v, np.ndarray) else v
                                                       for k, v in kwargs.items()})
    if not arrays:
        raise WorkflowError("check_lineage needs sample arrays, one per input of the udf")
    scalars = tuple(a.ndim == 0 for a in arrays)
    arrays = [a.reshape(1) if s else a for a, s in zip(arrays, scalars)]
    return _Site(call, tuple(a.shape for a in arrays), tuple(a.dtype for a in arrays), scalars), arrays


def check_lineage(u: Udf, *samples: Any, cells: int = 64, seed: int = 0,
                  kwargs: dict | None = None) -> "OracleReport | tuple[OracleReport, ...]":
    """Run the perturbation oracle (`subzero.oracle.check_operator`) on ``u`` over ``samples``
    (one per input, in call order; ``kwargs``: the call's keyword arguments, arrays among
    them being inputs after the positional ones).

    Returns the `subzero.oracle.OracleReport` (a tuple of them, one per output, for a
    function returning several arrays): ``.ok`` is True when no perturbation changed an
    output cell outside the declared lineage; ``.misses`` lists the first that did.
    """
    from subzero.oracle import check_operator

    if not isinstance(u, Udf):
        raise WorkflowError(f"check_lineage expects an sz.udf, got {type(u).__name__}")
    site, arrays = _site_of(u, samples, kwargs)
    got = _raw(site, arrays)
    outputs = len(got) if isinstance(got, tuple) else None
    reports = [check_operator(op, arrays, cells=cells, backward=min(cells, 16), seed=seed)
               for op in u._operators(site, outputs)]
    return tuple(reports) if outputs is not None or len(reports) > 1 else reports[0]


def infer_lineage(u: Udf, *samples: Any, cells: int = 48, seed: int = 0, kwargs: dict | None = None) -> Any:
    """Find the smallest pattern of the family that explains every perturbation of ``samples``
    (a tuple of patterns for a function returning several arrays); store it on ``u``
    (``u.inferred``) and return it.  Raises `subzero.WorkflowError` when none fits, or when
    the function raises on the samples."""
    site, arrays = _site_of(u, samples, kwargs)
    u.inferred = u._inferred[site.key] = _infer(u, site, arrays, cells=cells, seed=seed)
    return u.inferred


def _describe(arrays: Sequence[np.ndarray]) -> str:
    parts = []
    for a in arrays:
        rng = f" in [{a.min()}, {a.max()}]" if a.size and a.dtype.kind in "iub" else ""
        parts.append(f"{a.dtype}{list(a.shape)}{rng}")
    return ", ".join(parts)


def _fix(name: str) -> str:
    return (f"declare the lineage instead (sz.udf({name}, lineage='elementwise' | sz.Window(radius=r) | "
            "sz.Lines(axis=a) | sz.Reduce(axis=a) | 'all')), or give sample=[...] arrays it accepts, one per input")


def _perturbed(x: np.ndarray, index: int):
    """``(description, copy of x with flat cell index changed)``: integers within the
    sample's range, booleans flipped, floats by the oracle's kinds (no NaN)."""
    from subzero.oracle import perturbations

    if x.dtype.kind in "iu":
        flat = x.reshape(-1)
        old, lo, hi = int(flat[index]), int(flat.min()), int(flat.max())
        values = {lo, hi, old + 1 if old < hi else old - 1} - {old} if lo < hi else {old + 1}
        for new in sorted(values):
            y = x.copy()
            y.reshape(-1)[index] = new
            yield f"{old} -> {new}", y
        return
    for kind, y in perturbations(x, index, _FLOAT_KINDS):
        yield kind, y


def _infer(u: Udf, site: _Site, arrays: list[np.ndarray], cells: int, seed: int) -> Any:
    """The smallest pattern explaining every perturbation of ``arrays`` (see `infer_lineage`)."""
    from subzero.oracle import _changed

    sample_site = _Site(site.call, tuple(a.shape for a in arrays), tuple(a.dtype for a in arrays), site.scalars)
    try:
        got = _raw(sample_site, arrays)
    except Exception as exc:  # noqa: BLE001 - the user's function: say what inference fed it
        raise WorkflowError(f"sz.udf {u.name}: lineage='infer' called {u.name} on sample inputs ({_describe(arrays)}) "
                            f"and it raised {type(exc).__name__}: {exc}; {_fix(u.name)}") from None
    bases = [np.asarray(g) for g in got] if isinstance(got, tuple) else [np.asarray(got)]
    # per output: (input, input cell, the output cells changing it changed)
    changed: list[list[tuple[int, np.ndarray, np.ndarray]]] = [[] for _ in bases]
    rng = np.random.default_rng(seed)
    for i, x in enumerate(arrays):
        for index in rng.choice(x.size, size=min(cells, x.size), replace=False):
            masks = [np.zeros(b.shape, bool) for b in bases]
            for what, y in _perturbed(x, int(index)):
                try:
                    now = _raw(sample_site, [y if k == i else a for k, a in enumerate(arrays)])
                except Exception as exc:  # noqa: BLE001 - the user's function: say what inference tried
                    cell = tuple(int(c) for c in np.unravel_index(int(index), x.shape))
                    raise WorkflowError(
                        f"sz.udf {u.name}: lineage='infer' changed cell {cell} of input {i} ({what}) on sample inputs "
                        f"({_describe(arrays)}) and {u.name} raised {type(exc).__name__}: {exc}; "
                        f"{_fix(u.name)}") from None
                outs = list(now) if isinstance(now, tuple) else [now]
                for mask, base, new in zip(masks, bases, outs):
                    mask |= _changed(base, np.asarray(new))
            where = np.array(np.unravel_index(int(index), x.shape)).reshape(1, -1)
            for k, mask in enumerate(masks):
                changed[k].append((i, where, np.argwhere(mask)))
    exact = sample_site.shapes == site.shapes
    found = [_fit(u, sample_site, base, probes, k if isinstance(got, tuple) else None, exact)
             for k, (base, probes) in enumerate(zip(bases, changed))]
    return tuple(found) if isinstance(got, tuple) else found[0]


def _candidates(ndim: int) -> list:
    out: list = ["elementwise"]
    out += [Window(r) for r in range(1, MAX_INFERRED_RADIUS + 1)]
    out += [Lines(a) for a in range(ndim)]
    for k in range(1, ndim + 1):
        for axes in itertools.combinations(range(ndim), k):
            axis = None if k == ndim else axes[0] if k == 1 else axes
            out += [Reduce(axis), Reduce(axis, keepdims=True)]
    return out


def _fit(u: Udf, site: _Site, base: np.ndarray, probes: list, pick: int | None, exact: bool) -> Any:
    ndim = len(np.broadcast_shapes(*site.shapes))
    for candidate in _candidates(ndim):
        op = u._build(site, candidate, "inferred", pick)
        try:
            bound = op.bound(site.shapes, op.infer_output_shape(site.shapes))
        except WorkflowError:
            continue
        out = tuple(bound.output_shape or ())
        if base.shape != out and not (base.ndim == 0 and int(np.prod(out)) == 1):
            continue
        if all(_covers(bound.map_f(cell, i), np.zeros((len(hit), len(out)), np.int64) if base.ndim == 0 else hit, out)
               for i, cell, hit in probes):
            return candidate
    shape = ""
    if base.shape != site.shapes[0]:
        shape = f", shape={base.shape}" if exact else ", shape=<the output's shape>"
    raise WorkflowError(f"sz.udf {u.name}: lineage='infer' found no pattern (elementwise, a window of radius <= "
                        f"{MAX_INFERRED_RADIUS}, whole lines, a reduction) that explains how the output changes when "
                        f"one input cell does; declare it: lineage='all'{shape} (every cell), or map_b=/map_f=")


def _covers(lineage: np.ndarray, changed: np.ndarray, shape: tuple[int, ...]) -> bool:
    if not len(changed):
        return True
    if not shape:
        return len(lineage) > 0
    have = np.ravel_multi_index(tuple(np.asarray(lineage, np.int64).reshape(-1, len(shape)).T), shape)
    want = np.ravel_multi_index(tuple(changed.reshape(-1, len(shape)).T), shape)
    return bool(np.isin(want, have).all())


def _constant_value(v: Any) -> Any:
    """A captured constant of a trace (an array the code wrote down, not derived from an input) as
    its numpy values; anything else as it is."""
    from subzero.trace.symbolic import SymbolicArray

    if isinstance(v, SymbolicArray) and v.entry.op is None and v.entry.constant:
        return v.values()
    return v
