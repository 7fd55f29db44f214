"""The operator base class: what a workflow step implements (SubZero Table I).

An operator that overrides nothing is all-to-all: every output cell depends on every
input cell, and its only mode is ``BLACKBOX``.  An operator exposes cheaper lineage
by overriding `supported_modes` and the mapping functions.

Mapping functions are vectorized: they take ``(N, ndim)`` int64 coordinates and return
the *union* of the lineage of those cells.  The ``*_pairs`` forms return lineage per
cell (``owner[k]`` is the row of the query cell that ``coords[k]`` belongs to); the
base class derives them by calling the union form once per cell, so operators on a
hot path override them with vectorized versions.
"""

from __future__ import annotations

import copy
import functools
import inspect
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from subzero.errors import LineageError
from subzero.modes import Mode
from subzero.tiling import Box, Tiling, Whole

if TYPE_CHECKING:  # pragma: no cover
    from subzero.context import Context

__all__ = ["Operator"]

Shape = tuple[int, ...]


class Operator:
    """Base class of every workflow operator.

    Class attributes
    ----------------
    tiling : Tiling or None
        How the operator splits into tasks; None runs one task on whole arrays.
    entire_array_safe : bool
        True when the lineage of an entire output (input) array is the entire input
        (output) array, so a full frontier can skip the lookup (SubZero VI-C).
    reads_only : bool
        True when ``run`` never writes into the input blocks it is given: a run holding its
        inputs in memory then hands it read-only views of them instead of copies (False, the
        default: each tile gets its own copy, which it may change).
    fills_out : bool
        True when `run_into` computes ``run``'s values into an array it is given (numpy's own
        elementwise ufuncs, which take ``out=``): a run then evaluates it into memory it reuses
        (a fused stage's scratch buffer, or the held output array itself) instead of a new array.

    Examples
    --------
    >>> class Transpose(Operator):
    ...     def supported_modes(self):
    ...         return {Mode.MAP}
    ...     def run(self, ctx, x):
    ...         return x.T
    ...     def map_b(self, cells, i):
    ...         return cells[:, ::-1]
    ...     def map_f(self, cells, i):
    ...         return cells[:, ::-1]
    """

    tiling: Tiling | None = None
    entire_array_safe: bool = False
    reads_only: bool = False
    fills_out: bool = False

    #: numpy's floating-point error handling to run under (``np.errstate`` keywords), or None for
    #: numpy's defaults: a traced step keeps the ``np.errstate`` its code was under
    errstate: dict[str, str] | None = None

    #: set only by `bound` (a copy per node and run), never on a shared operator
    input_shapes: tuple[Shape, ...] = ()
    output_shape: Shape | None = None

    def bound(self, input_shapes: "Sequence[Sequence[int]]", output_shape: "Sequence[int] | None") -> "Operator":
        """A shallow copy of this operator with ``input_shapes`` and ``output_shape`` (None:
        only running tells) set: the one place an operator's shapes are assigned."""
        op = copy.copy(self)
        op.input_shapes = tuple(tuple(int(n) for n in s) for s in input_shapes)
        op.output_shape = None if output_shape is None else tuple(int(n) for n in output_shape)
        return op

    # -- what the operator computes -------------------------------------------------
    def run(self, ctx: "Context", *inputs: np.ndarray) -> np.ndarray:
        """Compute the output from the inputs, writing lineage for ``ctx.modes``."""
        raise NotImplementedError(f"{type(self).__name__} must implement run(ctx, *inputs)")

    def run_into(self, ctx: "Context", out: np.ndarray, *inputs: np.ndarray) -> np.ndarray:
        """``run``'s values written into ``out`` (an array of the output's shape and of the dtype
        ``run`` returns, which may share memory with an input: numpy's ufuncs handle that as if
        the inputs were copied); returns ``out``.  Only for operators that set `fills_out`."""
        raise NotImplementedError(f"{type(self).__name__} does not compute into a given array (fills_out is False)")

    def supported_modes(self) -> set[Mode]:
        """The lineage modes this operator can produce (default: BLACKBOX, all-to-all)."""
        return {Mode.BLACKBOX}

    def infer_output_shape(self, input_shapes: tuple[Shape, ...]) -> Shape | None:
        """The output shape for these input shapes, or None if only running tells.

        Tiled operators must answer.  Raise `subzero.WorkflowError` for shapes the
        operator cannot take.
        """
        return None

    def params(self) -> dict[str, Any]:
        """The operator's arguments, recorded in the run's catalog."""
        return {
            k: (v.tolist() if isinstance(v, np.ndarray) else v)
            for k, v in vars(self).items()
            if not k.startswith("_") and k not in ("input_shapes", "output_shape")
            and isinstance(v, (int, float, str, bool, tuple, list, type(None), np.ndarray))
        }

    @property
    def n_inputs(self) -> int | None:
        """Number of inputs ``run`` takes, or None for ``*inputs``."""
        return _run_arity(type(self).run)

    @property
    def all_to_all(self) -> bool:
        """True when the operator exposes no lineage of its own."""
        return not (self.supported_modes() - {Mode.BLACKBOX})

    def effective_tiling(self) -> Tiling:
        """The operator's tiling, or `Whole` (one task on whole arrays) when it declares none."""
        return self.tiling if self.tiling is not None else Whole()

    # -- operators that need the whole array before their tiles run (two passes) -----------
    def prepare(self, ctx: "Context", *inputs: np.ndarray) -> Any:
        """Optional first pass over each tile, before any tile runs: return a small summary.

        Operators whose tiles need something global (connected components crossing
        tiles) override `prepare` and `combine`, as dask reductions split into a chunk
        step and an aggregate: every tile's summary is sent to the driver, `combine` keeps
        what ``run`` needs on the operator (it travels with it to the tasks, and is stored
        with it for re-execution), then the tiles run.  ``ctx`` has the tile's boxes and
        ``ctx.read_input``; it records no lineage.
        """
        return None

    def combine(self, summaries: list) -> None:
        """Called once, in the driver, with every tile's `prepare` summary (in tile order)."""

    @property
    def two_pass(self) -> bool:
        """True when the operator overrides `prepare` (it runs in two passes)."""
        return type(self).prepare is not Operator.prepare

    def lineage_box(self, out_box: Box, i: int) -> Box:
        """The box of input ``i`` holding the lineage of the cells of ``out_box`` (default: the
        box the tiling reads).  An operator that reads beyond its tile (``ctx.read_input``) says
        how far; queries use it to find the tiles an input cell may reach."""
        return self.effective_tiling().input_box(self, out_box, i)

    # -- mapping functions (MAP, COMP default) -----------------------------------
    def map_b(self, cells: np.ndarray, i: int) -> np.ndarray:
        """Input-``i`` coordinates the output ``cells`` depend on (union), ``(M, ndim_i)``."""
        raise NotImplementedError(f"{type(self).__name__} has no backward mapping function")

    def map_f(self, cells: np.ndarray, i: int) -> np.ndarray:
        """Output coordinates that depend on input-``i`` ``cells`` (union)."""
        raise NotImplementedError(f"{type(self).__name__} has no forward mapping function")

    def map_p(self, cells: np.ndarray, payload: bytes, i: int) -> np.ndarray:
        """Input-``i`` coordinates the output ``cells`` (sharing ``payload``) depend on."""
        raise NotImplementedError(f"{type(self).__name__} has no payload function map_p")

    def map_p_envelope(self, payloads: "list[bytes]", i: int,
                       cells: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The bounding box of each payload's input-``i`` lineage (for an index over payloads).

        Parameters
        ----------
        payloads : list of bytes
            ``P`` payloads, as stored.
        i : int
            The input.
        cells : sequence of arrays or array, optional
            The out cells of the pair carrying each payload: one ``(N_k, ndim_out)`` array
            per payload, or a ``(P, ndim_out)`` array of one cell each (PayOne entries).

        Returns
        -------
        lo, hi : (P, ndim_i) int64
            Half-open boxes: every cell of ``map_p(cells[k], payloads[k], i)`` lies in
            ``[lo[k], hi[k])``.  A box may be larger than the lineage (an index only
            pre-filters), never smaller; an empty lineage gets ``lo == hi``.

        The default calls `map_p` once per payload, so it needs ``cells`` (payload lineage
        may depend on the out cells) and costs a Python call per payload; an operator whose
        payloads say their extent overrides it vectorized (`subzero.operators.Label` reads
        its payloads' headers in one join and one gather, and needs ``cells`` only for the
        empty "the cell itself" payload).
        """
        ndim = len(self.input_shapes[i])
        if cells is None:
            raise LineageError(f"{type(self).__name__}.map_p_envelope needs the pairs' out cells (cells=) to call "
                               "map_p; pass them, or override map_p_envelope to read the payloads alone")
        if len(cells) != len(payloads):
            raise LineageError(f"{type(self).__name__}.map_p_envelope got {len(cells)} cell arrays for "
                               f"{len(payloads)} payloads; give one per payload")
        out_ndim = len(self.output_shape) if self.output_shape is not None else ndim
        lo, hi = np.zeros((len(payloads), ndim), np.int64), np.zeros((len(payloads), ndim), np.int64)
        for k, payload in enumerate(payloads):
            own = np.asarray(cells[k], np.int64).reshape(-1, out_ndim)
            got = np.asarray(self.map_p(own, payload, i), np.int64).reshape(-1, ndim)
            if len(got):
                lo[k], hi[k] = got.min(axis=0), got.max(axis=0) + 1
        return lo, hi

    def map_b_mask(self, mask: np.ndarray, i: int) -> np.ndarray | None:
        """Optional mask form of `map_b`: a boolean mask over input ``i``, or None."""
        return None

    def map_f_mask(self, mask: np.ndarray, i: int) -> np.ndarray | None:
        """Optional mask form of `map_f`: a boolean mask over the output, or None."""
        return None

    def map_b_boxes(self, lo: np.ndarray, hi: np.ndarray, i: int) -> tuple[np.ndarray, np.ndarray] | None:
        """Optional box form of `map_b`: half-open output boxes ``(lo, hi)`` (``(N, ndim)``
        each) to input-``i`` boxes covering exactly their lineage, or None.  Queries given
        a box keep it a box through operators that have this form (a stencil grows it by
        its halo), so their cost does not grow with the box."""
        return None

    def map_f_boxes(self, lo: np.ndarray, hi: np.ndarray, i: int) -> tuple[np.ndarray, np.ndarray] | None:
        """Optional box form of `map_f`: input-``i`` boxes to output boxes, or None."""
        return None

    def map_b_pairs(self, cells: np.ndarray, i: int) -> tuple[np.ndarray, np.ndarray]:
        """Per-cell backward lineage: ``(owner, coords)`` with ``owner`` indexing ``cells``."""
        return _per_cell(lambda c: self.map_b(c, i), cells)

    def map_p_pairs(self, cells: np.ndarray, payload: bytes, i: int) -> tuple[np.ndarray, np.ndarray]:
        """Per-cell payload lineage: ``(owner, coords)`` with ``owner`` indexing ``cells``."""
        return _per_cell(lambda c: self.map_p(c, payload, i), cells)

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.params().items())
        return f"{type(self).__name__}({args})"


def _per_cell(fn, cells: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    owners, parts = [], []
    for k in range(len(cells)):
        got = np.asarray(fn(cells[k : k + 1]), dtype=np.int64)
        owners.append(np.full(len(got), k, dtype=np.int64))
        parts.append(got)
    if not parts:
        return np.empty(0, np.int64), np.empty((0, cells.shape[1] if cells.ndim == 2 else 0), np.int64)
    return np.concatenate(owners), np.concatenate(parts)


@functools.lru_cache(maxsize=None)
def _run_arity(run: Any) -> int | None:
    """`Operator.n_inputs` of a class's ``run`` (read once per class: a traced workflow makes
    hundreds of operators of a few classes)."""
    params = list(inspect.signature(run).parameters.values())[2:]  # self, ctx
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return None
    return sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty for p in params)
