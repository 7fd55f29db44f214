"""Binary morphology (scipy.ndimage): stencils on boolean images with a constant border.

The border (``border_value``) is not input, so edge cells have no lineage outside the
array.  ``iterations`` repeats the operation; its footprint is the structure added to
itself ``iterations`` times (Minkowski sum), and tiles carry a halo that wide.

`BinaryFillHoles` is value-dependent: whether a background cell is filled depends on its
background component (does it reach the border?), so its lineage is `Label`'s on the
inverted image.
"""

from __future__ import annotations

import numpy as np

from subzero.context import Context
from subzero.errors import WorkflowError
from subzero.modes import Mode
from subzero.lazy import LazyModule
from subzero.operators._kernels import unique_rows
from subzero.operators.label import Label
from subzero.operators.neighbourhood import StencilOperator, kernel_offsets

ndimage = LazyModule("scipy.ndimage")  # imported on first use

__all__ = ["BinaryDilation", "BinaryErosion", "BinaryFillHoles"]


class _BinaryMorphology(StencilOperator):
    """``fn(x != 0, structure, iterations, border_value=...)``; subclasses set ``fn`` (the name
    of the scipy.ndimage function) and ``flip`` (dilation reads the structure mirrored, as a
    convolution does)."""

    fn = "binary_dilation"  # the scipy.ndimage function, by name (scipy is imported on first use)
    flip = True

    def __init__(self, structure=None, iterations: int = 1, border_value: int = 0):
        super().__init__("constant", border_value)
        self.structure = None if structure is None else np.asarray(structure, dtype=bool)
        if not isinstance(iterations, (int, np.integer)) or iterations < 1:
            raise WorkflowError(f"{type(self).__name__}: iterations must be an int >= 1 (repeating until "
                                f"nothing changes has no fixed footprint), got {iterations!r}")
        self.iterations = int(iterations)
        self.border_value = int(border_value)

    def _structure(self, ndim: int) -> np.ndarray:
        if self.structure is None:
            return ndimage.generate_binary_structure(ndim, 1)
        if self.structure.ndim != ndim:
            raise WorkflowError(f"{type(self).__name__}: structure is {self.structure.ndim}-D "
                                f"(shape {self.structure.shape}), the input is {ndim}-D; they must match")
        return self.structure

    def stencil(self, ndim: int) -> np.ndarray:
        step = kernel_offsets(self._structure(ndim), flip=self.flip)
        offsets = np.zeros((1, ndim), np.int64)
        for _ in range(self.iterations):
            offsets = unique_rows((offsets[:, None, :] + step[None, :, :]).reshape(-1, ndim))
        return offsets

    def run(self, ctx, x) -> np.ndarray:
        return getattr(ndimage, type(self).fn)(np.asarray(x) != 0, self._structure(np.ndim(x)), self.iterations,
                             border_value=self.border_value)


class BinaryDilation(_BinaryMorphology):
    """``scipy.ndimage.binary_dilation(x, structure, iterations, border_value=...)``."""

    fn = "binary_dilation"
    flip = True


class BinaryErosion(_BinaryMorphology):
    """``scipy.ndimage.binary_erosion(x, structure, iterations, border_value=...)``."""

    fn = "binary_erosion"
    flip = False


class BinaryFillHoles(Label):
    """``scipy.ndimage.binary_fill_holes(x, structure)``: background regions that do not reach
    the array's border (under ``structure``, default the cross) become foreground.

    Lineage: a foreground cell stays foreground whatever else changes, so it depends on
    itself; a background cell is filled or not by its background component (connected
    under ``structure``) and by the foreground cells around it (one of them cleared can
    join it to the border): exactly `Label`'s lineage of ``x == 0``, component and ring.
    Mode ``FULL`` (`Label`'s payloads name components of the stored output, which here is the
    filled mask); it runs on the whole array (a hole is only known to be one once its whole
    component is seen).

    Examples
    --------
    >>> BinaryFillHoles().run(None, np.array([[1, 1, 1], [1, 0, 1], [1, 1, 1]])).astype(int).tolist()
    [[1, 1, 1], [1, 1, 1], [1, 1, 1]]
    """

    tiling = None  # type: ignore[assignment]  # whole arrays: one task, no seams

    def supported_modes(self) -> set[Mode]:
        """``FULL`` only: `Label`'s payloads name components of its stored output, and this
        operator's output is the filled mask, not the background's labels."""
        return {Mode.FULL}

    def run(self, ctx: Context, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x) != 0
        if ctx is not None and ctx.modes:
            super().run(ctx, ~x)  # Label's lineage of the background: component and ring
        return ndimage.binary_fill_holes(x, self._structure(x.ndim))
