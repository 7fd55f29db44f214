"""The cells a command starts from: ``--cells``, ``--box``, ``--fits-coords`` and ``--sky``
(``query``, ``brush`` and ``replay``)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from subzero.errors import LineageError

if TYPE_CHECKING:
    import numpy as np
    from subzero.run import Run

__all__ = ["parse_cells", "parse_boxes", "add_cell_options", "add_sky_cells", "query_start"]


def parse_boxes(boxes: list[str] | None, fits: bool = False) -> list[list[tuple[int, int]]]:
    """Boxes from ``--box 0:2,5:8`` (half-open, numpy order) as ``[[(lo, hi), ...], ...]``.

    With ``fits``, a box is an inclusive 1-based FITS section ``X0:X1,Y0:Y1`` (x along
    columns), converted to numpy order.

    Examples
    --------
    >>> parse_boxes(["0:2,5:8"])
    [[(0, 2), (5, 8)]]
    >>> parse_boxes(["6:8,1:2"], fits=True)
    [[(0, 2), (5, 8)]]
    """
    out = []
    for text in boxes or []:
        try:
            pairs = [(int(a), int(b)) for a, b in (r.split(":") for r in text.split(","))]
        except ValueError:
            hint = "X0:X1,Y0:Y1 (1-based, inclusive), e.g. 10:20,5:8" if fits else "LO:HI per axis, e.g. 0:2,5:8"
            raise LineageError(f"box {text!r} must be {hint}") from None
        if any(abs(v) >= 2**62 for p in pairs for v in p):
            raise LineageError(f"box {text!r} is out of bounds: a coordinate is larger than any array")
        if fits:
            if any(lo < 1 for lo, _ in pairs):
                raise LineageError(f"box {text!r}: with --fits-coords, coordinates count from 1")
            pairs = [(lo - 1, hi) for lo, hi in reversed(pairs)]
        out.append(pairs)
    return out


def parse_cells(cells: list[str] | None, boxes: list[str] | None, fits: bool = False) -> "np.ndarray":
    """Cells from ``--cells 1,2 --cells 3,4`` (or ``--cells "1,2;3,4"``) and the cells of the
    half-open boxes ``--box 0:2,5:8``, as ``(N, ndim)`` numpy coordinates.

    With ``fits``, cells are 1-based ``x,y`` (DS9/FITS order: x along columns) and boxes are
    inclusive 1-based FITS sections ``X0:X1,Y0:Y1`` (see `parse_boxes`).

    Examples
    --------
    >>> parse_cells(["1,2;3,4"], None).tolist()
    [[1, 2], [3, 4]]
    >>> parse_cells(["6,3"], ["1:2,1:1"], fits=True).tolist()
    [[2, 5], [0, 0], [0, 1]]
    """
    import numpy as np

    from subzero.cells import box_cells

    rows = []
    example = "X,Y (1-based)" if fits else "R,C"
    for text in cells or []:
        for chunk in text.split(";"):
            try:
                row = [int(v) for v in chunk.split(",") if v.strip() != ""]
            except ValueError:
                raise LineageError(f"cell {chunk!r} must be comma-separated integers, e.g. 3,4") from None
            if any(abs(v) >= 2**62 for v in row):
                raise LineageError(f"cell {chunk!r} is out of bounds: a coordinate is larger than any array "
                                   "(coordinates count from 0 up to the node's shape)")
            if fits:
                if any(v < 1 for v in row):
                    raise LineageError(f"cell {chunk!r}: with --fits-coords, coordinates count from 1 ({example})")
                row = [v - 1 for v in reversed(row)]
            rows.append(row)
    parsed = parse_boxes(boxes, fits)
    for pairs in parsed:
        if any(hi <= lo for lo, hi in pairs):
            raise LineageError(f"box {','.join(f'{lo}:{hi}' for lo, hi in pairs)} (numpy order, half-open) is empty: "
                               "each axis needs LO < HI")
    blocks = [box_cells(*zip(*pairs)) for pairs in parsed]  # arrays, not Python rows
    if not rows and not blocks:
        raise LineageError(f"give cells with --cells {example} (repeatable, or several as 'A,B;C,D') "
                           f"or --box {'X0:X1,Y0:Y1' if fits else 'R0:R1,C0:C1'}")
    if len({len(r) for r in rows} | {b.shape[1] for b in blocks}) != 1:
        raise LineageError("all cells must have the same number of coordinates")
    if rows:
        blocks.insert(0, np.array(rows, dtype=np.int64))
    return np.concatenate(blocks).astype(np.int64, copy=False)


def add_sky_cells(args: argparse.Namespace, run: Run, node: str) -> None:
    """``--sky "RA DEC"`` (repeatable): each position becomes the cell of ``node`` holding it,
    through the WCS of its pixel grid (a FITS input's, or that of a node on its grid), added
    to ``args.cells`` in the convention of the other cells (numpy, or FITS with --fits-coords)."""
    if not getattr(args, "sky", None):
        return
    from subzero.tools.view.sky import node_wcs, parse_sky, sky_to_pixel

    wcs = node_wcs(run).get(run.node(node).name)
    if wcs is None:
        raise LineageError(f"--sky: node {node!r} has no WCS (only FITS inputs with a celestial WCS, and nodes on "
                           "their pixel grid, have one); give --cells or --box instead")
    for text in args.sky:
        row, col = sky_to_pixel(wcs, parse_sky(text), run.shape(node))
        args.cells = (args.cells or []) + [f"{col + 1},{row + 1}" if args.fits_coords else f"{row},{col}"]


def query_start(args: argparse.Namespace) -> dict[str, Any]:
    """``cells=`` or, for boxes alone, ``box=`` (never expanded into cells) for a Run query."""
    if args.box and not args.cells:
        return {"box": parse_boxes(args.box, args.fits_coords)}
    return {"cells": parse_cells(args.cells, args.box, args.fits_coords)}


def add_cell_options(parser: argparse.ArgumentParser) -> None:
    """``--cells``, ``--box`` and ``--fits-coords``: the cells a query, brush or replay starts from."""
    parser.add_argument("--cells", action="append", metavar="R,C[;R,C...]",
                        help="one cell 'R,C' or several 'R,C;R,C' (repeatable)")
    parser.add_argument("--box", action="append", metavar="R0:R1,C0:C1", help="a half-open box (repeatable)")
    parser.add_argument("--fits-coords", action="store_true",
                        help="cells are 1-based X,Y and boxes inclusive X0:X1,Y0:Y1 (DS9/FITS); output likewise")
