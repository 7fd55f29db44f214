"""Range rules: explicit (Full) lineage compressed into boxes whose ends are absolute or
relative to the output coordinate, queried without decompressing.

After ProvRC (DSLog, Zhao & Krishnan 2024): explicit lineage of array operators is
spatially regular, so most output cells share one *relative* pattern of input cells.

Representation
--------------
A `RangeRules` table holds rules.  Rule ``r`` has

- an out part: a set of disjoint half-open boxes of output cells (``box_ptr`` CSR into
  ``out_lo``/``out_hi``);
- per input ``i``, a set of *terms* (``term_ptr[i]`` CSR into ``terms[i]``, a `TERM`
  structured array of shape ``(T_i, ndim_i)``).  Along input axis ``j`` a term is the
  range ``[base + a, base + b)`` where ``base = 0`` when ``ref == -1`` (absolute) and
  ``base = (mul * o[ref]) // div`` otherwise: relative to output axis ``ref`` of the out
  cell ``o`` (``mul = 1``: a shift, possibly across axes as in a transpose; ``mul = -1``:
  a flip; ``|mul| > 1``: a stride or block; ``div > 1``: a repeat).

Out cell ``o`` of rule ``r`` depends on the union over the rule's terms of the boxes the
terms give at ``o``; the lineage of a table is the union over its rules, exactly the
semantics of region pairs (`subzero.pairs.FullPairs`).  One rule per relative pattern
covers a whole stencil, transpose, crop or matmul; edge cells of a boundary mode get
rules of their own; a region pair of many cells (a Label component) is a rule of
absolute terms; irregular lineage falls back to explicit cells (rules of unit boxes,
stored as flat ids), never larger than the FullMany encoding of the same pairs.

Queries (`RangeRules.backward`, `RangeRules.forward`) map boxes to boxes, costing the
rules and boxes they touch, not the cells of the query.

Stored as a strategy: a task compresses its tile's pairs (`compress`) and stores
`serialize(table)`; `RangeRules.out_envelopes` and `RangeRules.in_envelopes` are the
R-tree entries (one structure indexes both directions, keyed by rule id); a query reads
the tables the R-tree names (`deserialize`) and calls `RangeRules.backward` /
`RangeRules.forward` with those rule ids.  The driver may merge small tile tables into
one per node (`merge_tables`).

Modules: `terms` (term arithmetic), `table` (`RangeRules` and its queries), `compressor`
(pairs -> rules), `merge` (tables -> one table), `codec` (bytes), `lists` (CSR helpers).
Pure numpy: no store, index or Spark here.

Examples
--------
>>> import numpy as np
>>> from subzero.encoders.ranges import compress, demo_pairs, to_ids
>>> rules = compress(demo_pairs(), (8,), [(8,)])   # a 3-wide stencil over 8 cells
>>> lo, hi = rules.backward([[2]], [[5]], 0)
>>> to_ids(lo, hi, (8,)).tolist()
[1, 2, 3, 4, 5]
"""

from __future__ import annotations

from subzero.boxes import normalize
from subzero.encoders.ranges.codec import deserialize, serialize
from subzero.encoders.ranges.compressor import compress, demo_pairs, explicit, fullmany_nbytes
from subzero.encoders.ranges.merge import merge_tables
from subzero.encoders.ranges.table import RangeRules, to_ids
from subzero.encoders.ranges.terms import ABS, TERM

__all__ = ["TERM", "ABS", "RangeRules", "compress", "explicit", "to_ids", "normalize", "fullmany_nbytes",
           "demo_pairs", "serialize", "deserialize", "merge_tables"]
