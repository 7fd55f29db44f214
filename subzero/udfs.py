"""``sz.udf``: any function of numpy arrays as a workflow step, with declared lineage.

A numpy or scipy call the front end does not know, a C extension, a loop: wrap it, say
what each output cell reads, and the trace adds it as one operator::

    @sz.udf(lineage=sz.Window(radius=3))
    def despike(x):
        return my_c_filter(x)

Declared lineage (``lineage=``):

- ``"elementwise"``: each output cell reads the same cell of every input (broadcasting);
- ``sz.Window(radius=r)``: each output cell reads the box of radius ``r`` around it in
  input 0 (clipped to the array); tiles carry that halo, so ``fn`` must be a true window
  function (its value at a cell depends on that window only, whatever the array's size);
- ``sz.Lines(axis=a)``: each output cell reads its whole line along ``a``;
- ``"all"``: every output cell reads every input cell (BlackBox);
- ``map_b=`` / ``map_f=``: your own mapping functions (``(N, ndim)`` coordinates in, the
  union of their lineage out), as an operator class would give them;
- ``"infer"``: probe ``fn`` on a sample (``sample=``, or seeded random arrays of the traced
  inputs' shapes, cut to at most 24 cells per axis) with the perturbation oracle, and take
  the smallest pattern of the family (elementwise, windows of radius 1..8, lines along
  each axis) that explains every change; refused when none does.  The choice is stored
  labelled as inferred (the node's parameters say ``lineage_source='inferred'``, which
  ``subzero info`` and ``explain`` show).

`check_lineage` runs the oracle on a declared udf and returns its report (``.ok``,
``.misses``).  Outside a traced function, a udf is the plain function.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from subzero.errors import WorkflowError
from subzero.modes import Mode
from subzero.operator import Operator
from subzero.operators import Apply
from subzero.operators._args import per_axis
from subzero.operators._kernels import box_offsets
from subzero.operators.neighbourhood import StencilOperator
from subzero.operators.sorting import LineOperator
from subzero.tiling import Shape

if TYPE_CHECKING:  # pragma: no cover
    from subzero.context import Context

__all__ = ["udf", "Udf", "Window", "Lines", "check_lineage", "infer_lineage", "UdfWindow", "UdfLines",
           "UdfBlackBox", "UdfMapped", "MAX_INFERRED_RADIUS"]

#: the largest window radius ``lineage="infer"`` tries
MAX_INFERRED_RADIUS = 8
_SAMPLE_SIDE = 24


@dataclass(frozen=True)
class Window:
    """Lineage of a window function: the box of ``radius`` cells (an int or one per axis)."""

    radius: int | tuple[int, ...] = 1


@dataclass(frozen=True)
class Lines:
    """Lineage of a line function: the whole line along ``axis``."""

    axis: int = -1


# -- the operators a udf becomes ------------------------------------------------------------------
class _UdfMixin:
    """What every udf operator records: its function, name and how its lineage was chosen."""

    fn: Callable[..., Any]
    udf_name: str
    lineage: str
    lineage_source: str

    def _set(self, fn: Callable, lineage: str, source: str) -> None:
        self.fn, self.udf_name = fn, str(getattr(fn, "__name__", "udf"))
        self.lineage, self.lineage_source = lineage, source

    def run(self, ctx: Context, *inputs: np.ndarray) -> np.ndarray:
        """The user's function on the inputs (one for a window or a line udf: `Udf.operator` checks)."""
        return np.asarray(self.fn(*inputs))


class UdfWindow(_UdfMixin, StencilOperator):
    """A udf whose output cell reads the box of ``radius`` around it in input 0."""

    def __init__(self, fn: Callable, radius, source: str = "declared"):
        super().__init__("nearest")
        self.radius_ = tuple(radius) if isinstance(radius, (tuple, list)) else int(radius)
        self._set(fn, f"window(radius={self.radius_})", source)

    def stencil(self, ndim: int) -> np.ndarray:
        return box_offsets(per_axis(self.radius_, ndim, "sz.Window", "radius", minimum=0))


class UdfLines(_UdfMixin, LineOperator):
    """A udf whose output line along ``axis`` reads the input line."""

    def __init__(self, fn: Callable, axis: int = -1, source: str = "declared"):
        super().__init__(axis)
        self._set(fn, f"lines(axis={axis})", source)


class UdfBlackBox(_UdfMixin, Operator):
    """A udf whose every output cell reads every input cell; ``shape`` is its output shape
    (default: input 0's)."""

    entire_array_safe = True

    def __init__(self, fn: Callable, shape: Sequence[int] | None = None, source: str = "declared"):
        self.shape = None if shape is None else tuple(int(n) for n in shape)
        self._set(fn, "all", source)

    def infer_output_shape(self, input_shapes: tuple[Shape, ...]) -> Shape | None:
        return self.shape if self.shape is not None else tuple(input_shapes[0])


class UdfMapped(_UdfMixin, Operator):
    """A udf with the user's mapping functions ``map_b(cells, i)`` / ``map_f(cells, i)``."""

    def __init__(self, fn: Callable, map_b: Callable, map_f: Callable, shape: Sequence[int] | None = None):
        if not callable(map_b) or not callable(map_f):
            raise WorkflowError("sz.udf: map_b and map_f must both be given, as functions (cells, i) -> cells")
        self.user_map_b, self.user_map_f = map_b, map_f
        self.shape = None if shape is None else tuple(int(n) for n in shape)
        self._set(fn, "map_b/map_f", "declared")

    def supported_modes(self) -> set[Mode]:
        return {Mode.MAP}

    def infer_output_shape(self, input_shapes: tuple[Shape, ...]) -> Shape | None:
        return self.shape if self.shape is not None else tuple(input_shapes[0])

    def map_b(self, cells: np.ndarray, i: int) -> np.ndarray:
        return np.asarray(self.user_map_b(np.asarray(cells, np.int64), i), np.int64)

    def map_f(self, cells: np.ndarray, i: int) -> np.ndarray:
        return np.asarray(self.user_map_f(np.asarray(cells, np.int64), i), np.int64)


class _UdfElementwise(_UdfMixin, Apply):
    """A udf computing each output cell from the same cell of its inputs."""

    fn: Callable[..., Any]  # always set, where ElementwiseOperator's may be None
    run = Apply.run  # numpy's broadcasting, not the mixin's plain call

    def __init__(self, fn: Callable, nin: int, source: str = "declared"):
        Apply.__init__(self, fn, nin)
        self._set(fn, "elementwise", source)


# -- the udf ---------------------------------------------------------------------------------------
class Udf:
    """A function with declared lineage (see the module docstring)."""

    def __init__(self, fn: Callable, lineage: Any = None, map_b: Callable | None = None,
                 map_f: Callable | None = None, shape: Sequence[int] | None = None, sample: Sequence | None = None,
                 name: str | None = None):
        if not callable(fn):
            raise WorkflowError(f"sz.udf: fn must be a function of numpy arrays, got {fn!r}")
        if (map_b is None) != (map_f is None):
            raise WorkflowError("sz.udf: give both map_b and map_f (or neither)")
        if lineage is None and map_b is None:
            raise WorkflowError("sz.udf: declare the lineage: lineage='elementwise' | sz.Window(radius=r) | "
                                "sz.Lines(axis=a) | 'all' | 'infer', or map_b= and map_f=")
        if lineage is not None and map_b is not None:
            raise WorkflowError("sz.udf: give lineage= or map_b/map_f, not both")
        if not (lineage is None or lineage in ("elementwise", "all", "infer") or isinstance(lineage, (Window, Lines))):
            raise WorkflowError(f"sz.udf: unknown lineage {lineage!r}; use 'elementwise', sz.Window(radius=r), "
                                "sz.Lines(axis=a), 'all', 'infer', or map_b= and map_f=")
        self.fn, self.lineage, self.map_b, self.map_f = fn, lineage, map_b, map_f
        self.shape, self.sample = shape, sample
        self.name = name or str(getattr(fn, "__name__", "udf"))
        self.inferred: Any = None  # the pattern "infer" chose (set on first trace or infer_lineage)
        self.__name__ = self.name
        self.__doc__ = getattr(fn, "__doc__", None)

    def operator(self, n_inputs: int = 1, shapes: Sequence[tuple[int, ...]] | None = None) -> Operator:
        """The operator this udf stands for (``shapes``: the inputs', for ``"infer"``)."""
        lineage, source = self.lineage, "declared"
        if lineage == "infer":
            if self.inferred is None:
                infer_lineage(self, *(self.sample or _random_sample(shapes)))
            lineage, source = self.inferred, "inferred"
        if self.map_b is not None and self.map_f is not None:  # __init__ takes both or neither
            return UdfMapped(self.fn, self.map_b, self.map_f, self.shape)
        if lineage == "elementwise":
            return _UdfElementwise(self.fn, n_inputs, source)
        if lineage == "all":
            return UdfBlackBox(self.fn, self.shape, source)
        if n_inputs != 1:
            raise WorkflowError(f"sz.udf {self.name}: {lineage} lineage takes one input array, got {n_inputs}")
        if isinstance(lineage, Window):
            return UdfWindow(self.fn, lineage.radius, source)
        return UdfLines(self.fn, lineage.axis, source)

    def __call__(self, *arrays, **kwargs):
        from subzero.trace.symbolic import SymbolicArray

        if not any(isinstance(a, SymbolicArray) for a in arrays):
            return self.fn(*arrays, **kwargs)
        if kwargs or not all(isinstance(a, SymbolicArray) for a in arrays):
            from subzero.trace.errors import TraceError

            raise TraceError(f"udf {self.name}: pass only the symbolic arrays (bind constants with "
                             "functools.partial or a closure before sz.udf)")
        from subzero.trace.building import add_node

        op = self.operator(len(arrays), [a.shape for a in arrays])
        dtype = _probe_dtype(self.fn, arrays)
        return add_node(op, list(arrays), self.name, dtype=dtype)

    def __repr__(self) -> str:
        return f"<sz.udf {self.name} lineage={self.inferred if self.lineage == 'infer' else self.lineage!r}>"


def udf(fn: Callable | None = None, *, lineage: Any = None, map_b: Callable | None = None,
        map_f: Callable | None = None, shape: Sequence[int] | None = None, sample: Sequence | None = None,
        name: str | None = None):
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


# -- checking and inferring lineage --------------------------------------------------------------------
def check_lineage(u: Udf, *samples: np.ndarray, cells: int = 64, seed: int = 0):
    """Run the perturbation oracle (`subzero.oracle.check_operator`) on ``u`` over ``samples``.

    Returns the `subzero.oracle.OracleReport`: ``.ok`` is True when no perturbation changed
    an output cell outside the declared lineage; ``.misses`` lists the first that did.
    """
    from subzero.oracle import check_operator

    if not isinstance(u, Udf):
        raise WorkflowError(f"check_lineage expects an sz.udf, got {type(u).__name__}")
    arrays = [np.asarray(s) for s in samples]
    if not arrays:
        raise WorkflowError("check_lineage needs sample arrays, one per input of the udf")
    return check_operator(u.operator(len(arrays), [a.shape for a in arrays]), arrays, cells=cells,
                          backward=min(cells, 16), seed=seed)


def _candidates(ndim: int, n_inputs: int) -> list:
    out: list = ["elementwise"]
    if n_inputs == 1:
        out += [Window(r) for r in range(1, MAX_INFERRED_RADIUS + 1)]
        out += [Lines(a) for a in range(ndim)]
    return out


def infer_lineage(u: Udf, *samples: np.ndarray, cells: int = 48, seed: int = 0):
    """Find the smallest pattern of the family that explains every perturbation of ``samples``;
    store it on ``u`` (``u.inferred``) and return it.  Raises `subzero.WorkflowError` when none fits."""
    from subzero.oracle import KINDS, _changed, _bound, perturbations

    arrays = [np.asarray(s) for s in samples]
    with np.errstate(all="ignore"):
        base = np.asarray(u.fn(*arrays))
    probes: list[tuple[int, np.ndarray, np.ndarray]] = []  # (input, input cell, changed output cells)
    rng = np.random.default_rng(seed)
    for i, x in enumerate(arrays):
        picks = rng.choice(x.size, size=min(cells, x.size), replace=False)
        for index in picks:
            changed = np.zeros(base.shape, bool)
            for _, y in perturbations(x, int(index), KINDS):
                now = [y if k == i else a for k, a in enumerate(arrays)]
                try:
                    with np.errstate(all="ignore"):
                        out = np.asarray(u.fn(*now))
                except Exception:  # noqa: BLE001 - a refused value changes nothing
                    continue
                changed |= _changed(base, out)
            cell = np.array(np.unravel_index(int(index), x.shape)).reshape(1, -1)
            probes.append((i, cell, np.argwhere(changed)))
    for candidate in _candidates(base.ndim, len(arrays)):
        trial = Udf(u.fn, candidate)
        try:
            op = _bound(trial.operator(len(arrays)), arrays)
        except WorkflowError:
            continue
        if op.output_shape is None or tuple(op.output_shape) != base.shape:
            continue
        if all(_covers(op.map_f(cell, i), changed) for i, cell, changed in probes):
            u.inferred = candidate
            return candidate
    raise WorkflowError(f"sz.udf {u.name}: lineage='infer' found no pattern (elementwise, a window of radius <= "
                        f"{MAX_INFERRED_RADIUS}, whole lines) that explains how the output changes when one input "
                        "cell does; declare it: lineage='all' (every cell), or map_b=/map_f=")


def _covers(lineage: np.ndarray, changed: np.ndarray) -> bool:
    if not len(changed):
        return True
    have = {tuple(c) for c in np.asarray(lineage, np.int64).tolist()}
    return all(tuple(c) in have for c in changed.tolist())


def _random_sample(shapes: Sequence[tuple[int, ...]] | None) -> list[np.ndarray]:
    if not shapes:
        raise WorkflowError("sz.udf(lineage='infer') needs sample arrays (sample=...) outside a traced function")
    rng = np.random.default_rng(0)
    return [rng.normal(size=tuple(min(n, _SAMPLE_SIDE) for n in s)) for s in shapes]


def _probe_dtype(fn: Callable, arrays) -> np.dtype:
    """The dtype ``fn`` returns for inputs of these dtypes (called on small arrays)."""
    try:
        with np.errstate(all="ignore"):
            small = [np.ones(tuple(min(n, 4) for n in a.shape), a.dtype) for a in arrays]
            return np.asarray(fn(*small)).dtype
    except Exception:  # noqa: BLE001 - a function that needs real shapes: the inputs' type
        return np.result_type(*[a.dtype for a in arrays])
