"""The cost model: disk, runtime and query cost of each strategy of each node.

Predictions come from a `NodeProfile`: measurements of the node (operator time,
tiles, fan-in/fan-out) and of each strategy (bytes, encode seconds, pairs, keys),
taken by calibration on sample tiles before a run or by the run itself.  Query
costs combine those sizes with per-operation constants measured on this kind of
machine (LMDB lookups, R-tree probes, decoding, Python calls); `subzero explain`
reports predictions next to measurements.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from subzero.catalog import LineageSize
from subzero.modes import Direction, Mode, Strategy

__all__ = ["StrategyProfile", "NodeProfile", "step_cost", "disk_cost", "runtime_cost", "touched_share"]

# seconds per operation (measured with benchmarks/micro on the project machine)
KEY_LOOKUP = 1.5e-6      # one LMDB get in a batched getmulti
CELL = 2.0e-8            # one cell id decoded and set in a mask
PAIR_DECODE = 4.0e-6     # one stored entry unpacked in Python
RTREE_BOX = 4.0e-6       # one frontier box probed in the R-tree
MAP_CELL = 6.0e-8        # one cell through a vectorized mapping function
MASK_CELL = 2.0e-9       # one cell of a mask or box form passed whole through a mapping function
PAYLOAD_CALL = 3.0e-5    # one map_p call (per distinct payload)
STEP_OVERHEAD = 2.0e-4   # opening readers, building masks
RANGE_BYTE = 1.0e-7      # one stored byte of a range-rule chunk read, inflated, decoded and indexed


@dataclass(frozen=True, kw_only=True)
class StrategyProfile(LineageSize):
    """What one strategy stores for a whole node: its `subzero.catalog.LineageSize` and
    ``bytes``, all its files' (shards and indexes, or the merged table)."""

    bytes: float = 0.0


@dataclass
class NodeProfile:
    """Measurements of one node that the cost model reads."""

    node: str
    tiles: int = 1
    op_seconds: float = 0.0
    trace_seconds: float = 0.0
    out_size: int = 1
    in_sizes: list[int] = field(default_factory=list)
    fan_backward: float = 1.0
    fan_forward: float = 1.0
    mapping: bool = False
    all_to_all: bool = False
    measured: bool = False
    one_pass: bool = False   # the run computes the node once, with its lineage: capture re-runs nothing
    strategies: dict[str, StrategyProfile] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)   # candidates calibration did not encode, and why
    #: those candidates' predicted capture seconds and the operator seconds their limit was taken at
    skipped_at: dict[str, list[float]] = field(default_factory=dict)
    #: candidates calibration counted but did not encode: their lowest possible costs
    #: (`subzero.optimizer.calibrate.lower_bound`); the integer program chose none of them at those
    bounds: dict[str, StrategyProfile] = field(default_factory=dict)

    def to_dict(self) -> dict:
        """The JSON form the catalog keeps (strategies by name)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "NodeProfile":
        """The profile `to_dict` wrote."""
        data = dict(data)
        data["strategies"] = {k: StrategyProfile(**v) for k, v in data.get("strategies", {}).items()}
        data["bounds"] = {k: StrategyProfile(**v) for k, v in data.get("bounds", {}).items()}
        return cls(**data)

    def fan(self, direction: Direction | str, cells: float) -> float:
        """Cells one step yields from ``cells`` entering, capped by the array size."""
        backward = Direction.parse(direction) is Direction.BACKWARD
        cap = max(self.in_sizes, default=1) if backward else self.out_size
        if self.all_to_all:
            return float(cap)
        per = self.fan_backward if backward else self.fan_forward
        return float(min(cap, cells * per))


def disk_cost(profile: NodeProfile, strategy: Strategy | str) -> float:
    """Bytes a strategy stores for the node (0 for what stores nothing or was not calibrated)."""
    s = Strategy.parse(strategy)
    return profile.strategies[s.name].bytes if s.stored and s.name in profile.strategies else 0.0


def runtime_cost(profile: NodeProfile, strategy: Strategy | str) -> float:
    """Seconds a strategy adds to the run: re-running the node to capture lineage (unless the
    run computes it once with its lineage: ``profile.one_pass``), encoding, writing."""
    s = Strategy.parse(strategy)
    if not s.stored or s.name not in profile.strategies:
        return 0.0
    sp = profile.strategies[s.name]
    rerun = 0.0 if profile.one_pass else profile.op_seconds
    return rerun + sp.encode_seconds + sp.bytes * 5e-9 + sp.keys * 1e-6


def touched_share(profile: NodeProfile, cells: float) -> float:
    """The share of the node's tiles a step of ``cells`` frontier cells touches, at most (a
    re-run step runs those tiles, and reads the inputs they read)."""
    return min(profile.tiles, max(1.0, cells)) / max(profile.tiles, 1)


def _rerun(profile: NodeProfile, cells: float) -> float:
    return (profile.op_seconds + profile.trace_seconds) * touched_share(profile, cells)


def step_cost(profile: NodeProfile, strategy: Strategy | str, direction: Direction | str, cells: float,
              reread: float = 0.0, whole: bool = False) -> float:
    """Predicted seconds of one query step through the node with ``strategy``.

    ``cells`` is the number of frontier cells entering the step.  ``reread``: the seconds
    recomputing the node's unstored inputs takes, whole (`subzero.optimizer.storage`); a
    re-run step pays the share of it its touched tiles read.  ``whole``: a Map step, or a
    composite's mapping default, takes the frontier whole (boxes or a mask through the
    operator's box or mask form, or the same cells through an elementwise step): a pass over
    the arrays, not a walk per cell, and its answer stays boxes.
    """
    cells, direction, s = max(float(cells), 1.0), Direction.parse(direction), Strategy.parse(strategy)
    out = profile.fan(direction, cells)
    if profile.all_to_all:
        return STEP_OVERHEAD
    if s.mode is Mode.BLACKBOX:
        return STEP_OVERHEAD + _rerun(profile, cells) + out * CELL + reread * touched_share(profile, cells)
    if s.mode is Mode.MAP:
        if whole:
            return STEP_OVERHEAD + (cells + out) * MASK_CELL
        return STEP_OVERHEAD + (cells + out) * MAP_CELL
    sp = profile.strategies.get(s.name, StrategyProfile())
    if s.both_directions:  # range rules: boxes in, boxes out, a few rules per frontier box
        cost = STEP_OVERHEAD + min(cells, 4096) * RTREE_BOX + min(out, 4096) * CELL
        if sp.keys:  # a table kept in chunks: the chunks the frontier touches are read and decoded whole
            chunks = min(sp.keys, max(1.0, cells * sp.keys / max(profile.out_size, 1)))
            cost += chunks * (2 * KEY_LOOKUP + sp.bytes / sp.keys * RANGE_BYTE)
        return cost
    payload = s.mode in (Mode.PAY, Mode.COMP)
    if direction is not s.direction and not payload:  # mismatched index: every entry of the touched tiles is read
        share = min(profile.tiles, max(1.0, cells)) / max(profile.tiles, 1)
        cost = (sp.keys * KEY_LOOKUP + sp.pairs * PAIR_DECODE + (sp.out_cells + sp.in_cells) * CELL) * share
        return STEP_OVERHEAD + cost
    per_pair = sp.out_cells / sp.pairs if sp.pairs else 1.0
    # a composite stores its overrides only (its mapping answers the other cells): a frontier
    # cell meets one as often as the overrides cover the output
    covered = min(1.0, sp.out_cells / max(profile.out_size, 1)) if s.mode is Mode.COMP else 1.0
    boxed = whole and s.mode is Mode.COMP  # its default maps the frontier's boxes or mask; the answer is boxes
    answer = (min(out, 4096) if boxed else out) * CELL
    if payload and direction is Direction.FORWARD:  # the R-tree of payload envelopes picks what to expand
        pairs_hit = min(sp.pairs, cells * covered * profile.fan_forward / max(per_pair, 1.0) + 1)
        cost = min(cells, 4096) * RTREE_BOX + pairs_hit * (KEY_LOOKUP + PAIR_DECODE) + answer
    elif s.encoding == "One":
        pairs_hit = min(sp.pairs, cells * covered)
        cost = cells * KEY_LOOKUP + pairs_hit * (KEY_LOOKUP + PAIR_DECODE) + answer
    else:
        pairs_hit = min(sp.pairs, cells * covered / max(per_pair, 1.0) + 1)
        cost = min(cells, 4096) * RTREE_BOX + pairs_hit * (KEY_LOOKUP + PAIR_DECODE) + answer
    if payload:
        cost += min(pairs_hit, 64) * PAYLOAD_CALL + ((cells + out) * MASK_CELL if boxed else out * MAP_CELL)
    return STEP_OVERHEAD + cost
