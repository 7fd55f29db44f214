"""Questions built on lineage: per-object lineage statistics and contamination maps.

- `lineage_table`: one row per object of a label array, with its lineage's size, flagged
  cells and value statistics over an ancestor (``Run.lineage_table``, ``subzero table``);
- `contamination_mask` / `contamination_count`: where flagged input cells end up, and how
  many distinct flagged cells each output cell depends on (``subzero contaminate``).

Both carry many objects (labels) through the workflow in one labelled pass
(`subzero.stats.labelled`), over per-cell step relations (`subzero.stats.relation`).
"""

from subzero.stats.contamination import contamination_count, contamination_mask
from subzero.stats.table import lineage_table

__all__ = ["lineage_table", "contamination_mask", "contamination_count"]
