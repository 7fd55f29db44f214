"""Labelled measurements (scipy.ndimage's ``sum_labels``, ``mean``, ``maximum``, ...): one
value per requested label, computed by scipy itself.

The cells a label's value reads are decided by the label array, so no mapping function
can say them: `LabeledStatistic` writes ``FULL`` lineage (region pairs) and ``PAY``
lineage (each label's cells as bounding box + bitmask, `encode_region`) and runs on whole
arrays.

Lineage (``lineage``):

- ``"dependence"`` (default): the value of label ``k`` depends on the cells of ``input``
  where ``labels == k`` (for ``index=None``: ``labels > 0``) and on *every* cell of
  ``labels`` (any label cell set to ``k`` joins the label and changes its value).  The
  perturbation oracle holds it to that.
- ``"members"``: the provenance reading: the label's cells in both arrays.  It is what
  ``subzero.ndimage.label``'s ``"component"`` reading composes with (a label traced back to
  its component and ring); the oracle does not hold it to dependence.

scipy's median of a label with no cell reads another label's value (a quirk of its sorted
search), so for such a label the lineage is every cell of both arrays: sound, and coarse
only where scipy's value is.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from subzero.context import Context
from subzero.errors import WorkflowError
from subzero.lazy import LazyModule
from subzero.modes import Mode
from subzero.operator import Operator
from subzero.operators._args import check_choice
from subzero.operators._kernels import (decode_region, encode_region, encode_regions, group_boxes, region_envelopes,
                                       repeat_pairs)
from subzero.tiling import Shape

ndimage = LazyModule("scipy.ndimage")  # imported on first use

__all__ = ["LabeledStatistic", "STATISTICS", "MEASURE_LINEAGES"]

#: the scipy.ndimage measurements `LabeledStatistic` computes: name -> values per label are
#: scalars (False) or one coordinate per axis (True)
STATISTICS: dict[str, bool] = {
    "sum_labels": False, "mean": False, "maximum": False, "minimum": False, "variance": False,
    "standard_deviation": False, "median": False, "labeled_comprehension": False,
    "center_of_mass": True, "maximum_position": True, "minimum_position": True,
}
#: the readings of a measurement's lineage on the label array
MEASURE_LINEAGES = ("dependence", "members")


def _all_cells(shape: tuple[int, ...]) -> np.ndarray:
    """Every cell of ``shape`` in C order, ``(N, ndim)`` int64."""
    return np.indices(shape, dtype=np.int64).reshape(len(shape), -1).T


class LabeledStatistic(Operator):
    """``scipy.ndimage.<how>(input, labels, index)``: one value (or one coordinate per axis)
    per label of ``index``.

    Inputs: ``input`` and, unless ``labels=False``, ``labels`` (same shape).  ``index`` is
    None (one value over ``labels > 0``, or over every cell without labels), an int (one
    value) or a 1-D sequence of labels (one value each, in that order; repeats allowed).

    Output: ``(n,)`` for ``n`` labels, ``(1,)`` for an int or None index; the position
    statistics (``center_of_mass``, ``maximum_position``, ``minimum_position``) give
    ``(n, ndim)``, or ``(ndim,)`` for an int or None index.  ``labeled_comprehension`` takes ``func``, ``out_dtype``,
    ``default`` and ``pass_positions`` as scipy does.

    Without labels every value depends on every cell (``BLACKBOX``).  With labels the
    modes are ``FULL`` and ``PAY``; lineage per the module docstring.

    Examples
    --------
    >>> op = LabeledStatistic("sum_labels", index=[1, 2])
    >>> op.run(None, np.array([1.0, 2.0, 4.0]), np.array([1, 2, 2])).tolist()
    [1.0, 6.0]
    """

    def __init__(self, how: str = "sum_labels", index: Any = None, labels: bool = True,
                 lineage: str = "dependence", func: Callable[..., Any] | None = None, out_dtype: Any = float,
                 default: Any = None, pass_positions: bool = False):
        self.how = check_choice(how, tuple(STATISTICS), "LabeledStatistic", "how")
        self.lineage = check_choice(lineage, MEASURE_LINEAGES, "LabeledStatistic", "lineage")
        self.labels = bool(labels)
        #: with labels, cells in no measured label have no forward lineage
        self.entire_array_safe = not self.labels
        if index is None or isinstance(index, (int, np.integer)):
            self.index: int | np.ndarray | None = None if index is None else int(index)
        else:
            values = np.asarray(list(index) if isinstance(index, range) else index)
            if values.ndim != 1 or (values.size and values.dtype.kind not in "iu"):
                raise WorkflowError(f"LabeledStatistic: index must be None, an int or a 1-D sequence of ints, got "
                                    f"{index!r}")
            self.index = values.astype(np.int64)
        if how == "labeled_comprehension" and not callable(func):
            raise WorkflowError(f"LabeledStatistic: labeled_comprehension needs a callable func, got {func!r}")
        self.func, self.out_dtype, self.default, self.pass_positions = func, out_dtype, default, bool(pass_positions)

    # -- shapes and modes ---------------------------------------------------------------------
    @property
    def n_values(self) -> int:
        """The number of labels measured (1 for an int or None index)."""
        return 1 if not isinstance(self.index, np.ndarray) else len(self.index)

    def supported_modes(self) -> set[Mode]:
        return {Mode.FULL, Mode.PAY} if self.labels else {Mode.BLACKBOX}

    def infer_output_shape(self, input_shapes: tuple[Shape, ...]) -> Shape | None:
        shape = tuple(input_shapes[0])
        if self.labels and tuple(input_shapes[1]) != shape:
            raise WorkflowError(f"LabeledStatistic: labels have shape {tuple(input_shapes[1])}, the input "
                                f"{shape}; give labels of the input's shape")
        if not shape:
            raise WorkflowError("LabeledStatistic: expected an array of at least 1 axis, got a 0-d array")
        if STATISTICS[self.how]:
            return (self.n_values, len(shape)) if isinstance(self.index, np.ndarray) else (len(shape),)
        return (self.n_values,)

    # -- values -------------------------------------------------------------------------------
    def _index_arg(self) -> Any:
        return self.index.tolist() if isinstance(self.index, np.ndarray) else self.index

    def measure(self, x: np.ndarray, labels: np.ndarray | None) -> np.ndarray:
        """scipy's values, shaped as the output."""
        fn = getattr(ndimage, self.how)
        if self.how == "labeled_comprehension":
            got = fn(x, labels, self._index_arg(), self.func, self.out_dtype, self.default, self.pass_positions)
        else:
            got = fn(x, labels, self._index_arg())
        out = np.asarray(got)
        if STATISTICS[self.how]:
            shape = (self.n_values, np.ndim(x)) if isinstance(self.index, np.ndarray) else (np.ndim(x),)
            return out.reshape(shape)
        return out.reshape(self.n_values)

    def run(self, ctx: Context, *inputs: np.ndarray) -> np.ndarray:
        x = np.asarray(inputs[0])
        labels = np.asarray(inputs[1]) if self.labels else None
        with np.errstate(all="ignore"):
            out = self.measure(x, labels)
        if labels is not None and ctx is not None and ctx.modes & {Mode.FULL, Mode.PAY}:
            self._write_lineage(ctx, labels, out.shape)
        return out

    # -- lineage --------------------------------------------------------------------------------
    def groups(self, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(cells, group, of_output, whole)``: the flat ids of the measured cells and the group
        (distinct label) of each; the group of each output value; the groups whose lineage is
        every cell of both arrays (scipy's median of an absent label)."""
        flat = labels.reshape(-1)
        if self.index is None:
            cells = np.flatnonzero(flat > 0)
            return cells, np.zeros(len(cells), np.int64), np.zeros(1, np.int64), np.zeros(1, bool)
        wanted = np.atleast_1d(np.asarray(self.index, np.int64))
        distinct, of_output = np.unique(wanted, return_inverse=True)
        pos = np.minimum(np.searchsorted(distinct, flat), max(len(distinct) - 1, 0))
        cells = np.flatnonzero(distinct[pos] == flat) if len(distinct) else np.zeros(0, np.int64)
        group = pos[cells].astype(np.int64)
        whole = np.zeros(len(distinct), bool)
        if self.how == "median":
            whole = np.bincount(group, minlength=len(distinct)) == 0
        return cells, group, of_output.reshape(-1).astype(np.int64), whole

    def _write_lineage(self, ctx, labels: np.ndarray, out_shape: tuple[int, ...]) -> None:
        shape = labels.shape
        ndim = labels.ndim
        cells, group, of_output, whole = self.groups(labels)
        m = len(whole)
        out_cells = _all_cells(out_shape)
        # the value each output cell belongs to: its first coordinate, but for the one
        # position of an int or None index, whose cells are its coordinates
        out_group = of_output[out_cells[:, 0]] if isinstance(self.index, np.ndarray) else of_output[
            np.zeros(len(out_cells), np.int64)]
        coords = np.stack(np.unravel_index(cells, shape), axis=1).reshape(-1, ndim).astype(np.int64)
        if Mode.FULL in ctx.modes:
            everything = _all_cells(shape)
            # pairs 0..m-1: each label's cells (every cell where scipy reads beyond the label);
            # pair m: every output value reads every label cell (dependence)
            wide = np.flatnonzero(whole)
            in_x = np.concatenate([coords, np.tile(everything, (len(wide), 1))])
            in_x_pair = np.concatenate([group, np.repeat(wide, len(everything))])
            if self.lineage == "dependence":
                in_l, in_l_pair = everything, np.full(len(everything), m, np.int64)
                outs = np.concatenate([out_cells, out_cells])
                out_pair = np.concatenate([out_group, np.full(len(out_cells), m, np.int64)])
            else:  # members, and every cell for scipy's median of an absent label
                in_l, in_l_pair, outs, out_pair = in_x, in_x_pair, out_cells, out_group
            ctx.lwrite_many(outs, in_x, in_l, out_pair=out_pair, in_pair=[in_x_pair, in_l_pair])
        if Mode.PAY in ctx.modes:
            ctx.lwrite_many(out_cells, out_pair=out_group, payload=self._payloads(coords, group, whole, shape))

    def _payloads(self, coords: np.ndarray, group: np.ndarray, whole: np.ndarray, shape) -> list[bytes]:
        """One payload per group: a flag byte (1: the lineage is every cell of both arrays) and the
        label's cells (`encode_region`)."""
        ndim = len(shape)
        m = len(whole)
        counts = np.bincount(group, minlength=m)
        payloads = [encode_region(np.zeros((0, ndim), np.int64), ndim)] * m
        present = np.flatnonzero(counts > 0)
        if len(present):
            lo, hi = group_boxes(coords, group, m)
            rank = np.full(m, -1, np.int64)
            rank[present] = np.arange(len(present))
            for k, p in zip(present.tolist(), encode_regions(coords, rank[group], lo[present], hi[present])):
                payloads[k] = p
        return [bytes([int(w)]) + p for w, p in zip(whole.tolist(), payloads)]

    def map_p(self, cells: np.ndarray, payload: bytes, i: int) -> np.ndarray:
        shape = tuple(self.input_shapes[i])
        if (i == 1 and self.lineage == "dependence") or payload[:1] == b"\x01":
            return _all_cells(shape)
        return decode_region(payload[1:], len(shape))

    def map_p_pairs(self, cells: np.ndarray, payload: bytes, i: int) -> tuple[np.ndarray, np.ndarray]:
        return repeat_pairs(len(cells), self.map_p(cells, payload, i))

    def map_p_envelope(self, payloads: list[bytes], i: int,
                       cells: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Each payload's box, read from the headers at once (every cell: the input's box)."""
        shape = np.asarray(self.input_shapes[i], np.int64)
        lo, hi, _ = region_envelopes([p[1:] for p in payloads], len(shape))
        every = np.array([(i == 1 and self.lineage == "dependence") or p[:1] == b"\x01"
                          for p in payloads], bool)
        lo[every], hi[every] = 0, shape
        return lo, hi
