"""Built-in operators, each with exact, vectorized mapping functions."""

from __future__ import annotations

from subzero.operators.cosmic import CosmicRayDetect
from subzero.operators.elementwise import Add, ElementwiseOperator, Multiply
from subzero.operators.linalg import MatMul
from subzero.operators.neighbourhood import Convolve, StencilOperator
from subzero.operators.reductions import AxisReduction, Sum
from subzero.operators.shape import Transpose

__all__ = ["Add", "Multiply", "ElementwiseOperator", "Transpose", "Convolve", "StencilOperator",
           "MatMul", "AxisReduction", "Sum", "CosmicRayDetect"]
