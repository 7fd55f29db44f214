"""A finished run: its arrays, what each node stored, and lineage queries over it."""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np

from subzero.cells import as_coords, coords_from_mask, mask_from_coords
from subzero.modes import Mode
from subzero.optimizer.query_time import choose_step
from subzero.query import check_forced, step, walk
from subzero.errors import LineageError, LookupTimeout, StoreError, WorkflowError
from subzero.store import RunStore
from subzero.workflow import Node, Workflow

__all__ = ["Run", "open_run"]


class Run:
    """The result of `Workflow.run`, or of `open_run` on its store.

    Queries read stored lineage in this process; steps through black-box nodes re-run
    the operator (tiles touched by the query only) from the stored arrays.
    """

    def __init__(self, store: RunStore, workflow: Workflow):
        self.store = store
        self.workflow = workflow
        self._profiles: dict = {}
        self.last_query: list[dict] = []

    # -- what the run holds -----------------------------------------------------------
    @property
    def path(self) -> str:
        return str(self.store.root)

    @property
    def strategies(self) -> dict[str, tuple[str, ...]]:
        """Node name -> the strategies it stored."""
        return {name: tuple(entry["strategies"]) for name, entry in self.store.catalog["nodes"].items()
                if entry["kind"] == "operator"}

    @property
    def tile_shape(self):
        return self.store.catalog.get("tile_shape")

    @property
    def catalog(self) -> dict[str, Any]:
        return self.store.catalog

    def node(self, ref) -> Node:
        try:
            return self.workflow.node(ref)
        except WorkflowError as exc:
            raise LineageError(str(exc)) from None

    def shape(self, ref) -> tuple[int, ...]:
        return tuple(self.store.catalog["nodes"][self.node(ref).name]["shape"])

    def output(self, ref) -> np.ndarray:
        """The stored array of a node (read-only, memory-mapped)."""
        return self.store.load_array(self.node(ref).name)

    def ndims(self, node: Node) -> dict[int, int]:
        op = node.operator
        return {0xFF: len(op.output_shape)} | {i: len(s) for i, s in enumerate(op.input_shapes)}

    # -- queries ------------------------------------------------------------------------
    def backward(self, node, cells, to, using: dict | None = None, entire_array: bool = True) -> np.ndarray:
        """Input cells of ``to`` that the ``cells`` of ``node`` depend on, over every path.

        Returns sorted unique ``(M, ndim)`` int64 coordinates.

        Examples
        --------
        >>> run.backward(t, [(1, 2)], to=x)      # doctest: +SKIP
        array([[2, 1]])
        """
        return coords_from_mask(self._walk(node, cells, to, "backward", using, entire_array))

    def forward(self, node, cells, to, using: dict | None = None, entire_array: bool = True) -> np.ndarray:
        """Cells of ``to`` whose lineage contains the ``cells`` of ``node``, over every path."""
        return coords_from_mask(self._walk(node, cells, to, "forward", using, entire_array))

    def backward_mask(self, node, cells, to, using=None, entire_array=True) -> np.ndarray:
        """`backward` as a boolean mask over ``to``'s array."""
        return self._walk(node, cells, to, "backward", using, entire_array)

    def forward_mask(self, node, cells, to, using=None, entire_array=True) -> np.ndarray:
        """`forward` as a boolean mask over ``to``'s array."""
        return self._walk(node, cells, to, "forward", using, entire_array)

    def query(self, cells, path, direction: str | None = None, using: dict | None = None,
              entire_array: bool = True) -> np.ndarray:
        """SubZero's ``execute_query(C, ((P1, idx1), ..., (Pm, idxm)))``.

        Backward when each ``P(k+1)`` is input ``idx_k`` of ``P_k`` (cells are in ``P1``'s
        output); forward when ``P(k-1)`` is input ``idx_k`` of ``P_k`` (cells are in
        ``P1``'s input ``idx1``).  A one-step path is backward unless ``direction`` says.
        """
        steps = self._check_path(path)
        direction = direction or self._path_direction(steps)
        if direction not in ("backward", "forward"):
            raise LineageError(f"direction must be 'backward' or 'forward', got {direction!r}")
        self._check_links(steps, direction)
        first, idx = steps[0]
        start = first if direction == "backward" else first.inputs[idx]
        mask = mask_from_coords(as_coords(cells, self.shape(start), f"node {start.name!r}"), self.shape(start))
        log: list[dict] = []
        for node, i in steps:
            mask = self._step(node, mask, i, direction, using, entire_array, log)
        self._record(direction, steps[0][0], steps[-1][0], log)
        return coords_from_mask(mask)

    # -- helpers --------------------------------------------------------------------------
    def profile(self, node: Node):
        """The cost-model profile of a node: calibrated, or derived from its run statistics."""
        if node.name not in self._profiles:
            from subzero.optimizer.calibrate import profile_from_run
            from subzero.optimizer.cost_model import NodeProfile

            entry = self.store.catalog["nodes"][node.name]
            if "profile" in entry:
                self._profiles[node.name] = NodeProfile.from_dict(entry["profile"])
            else:
                stats = entry.get("stats", {})
                self._profiles[node.name] = profile_from_run(
                    node.name, node.operator, stats.get("tiles", 1), stats.get("op_seconds", 0.0), stats)
        return self._profiles[node.name]

    def _step(self, node: Node, mask: np.ndarray, i: int, direction: str, using: dict | None,
              entire_array: bool, log: list) -> np.ndarray:
        """One step, by the strategy forced in ``using`` or chosen by the query-time optimizer."""
        stored = self.strategies[node.name]
        forced = next((name for ref, name in (using or {}).items() if self.node(ref) is node), None)
        cells = int(np.count_nonzero(mask))
        deadline, predicted = None, None
        if forced is not None:
            strategy = check_forced(node, stored, forced)
        else:
            choice = choose_step(self.profile(node), stored, Mode.MAP in node.operator.supported_modes(),
                                 direction, cells)
            strategy, predicted = choice.strategy, choice.predicted
            if strategy not in ("Map", "BlackBox"):
                deadline = time.perf_counter() + choice.budget
        start = time.perf_counter()
        switched, damaged = False, None
        try:
            result = step(self, node, mask, i, direction, strategy, entire_array, deadline)
        except LookupTimeout:
            switched = True
            result = step(self, node, mask, i, direction, "BlackBox", entire_array)
        except StoreError as exc:  # stored lineage is a cache: re-run the operator instead
            if forced is not None:
                raise
            damaged = str(exc)
            result = step(self, node, mask, i, direction, "BlackBox", entire_array)
        log.append({"node": node.name, "input": i, "direction": direction, "strategy": strategy,
                    "switched_to_blackbox": switched or damaged is not None, "damaged_lineage": damaged,
                    "cells_in": cells,
                    "cells_out": int(np.count_nonzero(result)), "seconds": time.perf_counter() - start,
                    "predicted_seconds": predicted})
        return result

    def _walk(self, src, cells, dst, direction, using, entire_array) -> np.ndarray:
        src, dst = self.node(src), self.node(dst)
        shape = self.shape(src)
        start = mask_from_coords(as_coords(cells, shape, f"node {src.name!r}"), shape)
        log: list[dict] = []
        result = walk(self.workflow, src, dst, direction, start,
                      lambda node, mask, i: self._step(node, mask, i, direction, using, entire_array, log),
                      self.shape(dst))
        if src is not dst:
            self._record(direction, src, dst, log)
        return result

    def _record(self, direction: str, src: Node, dst: Node, log: list[dict]) -> None:
        self.last_query = log
        self.store.log_query({"direction": direction, "from": src.name, "to": dst.name, "steps": log})

    def _check_path(self, path) -> list[tuple[Node, int]]:
        if not path:
            raise LineageError("path is empty; give ((node, input_index), ...) as in SubZero's execute_query")
        steps = []
        for item in path:
            try:
                ref, idx = item
            except (TypeError, ValueError):
                raise LineageError(f"path step {item!r} must be a (node, input_index) pair") from None
            node = self.node(ref)
            if node.is_input:
                raise LineageError(f"path step {node.name!r} is an input array, not an operator")
            if not isinstance(idx, (int, np.integer)) or not 0 <= idx < len(node.inputs):
                raise LineageError(f"path step ({node.name!r}, {idx!r}): {node.name!r} has inputs 0..{len(node.inputs) - 1}")
            steps.append((node, int(idx)))
        return steps

    @staticmethod
    def _path_direction(steps) -> str:
        if len(steps) >= 2 and steps[1][0].inputs[steps[1][1]] is steps[0][0]:
            return "forward"
        return "backward"

    @staticmethod
    def _check_links(steps, direction: str) -> None:
        for (a, ia), (b, ib) in zip(steps, steps[1:]):
            ok = a.inputs[ia] is b if direction == "backward" else b.inputs[ib] is a
            if not ok:
                raise LineageError(f"path is broken between {a.name!r} and {b.name!r} for a {direction} query")

    def __repr__(self) -> str:
        return f"<Run {self.workflow.name!r} at {self.path!r}>"


def open_run(path: str | os.PathLike) -> Run:
    """Reopen a finished run from its store directory (any process).

    Examples
    --------
    >>> run = open_run("runs/demo")       # doctest: +SKIP
    """
    store = RunStore.open(path)
    status = store.catalog.get("status")
    if status != "done":
        raise StoreError(f"run in {str(path)!r} did not finish (status {status!r}); its lineage is "
                         "incomplete, re-run the workflow into a new store")
    spec = store.catalog["workflow"]
    operators = {n["name"]: store.load_operator(n["name"]) for n in spec["nodes"] if n.get("inputs")}
    try:
        wf = Workflow.from_spec(spec["name"], spec["nodes"], operators)
    except (KeyError, TypeError) as exc:
        raise StoreError(f"store {str(path)!r} has a corrupt workflow description ({exc})") from exc
    return Run(store, wf)
