"""A finished run: its arrays, what each node stored, and lineage queries over it."""

from __future__ import annotations

import functools
import os
import threading
import time
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Literal, Sequence, TypeAlias, Union, overload

import numpy as np

from subzero import config
from subzero.catalog import NodeRecord, RunRecord
from subzero.cells import as_coords, as_boxes
from subzero.errors import LineageError, StoreError, WorkflowError
from subzero.frontier import Frontier
from subzero.modes import Direction, Strategy
from subzero.operator import Operator
from subzero.query import QueryEngine, QueryOptions, check_forced
from subzero.store import LineageReader, open_store
from subzero.store.cache import log_query, query_log
from subzero.dag import Node, Workflow

if TYPE_CHECKING:
    from astropy.table import Table
    from numpy.typing import ArrayLike

__all__ = ["Run", "open_run", "bound_operators", "run_html", "RESULT_FORMS", "Uncommitted"]

#: what ``as_`` may ask a query to return
RESULT_FORMS = ("coords", "boxes", "mask", "frontier")

#: a node, or its name, wherever a query takes one
NodeRef: TypeAlias = Union[Node, str]
#: the cells a query starts from: coordinate tuples, an ``(N, ndim)`` array, a boolean mask of
#: the node's array, or a `Frontier` (an earlier answer); a box: ``[(lo, hi), ...]`` or a list of them
Cells: TypeAlias = Union["ArrayLike", Frontier, None]
#: an answer in the form ``as_`` asks: coordinates, ``(lo, hi)`` boxes, a mask, or the `Frontier`
Answer: TypeAlias = Union[np.ndarray, tuple[np.ndarray, np.ndarray], Frontier]


class Run:
    """The result of `Workflow.run`, or of `open_run` on its store.

    Queries read stored lineage in this process, opening only the shards of the tiles
    they touch; steps through black-box nodes re-run the operator on the touched tiles
    from the stored arrays.  No Spark job, no JVM.  A thin facade: it checks the user's
    arguments and leaves planning, reading and walking to its `QueryEngine` (``lineage``).
    """

    def __init__(self, store: LineageReader, workflow: Workflow, catalog: RunRecord | None = None,
                 operators: "dict[str, Operator] | None" = None,
                 finishing: "Future[tuple[RunRecord, dict[str, Operator]]] | None" = None):
        """Open the run of ``workflow`` in ``store``.

        Parameters
        ----------
        store : LineageReader
            The run's store (`subzero.store.open_store`).
        workflow : Workflow
            The workflow that ran; it is not changed: the run binds its own graph.
        catalog : RunRecord, optional
            The store's catalog, if already read.
        operators : dict, optional
            Node name -> the operator the run computed that node with (bound, with its run
            state); a node not named uses the workflow's operator.
        finishing : concurrent.futures.Future, optional
            The run is finishing behind its return (`subzero.driver`): this gives its catalog and
            operators once it finished; the run's record, graph and queries wait for it on first use.
        """
        self.store = store
        self._rec: RunRecord | None = None
        self._graph: Workflow | None = None
        self._engine: QueryEngine | None = None
        self._finishing: "tuple[Workflow, Future[tuple[RunRecord, dict[str, Operator]]]] | None" = None
        self._binding = threading.Lock()
        self.last_query: list[dict] = []
        #: whether queries append their per-step statistics to the store's query log (``subzero
        #: explain``); the viewer turns it off: thousands of brushes, about 9 KB each, and a write each
        self.log_queries = True
        if finishing is not None:
            self._finishing = (workflow, finishing)
        else:
            self._bind(workflow, catalog if catalog is not None else store.read_catalog(), operators or {})

    def _bind(self, workflow: Workflow, catalog: RunRecord, operators: "dict[str, Operator]") -> None:
        """Take the run's catalog and bind its own graph and query engine."""
        #: the run's own graph (`Workflow.with_operators`): the workflow's nodes with their
        #: operators bound to the shapes the catalog records; the caller's workflow stays as it was
        bound = workflow.with_operators(bound_operators(workflow, catalog, operators))
        self._engine = QueryEngine(self.store, bound, catalog)
        for node in bound.nodes:  # lineage that names cells of its node's own stored output (Label's)
            if node.operator is not None and node.name in catalog.nodes and hasattr(node.operator, "attach_output"):
                node.operator.attach_output(functools.partial(_read_output, self, node.name))
        self._rec, self._graph = catalog, bound

    def _finished(self) -> None:
        """A run finishing behind its return: wait for it and bind what it committed (once); its
        failure is raised as `wait` raises it."""
        with self._binding:
            if self._finishing is None:
                return
            workflow, finishing = self._finishing
            try:
                catalog, operators = finishing.result()
            except BaseException as exc:
                wait = getattr(self.store, "wait", None)
                if wait is not None:
                    wait()  # raises the failure, naming the store and how to resume it
                raise StoreError(f"the run into {self.path!r} failed behind its return ({type(exc).__name__}: "
                                 f"{exc})") from exc
            self._bind(workflow, catalog, operators)
            self._finishing = None

    @property
    def record(self) -> RunRecord:
        """The run's catalog (`subzero.catalog.RunRecord`; of a run finishing behind its return,
        once it finished)."""
        if self._rec is None:
            self._finished()
        assert self._rec is not None
        return self._rec

    @property
    def workflow(self) -> Workflow:
        """The run's own graph: the workflow's nodes with the operators the run bound."""
        if self._graph is None:
            self._finished()
        assert self._graph is not None
        return self._graph

    @property
    def lineage(self) -> QueryEngine:
        """The run's `QueryEngine` (planning, reading and walking its queries)."""
        if self._engine is None:
            self._finished()
        assert self._engine is not None
        return self._engine

    def wait(self) -> "Run":
        """Wait until the run's store is durable, and return the run.

        A run on the local executor into a local directory returns as soon as its arrays are
        computed; its inputs, kept arrays, lineage records and catalog are written by a
        background thread (the ``write_behind`` setting).  A traced function's run whose trace
        computed every value returns even before that: storing its nodes and capturing their
        lineage continue behind it too.  Queries, `output` and `open_run` in
        this process wait for those writes by themselves; call ``wait`` before another
        process reads the store, or to see a failed write here.  The interpreter also waits
        for them at a normal exit.  A run written in the caller's thread returns at once.

        Raises
        ------
        StoreError
            Writing the store failed (a full disk...): the store holds the nodes committed
            before the failure and is resumed as after a crash (``resume=True``).

        Examples
        --------
        >>> run = wf.run(inputs, store="runs/demo", executor="local").wait()   # doctest: +SKIP
        """
        wait = getattr(self.store, "wait", None)
        if wait is not None:
            wait()
        if self._finishing is not None:
            self._finished()
        return self

    # -- what the run holds -----------------------------------------------------------
    @property
    def path(self) -> str:
        """Where the store lives (a directory or a URL)."""
        return self.store.url

    @property
    def strategies(self) -> dict[str, tuple[str, ...]]:
        """Node name -> the strategies it stored."""
        return {name: rec.strategies for name, rec in self.record.nodes.items() if rec.kind == "operator"}

    @property
    def tile_shape(self) -> Any:
        """The tile shape the run was given (a tuple, a per-node dict, or None)."""
        return self.record.tile_shape

    @property
    def catalog(self) -> RunRecord:
        """The run's catalog (`subzero.catalog.RunRecord`)."""
        return self.record

    @property
    def committed(self) -> list[str]:
        """Names of the nodes the store committed, in workflow order (every node, once the run is done)."""
        return [n.name for n in self.workflow.nodes if n.name in self.record.nodes]

    def node(self, ref: "Node | str") -> Node:
        """A committed node of the run's workflow, by name or `Node` (a `LineageError` if none)."""
        try:
            node = self.workflow.node(ref)
        except WorkflowError as exc:
            raise LineageError(str(exc)) from None
        if node.name not in self.record.nodes:  # a store opened with partial=True
            raise LineageError(f"node {node.name!r} is not committed in store {self.path!r} (the run is "
                               f"{self.record.status}); committed nodes: {', '.join(self.committed) or 'none'}")
        return node

    def node_record(self, ref: "Node | str") -> NodeRecord:
        """A committed node's catalog entry."""
        return self.record.node(self.node(ref).name)

    def shape(self, ref: "Node | str") -> tuple[int, ...]:
        """A committed node's array shape."""
        return self.node_record(ref).shape

    def output(self, ref: "Node | str") -> Any:
        """The array of a node, read-only (`subzero.store.StoredArray`): index it like a numpy
        array (reading only the chunks the index covers) or ``np.asarray`` it; its chunks'
        checksums are checked on every read (``.zarr`` gives the Zarr array).  An array the
        run did not store (``keep=``) reads the same way: the tiles an index covers are
        recomputed from the node's stored ancestors (and kept a while for the next read)."""
        from subzero.store.arrays import StoredArray

        return StoredArray(self.array(self.node(ref).name))

    def array(self, name: str) -> Any:
        """The array handle of a committed node (`subzero.store.ArrayRef`, checked against the
        catalog, or a `subzero.worker.RecomputedArray` when it was not stored)."""
        return self.lineage.array(name)

    def frontier(self, ref: NodeRef, cells: Cells = None, box: "ArrayLike | None" = None) -> Frontier:
        """The ``cells`` (or ``box``) of a node, checked, as the `Frontier` a query carries."""
        return self._start(self.node(ref), cells, box)

    # -- queries ------------------------------------------------------------------------
    @overload
    def backward(self, node: NodeRef, cells: Cells = ..., to: NodeRef | None = ..., using: dict | None = ...,
                 entire_array: bool = ..., box: "ArrayLike | None" = ..., *, as_: Literal["frontier"]) -> Frontier: ...
    @overload
    def backward(self, node: NodeRef, cells: Cells = ..., to: NodeRef | None = ..., using: dict | None = ...,
                 entire_array: bool = ..., box: "ArrayLike | None" = ..., as_: str = ...) -> Answer: ...

    def backward(self, node: NodeRef, cells: Cells = None, to: NodeRef | None = None, using: dict | None = None,
                 entire_array: bool = True, box: "ArrayLike | None" = None, as_: str = "coords") -> Answer:
        """Input cells of ``to`` that the ``cells`` (or ``box``) of ``node`` depend on, over every path.

        Parameters
        ----------
        node, to : Node or str
            Where the query starts and the ancestor it traces to.
        cells : array-like, optional
            ``(N, ndim)`` coordinates, a list of tuples, a boolean mask of ``node``'s array, or
            a `Frontier` over it (an earlier answer, in the form it has).
        box : optional
            A half-open box ``[(lo, hi), ...]`` (one pair per axis) or a list of them, instead
            of ``cells``: never expanded into cells where the steps can work on boxes.
        using : dict, optional
            Node -> strategy to force for that node's step.
        as_ : {"coords", "boxes", "mask", "frontier"}
            Sorted unique ``(M, ndim)`` int64 coordinates (default); ``(lo, hi)`` disjoint
            half-open boxes; a boolean mask of ``to``'s array; or the `Frontier` itself.

        Examples
        --------
        >>> run.backward(t, [(1, 2)], to=x)      # doctest: +SKIP
        array([[2, 1]])
        """
        return _form(self._walk(node, cells, box, to, Direction.BACKWARD, using, entire_array), as_)

    @overload
    def forward(self, node: NodeRef, cells: Cells = ..., to: NodeRef | None = ..., using: dict | None = ...,
                entire_array: bool = ..., box: "ArrayLike | None" = ..., *, as_: Literal["frontier"]) -> Frontier: ...
    @overload
    def forward(self, node: NodeRef, cells: Cells = ..., to: NodeRef | None = ..., using: dict | None = ...,
                entire_array: bool = ..., box: "ArrayLike | None" = ..., as_: str = ...) -> Answer: ...

    def forward(self, node: NodeRef, cells: Cells = None, to: NodeRef | None = None, using: dict | None = None,
                entire_array: bool = True, box: "ArrayLike | None" = None, as_: str = "coords") -> Answer:
        """Cells of ``to`` whose lineage contains the ``cells`` (or ``box``) of ``node``, over every
        path; the parameters are those of `backward`."""
        return _form(self._walk(node, cells, box, to, Direction.FORWARD, using, entire_array), as_)

    @overload
    def forward_many(self, node: NodeRef, cells: Cells = ..., to: Sequence[NodeRef] = ..., using: dict | None = ...,
                     entire_array: bool = ..., box: "ArrayLike | None" = ..., as_: Literal["frontier"] = ...,
                     cancel: Any = ...) -> dict[str, Frontier]: ...
    @overload
    def forward_many(self, node: NodeRef, cells: Cells = ..., to: Sequence[NodeRef] = ..., using: dict | None = ...,
                     entire_array: bool = ..., box: "ArrayLike | None" = ..., as_: str = ...,
                     cancel: Any = ...) -> dict[str, Answer]: ...

    def forward_many(self, node: NodeRef, cells: Cells = None, to: Sequence[NodeRef] = (), using: dict | None = None,
                     entire_array: bool = True, box: "ArrayLike | None" = None, as_: str = "frontier",
                     cancel: Any = None) -> dict[str, Frontier] | dict[str, Answer]:
        """`forward` to several nodes in one walk, each node stepping once (linked brushing).

        Returns ``{name: answer}`` for each node of ``to`` (default ``as_``: the `Frontier`);
        a node that is not a descendant of ``node`` gets an empty answer. ``cancel``, an
        event (e.g. a ``threading.Event``), stops the walk at its next step once it is set,
        with `subzero.errors.QueryCancelled`. A run answers walks from several threads at once.
        """
        return self._walk_many(node, cells, box, to, Direction.FORWARD, using, entire_array, as_, cancel)

    @overload
    def backward_many(self, node: NodeRef, cells: Cells = ..., to: Sequence[NodeRef] = ..., using: dict | None = ...,
                      entire_array: bool = ..., box: "ArrayLike | None" = ..., as_: Literal["frontier"] = ...,
                      cancel: Any = ...) -> dict[str, Frontier]: ...
    @overload
    def backward_many(self, node: NodeRef, cells: Cells = ..., to: Sequence[NodeRef] = ..., using: dict | None = ...,
                      entire_array: bool = ..., box: "ArrayLike | None" = ..., as_: str = ...,
                      cancel: Any = ...) -> dict[str, Answer]: ...

    def backward_many(self, node: NodeRef, cells: Cells = None, to: Sequence[NodeRef] = (),
                      using: dict | None = None, entire_array: bool = True, box: "ArrayLike | None" = None,
                      as_: str = "frontier", cancel: Any = None) -> dict[str, Frontier] | dict[str, Answer]:
        """`backward` to several nodes in one walk; see `forward_many`."""
        return self._walk_many(node, cells, box, to, Direction.BACKWARD, using, entire_array, as_, cancel)

    def backward_mask(self, node: NodeRef, cells: Cells = None, to: NodeRef | None = None, using: dict | None = None,
                      entire_array: bool = True, box: "ArrayLike | None" = None) -> np.ndarray:
        """`backward` as a boolean mask over ``to``'s array."""
        return self._walk(node, cells, box, to, Direction.BACKWARD, using, entire_array).mask()

    def forward_mask(self, node: NodeRef, cells: Cells = None, to: NodeRef | None = None, using: dict | None = None,
                     entire_array: bool = True, box: "ArrayLike | None" = None) -> np.ndarray:
        """`forward` as a boolean mask over ``to``'s array."""
        return self._walk(node, cells, box, to, Direction.FORWARD, using, entire_array).mask()

    def query(self, cells: Cells, path: Sequence[tuple[NodeRef, int]], direction: "Direction | str | None" = None,
              using: dict | None = None, entire_array: bool = True, as_: str = "coords") -> Answer:
        """SubZero's ``execute_query(C, ((P1, idx1), ..., (Pm, idxm)))``.

        Backward when each ``P(k+1)`` is input ``idx_k`` of ``P_k`` (cells are in ``P1``'s
        output); forward when ``P(k-1)`` is input ``idx_k`` of ``P_k`` (cells are in
        ``P1``'s input ``idx1``).  A one-step path is backward unless ``direction`` says.
        """
        steps = self._check_path(path)
        if direction is not None and direction not in ("backward", "forward"):
            raise LineageError(f"direction must be 'backward' or 'forward', got {direction!r}")
        way = Direction.parse(direction) if direction is not None else self._path_direction(steps)
        self._check_links(steps, way)
        _check_form(as_)
        plan = QueryOptions(way, self._check_using(using), entire_array)
        first, idx = steps[0]
        start = self._start(first if way is Direction.BACKWARD else first.inputs[idx], cells, None)
        frontier = self.lineage.follow(steps, start, plan)
        self._record(plan, steps[0][0], steps[-1][0])
        return _form(frontier, as_)

    # -- questions built on lineage ------------------------------------------------------------
    def lineage_table(self, node: NodeRef, over: NodeRef | None = None, flags: "ArrayLike | str | None" = None,
                      values: "ArrayLike | str | None" = None, objects: "ArrayLike | None" = None,
                      using: dict | None = None, batch_objects: int | None = 2048,
                      executor: str | None = None) -> "Table":
        """Per-object statistics of each object's backward lineage in ``over``: one labelled pass.

        Parameters
        ----------
        node : Node or str
            A node whose array labels objects (ints, 0 = background), or any node with ``objects``.
        over : Node or str, optional
            The ancestor the lineage is measured in (default: the one input ``node`` is computed
            from; a workflow with several inputs must name one).
        flags, values : array or str, optional
            Arrays of ``over``'s shape (numpy, or Zarr arrays read chunk by chunk), or names of
            stored nodes of that shape: ``flags`` nonzero = flagged; ``values`` summed, averaged
            and maximised over each lineage.
        objects : array, optional
            A label array of ``node``'s shape (numpy or Zarr), instead of its stored array.
        using : dict, optional
            Node -> strategy to read for that node's step (as in `backward`).
        batch_objects : int or None
            Carry at most this many objects at a time (neighbouring objects together), so memory
            follows one batch's lineage (None: all objects in one pass).
        executor : {"local", "spark"}, optional
            Where the batches run: this process, or Spark tasks (default: Spark when the run used
            Spark and the label array has at least 1e8 cells).

        Returns
        -------
        astropy.table.Table
            One row per label: ``label, area, bbox_r0, bbox_r1, bbox_c0, bbox_c1`` (half-open),
            ``centroid_r, centroid_c, n_lineage``, and ``n_flagged, flagged_fraction`` with
            ``flags``, ``values_sum, values_mean, values_max`` with ``values`` (``.to_pandas()``).

        Examples
        --------
        >>> run.lineage_table("stars", over="exposure_1", flags=cosmic_mask)   # doctest: +SKIP
        """
        from subzero.stats import lineage_table

        return lineage_table(self, node, over, flags=flags, values=values, objects=objects, using=using,
                             batch_objects=batch_objects, executor=executor, opener=open_run)

    def contamination_count(self, src: NodeRef, flags: "ArrayLike | str", to: NodeRef, using: dict | None = None,
                            batch_cells: int | None = None, out: str | None = None, sparse: bool = False,
                            executor: str | None = None) -> Any:
        """For each cell of ``to``, how many distinct flagged cells of ``src`` its backward lineage
        holds (see `subzero.stats.contamination_count`): flagged cells carried forward in batches,
        as Spark tasks for large arrays of runs made on Spark.

        Parameters
        ----------
        src, to : Node or str
            The flagged ancestor and the descendant whose cells are counted.
        flags : array or str
            Nonzero = flagged: an array of ``src``'s shape (numpy, or Zarr read chunk by chunk) or
            a stored node's name.
        out : str, optional
            Write the counts chunk by chunk into this new Zarr array (returned) instead of memory.
        sparse : bool
            Return ``(flat cell ids, counts)`` of the cells with a nonzero count.
        executor : {"local", "spark"}, optional
            Where the batches run (default: Spark when the run used Spark and ``to`` has at least
            1e8 cells).

        Returns
        -------
        numpy.ndarray or tuple or zarr.Array
            Dense int64 counts of ``to``'s shape, the sparse pairs, or the written array.
        """
        from subzero.stats import contamination_count

        return contamination_count(self, src, flags, to, using=using, batch_cells=batch_cells, out=out,
                                   sparse=sparse, executor=executor, opener=open_run)

    # -- helpers --------------------------------------------------------------------------
    def profile(self, node: Node) -> Any:
        """The cost-model profile of a node: calibrated, or derived from its run statistics."""
        return self.lineage.profile(node)

    def _start(self, node: Node, cells, box) -> Frontier:
        shape = self.shape(node)
        where = f"node {node.name!r}"
        if isinstance(cells, Frontier):  # an answer carried on (brushing, replay): already checked
            if box is not None:
                raise LineageError(f"give cells or box for {where}, not both")
            if cells.shape != tuple(shape):
                raise LineageError(f"a Frontier of shape {cells.shape} cannot start a query at {where} of shape "
                                   f"{tuple(shape)}")
            return cells
        if box is not None:
            if cells is not None:
                raise LineageError(f"give cells or box for {where}, not both")
            lo, hi = as_boxes(box, shape, where)
            return Frontier.of_boxes(lo, hi, shape)
        if cells is None:
            raise LineageError(f"give the cells (or a box=) of {where} to start the query from")
        return Frontier.of_coords(as_coords(cells, shape, where), shape)

    def _check_using(self, using) -> dict[Node, Strategy]:
        if using is None:
            return {}
        if not isinstance(using, dict):
            raise LineageError(f"using= must be a dict of node -> strategy name, e.g. {{'blur': 'FullOne'}}, "
                               f"got {type(using).__name__}")
        out = {}
        for ref, name in using.items():
            node = self.node(ref)
            if node.is_input:
                raise LineageError(f"using= names {node.name!r}, an input array: inputs have no lineage step, so "
                                   "nothing to force")
            out[node] = check_forced(node, self.strategies.get(node.name, ()), name)
        return out

    def _walk(self, src, cells, box, dst, direction: Direction, using, entire_array) -> Frontier:
        if dst is None:
            raise LineageError(f"give to= (the node to trace {direction} to)")
        src, dst = self.node(src), self.node(dst)
        plan = QueryOptions(direction, self._check_using(using), entire_array)
        result = self.lineage.walk(src, dst, self._start(src, cells, box), plan)
        if src is not dst:
            self._record(plan, src, dst)
        return result

    def _walk_many(self, src, cells, box, dsts, direction: Direction, using, entire_array, as_,
                   cancel: Any = None) -> dict:
        _check_form(as_)
        src, dsts = self.node(src), [self.node(d) for d in dsts]
        plan = QueryOptions(direction, self._check_using(using), entire_array, cancel=cancel)
        got = self.lineage.walk_many(src, dsts, self._start(src, cells, box), plan)
        self._record(plan, src, dsts)
        return {d.name: _form(f if f is not None else Frontier.empty(self.shape(d)), as_) for d, f in got.items()}

    def _record(self, plan: QueryOptions, src: Node, dst: "Node | list[Node]") -> None:
        self.last_query = plan.log
        if not self.log_queries:
            return
        to = [d.name for d in dst] if isinstance(dst, list) else dst.name
        log_query(self.path, {"direction": plan.direction.value, "from": src.name, "to": to, "steps": plan.log})

    def query_log(self) -> list[dict]:
        """The queries run on this store from this machine (per-step statistics)."""
        return query_log(self.path)

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
    def _path_direction(steps) -> Direction:
        if len(steps) >= 2 and steps[1][0].inputs[steps[1][1]] is steps[0][0]:
            return Direction.FORWARD
        return Direction.BACKWARD

    @staticmethod
    def _check_links(steps, direction: Direction) -> None:
        for (a, ia), (b, ib) in zip(steps, steps[1:]):
            ok = a.inputs[ia] is b if direction is Direction.BACKWARD else b.inputs[ib] is a
            if not ok:
                raise LineageError(f"path is broken between {a.name!r} and {b.name!r} for a {direction} query")

    # -- in a notebook --------------------------------------------------------------------
    def view(self, warm: bool = True) -> Any:
        """The viewer of this run inside a Jupyter notebook: the page of ``subzero view`` as a
        widget (`subzero.tools.view.widget.ViewerWidget`; needs ``anywidget``), with the brush
        readable (``w.selection``) and settable (``w.show(cells, node=...)``) from Python.

        Parameters
        ----------
        warm : bool
            Make every 2-D node's overview tile at once, on a background thread.

        Examples
        --------
        >>> w = run.view()                               # doctest: +SKIP
        >>> w.show([(3, 4)], node="bright")              # doctest: +SKIP
        >>> w.selection.cells.tolist()                   # doctest: +SKIP
        [[3, 4]]
        """
        try:
            from subzero.tools.view.widget import ViewerWidget
        except ImportError as exc:
            raise WorkflowError(f"run.view() needs the notebook extra ({exc.name or exc} is missing): "
                                "pip install 'subzero[notebook]'") from None
        return ViewerWidget(self, warm=warm)

    def __repr__(self) -> str:
        nodes = len(self.record.nodes)
        return (f"<Run {self.workflow.name!r} at {self.path!r}: {self.record.status}, {nodes} node"
                f"{'' if nodes == 1 else 's'}, {self.record.executor}>")

    def _repr_html_(self) -> str:
        """The run as a notebook shows it: its facts and one table row per node."""
        return run_html(self.record, self.path, self.store)


def _size(n: int | None) -> str:
    if n is None:
        return "?"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"


def run_html(record: RunRecord, path: str, store: LineageReader | None = None) -> str:
    """An HTML summary of a run (what `Run._repr_html_` shows): the store, workflow, status
    and executor, then per node its operator, shape, dtype, strategies, lineage bytes, whether
    its array is stored (and its bytes on disk, when ``store`` can tell) and flags (a coarse
    step, inferred lineage, not committed). Every value is HTML-escaped.

    Examples
    --------
    >>> "<table" in run_html(run.catalog, run.path)     # doctest: +SKIP
    True
    """
    from html import escape

    specs = list(record.workflow.get("nodes", []))
    where = record.executor + (f" ({record.master})" if record.master else "")
    facts = [("store", path), ("workflow", str(record.workflow.get("name", ""))), ("status", record.status),
             ("executor", where), ("created", record.created)]
    if record.wall_seconds is not None:
        facts.append(("wall time", f"{record.wall_seconds:.2f} s"))
    head = ("node", "operator", "shape", "dtype", "strategies", "lineage", "array stored", "flags")
    rows = []
    for spec in specs:
        name = str(spec["name"])
        rec = record.nodes.get(name)
        params = spec.get("params") or {}
        operator = str(spec.get("operator") or "").rsplit(".", 1)[-1] if spec.get("inputs") else "input"
        flags = []
        if params.get("coarse"):
            flags.append(f"coarse: {params.get('reason') or 'every output cell depends on every cell read'}")
        if params.get("lineage_source") == "inferred":
            flags.append(f"lineage inferred ({params.get('lineage')})")
        if rec is None:
            rows.append((name, operator, "", "", "", "", "", "; ".join(flags + ["not committed"])))
            continue
        on_disk = store.disk_bytes(name) if store is not None else None
        lineage = sum(rec.stats.bytes.values()) if rec.stats is not None else 0
        stored = "?" if on_disk is None else (f"yes, {_size(on_disk)}" if on_disk else "no (recomputed)")
        rows.append((name, operator, " \u00d7 ".join(map(str, rec.shape)) or "()", rec.dtype,
                     ", ".join(rec.strategies) or ("-" if rec.kind == "input" else "none"),
                     _size(lineage) if rec.kind == "operator" else "-", stored, "; ".join(flags)))
    cell = 'style="text-align:left;padding:1px 8px"'
    html = ['<div class="subzero-run">', f"<p><b>subzero run</b> {escape(str(record.workflow.get('name', '')))}</p>",
            "<table>"]
    html += [f"<tr><th {cell}>{escape(k)}</th><td {cell}>{escape(str(v))}</td></tr>" for k, v in facts]
    html += ["</table>", "<table>", "<tr>" + "".join(f"<th {cell}>{escape(h)}</th>" for h in head) + "</tr>"]
    html += ["<tr>" + "".join(f"<td {cell}>{escape(str(v))}</td>" for v in row) + "</tr>" for row in rows]
    html += ["</table>", "</div>"]
    return "\n".join(html)


def _check_form(as_: str) -> None:
    if as_ not in RESULT_FORMS:
        raise LineageError(f"as_={as_!r} is not a result form; use one of {', '.join(RESULT_FORMS)}")


def _form(frontier: Frontier, as_: str) -> Answer:
    _check_form(as_)
    if as_ == "coords":
        return frontier.coords()
    if as_ == "boxes":
        return frontier.boxes()
    if as_ == "mask":
        return frontier.mask()
    return frontier


def _read_output(run: "Run", name: str, box) -> np.ndarray:
    """The cells of node ``name``'s stored output in ``box`` (what `Run` attaches to operators
    whose stored lineage refers to their own output)."""
    return run.array(name).read(box)


def bound_operators(workflow: Workflow, catalog: RunRecord,
                    operators: "dict[str, Operator]") -> "dict[str, Operator]":
    """Node name -> the operator a run's queries use for each committed node of ``workflow``:
    ``operators``' (else the workflow's), bound to the shapes ``catalog`` records (a copy:
    neither the workflow's nor ``operators``' objects change).  An operator of ``operators``
    the run bound to those shapes already (the driver's, each node's own copy) is used as it
    is, unless the run changes it (``attach_output``): no copy per node per run."""
    out = {}
    for node in workflow.nodes:
        if node.operator is not None and node.name in catalog.nodes:
            mine = operators.get(node.name)
            op = node.operator if mine is None else mine
            shapes = tuple(catalog.nodes[i.name].shape for i in node.inputs)
            shape = catalog.nodes[node.name].shape
            if mine is not None and mine.input_shapes == shapes and mine.output_shape == shape \
                    and not hasattr(mine, "attach_output"):
                out[node.name] = mine
            else:
                out[node.name] = op.bound(shapes, shape)
    return out


class Uncommitted(Operator):
    """Stands in for the operator of a node that a partial store never committed
    (`open_run` with ``partial=True``): it names the operator, and cannot run or map."""

    def __init__(self, declared: str):
        self.declared = declared

    @property
    def name(self) -> str:
        """The operator's class name, as the workflow description gives it."""
        return self.declared.rsplit(".", 1)[-1]

    def run(self, ctx: Any, *inputs: Any) -> Any:
        """Refuse to run: the operator was never committed."""
        raise StoreError(f"the operator {self.declared} was not committed to this store; re-run the workflow")


def _after_live_writer(store: LineageReader, catalog: RunRecord) -> RunRecord:
    """The catalog of a store that says it is still running, read again until it is done while a
    live process holds its writer lock (a run in another process, or the writes it does behind
    the run it returned), for at most ``open_wait_seconds``."""
    deadline = time.monotonic() + float(config.get("open_wait_seconds"))
    while catalog.status == "running" and time.monotonic() < deadline:
        who = store.writer()
        if who is None or not who.alive:
            break
        time.sleep(0.05)
        catalog = store.read_catalog()
    return catalog


def open_run(path: "str | os.PathLike", partial: bool = False, storage_options: dict | None = None) -> Run:
    """Reopen a run from its store (a directory or an fsspec URL), in any process.

    Parameters
    ----------
    path
        The store given to `Workflow.run`.
    partial
        Also open a run that did not finish (failed, interrupted, or still running): the
        `Run` then answers over its committed nodes only (`Run.committed`; a query that
        names another node is a `LineageError`).  Without it, such a store is refused.
    storage_options
        fsspec options of the store's file system (as given to `Workflow.run`).

    Examples
    --------
    >>> run = open_run("runs/demo")       # doctest: +SKIP
    """
    from subzero.store.location import resolve

    store = open_store(resolve(path, storage_options))
    catalog = store.read_catalog()
    if catalog.status == "running" and not partial:
        catalog = _after_live_writer(store, catalog)
    if catalog.status != "done" and not partial:
        who = store.writer() if catalog.status == "running" else None
        if who is not None and who.alive:
            raise StoreError(f"run in {store.url!r} is still being written by {who.describe()} (waited "
                             f"{config.get('open_wait_seconds'):g} s, the open_wait_seconds setting): wait for it "
                             "to finish, or open it with partial=True to query the nodes it has committed")
        if catalog.status == "running":  # its writer may have finished since the catalog was read
            catalog = store.read_catalog()
    if catalog.status != "done" and not partial:
        raise StoreError(f"run in {store.url!r} did not finish (status {catalog.status!r}); its lineage is "
                         "incomplete: resume it (--resume) or re-run the workflow (`subzero info` and "
                         "`subzero explain` show what it committed)")
    spec = catalog.workflow
    try:
        operators = {n["name"]: store.load_operator(n["name"]) if n["name"] in catalog.nodes or not partial
                     else Uncommitted(str(n.get("operator", "?"))) for n in spec["nodes"] if n.get("inputs")}
        wf = Workflow.from_spec(spec["name"], spec["nodes"], operators)
    except (KeyError, TypeError) as exc:
        raise StoreError(f"store {store.url!r} has a corrupt workflow description ({exc})") from exc
    missing = [n.name for n in wf.nodes if n.name not in catalog.nodes]
    if missing and catalog.status == "done":
        raise StoreError(f"store {store.url!r} is marked done but its catalog lacks node(s) {missing}; the store "
                         "is damaged: re-run the workflow")
    orphans = [n.name for n in wf.nodes if n.name in catalog.nodes and any(i.name not in catalog.nodes for i in n.inputs)]
    if orphans:  # nodes commit after their inputs: anything else is a damaged catalog
        raise StoreError(f"store {store.url!r} has node(s) {orphans} committed without their inputs; the store is "
                         "damaged: re-run the workflow")
    return Run(store, wf, catalog)
