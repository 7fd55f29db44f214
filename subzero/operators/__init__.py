"""Built-in operators, each with exact, vectorized lineage (docs/guide/operators.md has the overview table).

Each operator's module is imported on first use (PEP 562): ``sz.operators.Transpose`` and
``from subzero.operators import Transpose`` work as before, and an unused operator family
(e.g. the scipy-backed filters) costs nothing at import time.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__all__ = [
    "IdentityMapping",
    # elementwise
    "ElementwiseOperator", "BinaryOperator", "Add", "Subtract", "Multiply", "Divide", "Power", "Maximum",
    "Minimum", "Where", "Clip", "Threshold", "Apply", "ScalarOperator", "AddScalar", "SubtractScalar",
    "MultiplyScalar", "DivideScalar", "PowerScalar",
    # shape
    "IndexMapOperator", "Transpose", "Reshape", "Slice", "Concatenate", "Stack", "Flip", "Pad", "Shift", "Tile",
    # neighbourhood
    "StencilOperator", "Convolve", "Correlate", "GaussianFilter", "UniformFilter", "MedianFilter",
    "MaximumFilter", "MinimumFilter", "Laplace", "Sobel", "BinaryDilation", "BinaryErosion",
    # resampling
    "Downsample", "Upsample",
    # linear algebra
    "Dot", "MatMul", "Outer", "Inverse",
    # reductions and statistics
    "AxisReduction", "Sum", "Mean", "Std", "Min", "Max", "Count", "GlobalMean", "GlobalStd", "Histogram",
    # sorting and value-dependent
    "LineOperator", "Sort", "ArgSort", "Label", "Filter", "Compress",
    # composite: the paper's example, window lineage, astronomy (astroscrappy, sep)
    "WindowLineage", "CosmicRayDetect", "CosmicRays", "RepairCosmics", "DetectStars",
    # for the numpy front end: whole-array and nan reductions, histogram edges, scipy label numbers
    "GlobalReduction", "NanSum", "NanMean", "NanStd", "NanMin", "NanMax", "AnyOf", "AllOf", "HistogramEdges",
    "Relabel", "NearestZoom",
    # indexing fixed when a function was traced on values, and the coarse step
    "Gather", "Scatter", "Coordinates", "Opaque",
    # numpy's statistics, running reductions, 1-D convolution, gathers, einsum, look-ups
    "Statistic", "Cumulative", "Diff", "SequenceConvolve", "Take", "TakeAlong", "Einsum", "Lookup",
    # scipy.ndimage's 1-D filters, rank filters, derivatives, hole filling and labelled measurements
    "Correlate1D", "Convolve1D", "UniformFilter1D", "GaussianFilter1D", "MinimumFilter1D", "MaximumFilter1D",
    "GenericFilter", "RankFilter", "PercentileFilter", "GaussianLaplace", "GaussianGradientMagnitude", "Prewitt",
    "BinaryFillHoles", "LabeledStatistic",
]

# module (under subzero.operators) -> the public names it defines
_MODULES = {
    "astro": ["CosmicRays", "DetectStars", "RepairCosmics"],
    "composite": ["WindowLineage"],
    "cumulative": ["Cumulative", "Diff", "SequenceConvolve", "Take", "TakeAlong"],
    "einsum": ["Einsum"],
    "cosmic": ["CosmicRayDetect"],
    "elementwise": ["Add", "AddScalar", "Apply", "BinaryOperator", "Clip", "Divide", "DivideScalar",
                    "ElementwiseOperator", "Maximum", "Minimum", "Multiply", "MultiplyScalar", "Power",
                    "PowerScalar", "ScalarOperator", "Subtract", "SubtractScalar", "Threshold", "Where"],
    "identity": ["IdentityMapping"],
    "indexmap": ["IndexMapOperator"],
    "filters1d": ["Convolve1D", "Correlate1D", "GaussianFilter1D", "MaximumFilter1D", "MinimumFilter1D",
                  "UniformFilter1D"],
    "linalg": ["Dot", "Inverse", "MatMul", "Outer"],
    "measurements": ["LabeledStatistic"],
    "morphology": ["BinaryDilation", "BinaryErosion", "BinaryFillHoles"],
    "numeric": ["AllOf", "AnyOf", "GlobalReduction", "HistogramEdges", "NanMax", "NanMean", "NanMin", "NanStd",
                "NanSum", "NearestZoom", "Relabel"],
    "neighbourhood": ["Convolve", "Correlate", "GaussianFilter", "GaussianGradientMagnitude", "GaussianLaplace",
                      "GenericFilter", "Laplace", "MaximumFilter", "MedianFilter", "MinimumFilter", "PercentileFilter",
                      "Prewitt", "RankFilter", "Sobel", "StencilOperator", "UniformFilter"],
    "reductions": ["AxisReduction", "Count", "GlobalMean", "GlobalStd", "Max", "Mean", "Min", "Std", "Sum"],
    "resampling": ["Downsample", "Upsample"],
    "shape": ["Concatenate", "Flip", "Pad", "Reshape", "Shift", "Slice", "Stack", "Tile", "Transpose"],
    "sorting": ["ArgSort", "LineOperator", "Sort"],
    "statistics": ["Lookup", "Statistic"],
    "label": ["Label"],
    "indexing": ["Coordinates", "Gather", "Opaque", "Scatter"],
    "value": ["Compress", "Filter", "Histogram"],
}
_LAZY = {name: f"{__name__}.{module}" for module, names in _MODULES.items() for name in names}

if TYPE_CHECKING:  # static analysers and IDEs see the eager imports
    from subzero.operators.astro import CosmicRays, DetectStars, RepairCosmics
    from subzero.operators.composite import WindowLineage
    from subzero.operators.cosmic import CosmicRayDetect
    from subzero.operators.cumulative import Cumulative, Diff, SequenceConvolve, Take, TakeAlong
    from subzero.operators.einsum import Einsum
    from subzero.operators.elementwise import (
        Add, AddScalar, Apply, BinaryOperator, Clip, Divide, DivideScalar, ElementwiseOperator, Maximum, Minimum,
        Multiply, MultiplyScalar, Power, PowerScalar, ScalarOperator, Subtract, SubtractScalar, Threshold, Where,
    )
    from subzero.operators.identity import IdentityMapping
    from subzero.operators.indexing import Coordinates, Gather, Opaque, Scatter
    from subzero.operators.indexmap import IndexMapOperator
    from subzero.operators.filters1d import (
        Convolve1D, Correlate1D, GaussianFilter1D, MaximumFilter1D, MinimumFilter1D, UniformFilter1D,
    )
    from subzero.operators.linalg import Dot, Inverse, MatMul, Outer
    from subzero.operators.measurements import LabeledStatistic
    from subzero.operators.morphology import BinaryDilation, BinaryErosion, BinaryFillHoles
    from subzero.operators.numeric import (
        AllOf, AnyOf, GlobalReduction, HistogramEdges, NanMax, NanMean, NanMin, NanStd, NanSum, NearestZoom,
        Relabel,
    )
    from subzero.operators.neighbourhood import (
        Convolve, Correlate, GaussianFilter, GaussianGradientMagnitude, GaussianLaplace, GenericFilter, Laplace,
        MaximumFilter, MedianFilter, MinimumFilter, PercentileFilter, Prewitt, RankFilter, Sobel, StencilOperator,
        UniformFilter,
    )
    from subzero.operators.reductions import AxisReduction, Count, GlobalMean, GlobalStd, Max, Mean, Min, Std, Sum
    from subzero.operators.resampling import Downsample, Upsample
    from subzero.operators.shape import Concatenate, Flip, Pad, Reshape, Shift, Slice, Stack, Tile, Transpose
    from subzero.operators.sorting import ArgSort, LineOperator, Sort
    from subzero.operators.statistics import Lookup, Statistic
    from subzero.operators.label import Label
    from subzero.operators.value import Compress, Filter, Histogram


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        if f"{__name__}.{name}" in set(_LAZY.values()):  # a submodule, e.g. ops.neighbourhood.MODES
            return importlib.import_module(f"{__name__}.{name}")
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
