"""Built-in operators, each with exact, vectorized lineage (the README has the overview table)."""

from __future__ import annotations

from subzero.operators.astro import CosmicRays, DetectStars, RepairCosmics
from subzero.operators.composite import WindowLineage
from subzero.operators.cosmic import CosmicRayDetect
from subzero.operators.elementwise import (
    Add, AddScalar, Apply, BinaryOperator, Clip, Divide, DivideScalar, ElementwiseOperator, Maximum, Minimum,
    Multiply, MultiplyScalar, Power, PowerScalar, ScalarOperator, Subtract, SubtractScalar, Threshold, Where,
)
from subzero.operators.identity import IdentityMapping
from subzero.operators.indexmap import IndexMapOperator
from subzero.operators.linalg import Dot, Inverse, MatMul, Outer
from subzero.operators.morphology import BinaryDilation, BinaryErosion
from subzero.operators.neighbourhood import (
    Convolve, Correlate, GaussianFilter, Laplace, MaximumFilter, MedianFilter, MinimumFilter, Sobel,
    StencilOperator, UniformFilter,
)
from subzero.operators.reductions import AxisReduction, Count, GlobalMean, GlobalStd, Max, Mean, Min, Std, Sum
from subzero.operators.resampling import Downsample, Upsample
from subzero.operators.shape import Concatenate, Flip, Pad, Reshape, Shift, Slice, Stack, Tile, Transpose
from subzero.operators.sorting import ArgSort, LineOperator, Sort
from subzero.operators.value import Compress, Filter, Histogram, Label

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
]
