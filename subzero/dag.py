"""Workflows: a DAG of named nodes, each an input array or an operator applied to nodes."""

from __future__ import annotations

import copy
import os
import re
from dataclasses import dataclass, field
from typing import Any

from subzero.errors import WorkflowError
from subzero.operator import Operator

__all__ = ["Node", "Workflow"]

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]*$")


@dataclass(eq=False)
class Node:
    """A node of a workflow: an input (``operator is None``) or an operator's output."""

    name: str
    operator: Operator | None
    inputs: tuple["Node", ...] = ()
    workflow: "Workflow | None" = field(default=None, repr=False)

    @property
    def is_input(self) -> bool:
        """True for an input node (no operator)."""
        return self.operator is None

    def __repr__(self) -> str:
        if self.is_input:
            return f"<input {self.name!r}>"
        return f"<node {self.name!r}: {type(self.operator).__name__}({', '.join(n.name for n in self.inputs)})>"

    def __hash__(self) -> int:
        return id(self)


class Workflow:
    """A directed acyclic graph of array operators.

    Examples
    --------
    >>> import subzero as sz
    >>> wf = sz.Workflow("demo")
    >>> x = wf.input("x")
    >>> t = wf.add(sz.operators.Transpose(), x, name="t")
    >>> [n.name for n in wf.nodes]
    ['x', 't']
    """

    def __init__(self, name: str = "workflow"):
        self.name = name
        self._nodes: dict[str, Node] = {}
        #: input name -> array for the inputs a traced function captured (constants, array
        #: parameters): `run` binds them unless ``inputs`` gives them
        self.constants: dict[str, Any] = {}
        #: the nodes a traced function returned (some may be read by other nodes too): outputs
        self.results: list[str] = []

    # -- building -----------------------------------------------------------------------
    def input(self, name: str) -> Node:
        """Declare a named input array, bound when the workflow runs."""
        return self._register(Node(self._check_name(name), None, (), self))

    def add(self, op: Operator, *inputs: Node, name: str | None = None) -> Node:
        """Apply ``op`` to ``inputs`` (nodes of this workflow); return the new node (it carries a
        shallow copy of ``op``: changing ``op`` afterwards does not change the workflow)."""
        return self._add(copy.copy(op) if isinstance(op, Operator) else op, inputs, name)

    def _add(self, op: Operator, inputs: tuple[Node, ...], name: str | None) -> Node:
        """`add` without the copy: the node carries ``op`` itself."""
        if not isinstance(op, Operator):
            raise WorkflowError(f"wf.add expects a subzero Operator instance, got {type(op).__name__}; "
                                "subclass sz.Operator and pass an instance")
        for k, node in enumerate(inputs):
            if not isinstance(node, Node) or self._nodes.get(node.name) is not node:
                raise WorkflowError(
                    f"input {k} of {type(op).__name__} is {node!r}, not a node of workflow {self.name!r}; "
                    "pass nodes returned by wf.input() or wf.add() of this workflow")
        if not inputs:
            raise WorkflowError(f"{type(op).__name__} needs at least one input node")
        arity = op.n_inputs
        if arity is not None and arity != len(inputs):
            raise WorkflowError(f"{type(op).__name__}.run takes {arity} input(s), got {len(inputs)}")
        if name is None:
            base = type(op).__name__.lower()
            name = base if base not in self._nodes else next(
                f"{base}_{k}" for k in range(1, len(self._nodes) + 2) if f"{base}_{k}" not in self._nodes)
        return self._register(Node(self._check_name(name), op, tuple(inputs), self))

    def _check_name(self, name: str) -> str:
        if not isinstance(name, str) or not _NAME.match(name):
            raise WorkflowError(f"node name {name!r} is invalid; use letters, digits, '_', '.', '-' "
                                "starting with a letter or '_'")
        if name in self._nodes:
            raise WorkflowError(f"workflow {self.name!r} already has a node named {name!r}")
        return name

    def _register(self, node: Node) -> Node:
        self._nodes[node.name] = node
        return node

    # -- reading ------------------------------------------------------------------------
    @property
    def nodes(self) -> list[Node]:
        """Nodes in topological order (the order they were added)."""
        return list(self._nodes.values())

    @property
    def inputs(self) -> list[Node]:
        """The input nodes, in the order they were added."""
        return [n for n in self._nodes.values() if n.is_input]

    @property
    def outputs(self) -> list[Node]:
        """The workflow's results: the nodes no other node reads, and those a traced function
        returned (`results`)."""
        used = {id(i) for n in self._nodes.values() for i in n.inputs}
        return [n for n in self._nodes.values()
                if not n.is_input and (id(n) not in used or n.name in self.results)]

    def node(self, ref: "Node | str") -> Node:
        """Resolve a node or a node name to this workflow's node."""
        if isinstance(ref, Node):
            if self._nodes.get(ref.name) is ref:
                return ref
            if ref.name in self._nodes and ref.workflow is not None and ref.workflow.name == self.name:
                return self._nodes[ref.name]
            raise WorkflowError(f"{ref!r} is not a node of workflow {self.name!r}")
        if isinstance(ref, str) and ref in self._nodes:
            return self._nodes[ref]
        raise WorkflowError(f"unknown node {ref!r} in workflow {self.name!r}; "
                            f"known nodes: {', '.join(self._nodes)}")

    def consumers(self, node: Node) -> list[tuple[Node, int]]:
        """(node, input index) pairs that read ``node``."""
        return [(n, i) for n in self._nodes.values() for i, src in enumerate(n.inputs) if src is node]

    def ancestors(self, node: Node) -> set[Node]:
        """``node`` and every node it is computed from (a new set; remembered until a node
        is added: every step of a query's walk asks)."""
        memo = self.__dict__.setdefault("_ancestors", {})
        key = (node.name, len(self._nodes))
        if key not in memo or memo[key][0] is not node:
            seen, todo = {node}, [node]
            while todo:
                for parent in todo.pop().inputs:
                    if parent not in seen:
                        seen.add(parent)
                        todo.append(parent)
            memo[key] = (node, frozenset(seen))
        return set(memo[key][1])

    def descendants(self, node: Node) -> set[Node]:
        """``node`` and every node computed from it (a new set; remembered as `ancestors`)."""
        memo = self.__dict__.setdefault("_descendants", {})
        key = (node.name, len(self._nodes))
        if key not in memo or memo[key][0] is not node:
            seen = {node}
            for other in self._nodes.values():  # insertion order is topological
                if any(i in seen for i in other.inputs):
                    seen.add(other)
            memo[key] = (node, frozenset(seen))
        return set(memo[key][1])

    def between(self, low: Node, high: Node) -> list[Node]:
        """Nodes on some path from ``low`` up to ``high`` (both included), in topological order
        (remembered until a node is added: the optimizer asks for each query's path per node)."""
        paths = self.__dict__.setdefault("_paths", {})
        key = (low.name, high.name, len(self._nodes))
        if key not in paths:
            on_path = self.ancestors(high) & self.descendants(low)
            paths[key] = [n for n in self._nodes.values() if n in on_path]
        return list(paths[key])

    # -- serialization ----------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """A JSON-able description (operators by class and arguments; the store keeps them pickled)."""
        return {
            "name": self.name,
            "nodes": [
                {"name": n.name, "inputs": [i.name for i in n.inputs]}
                | ({} if n.is_input else {"operator": f"{type(n.operator).__module__}.{type(n.operator).__qualname__}",
                                          "params": _jsonable(n.operator.params())})
                for n in self._nodes.values()
            ],
        }

    @classmethod
    def from_spec(cls, name: str, nodes: list[dict[str, Any]], operators: dict[str, Operator]) -> "Workflow":
        """Rebuild a workflow from its description and its operators, validating the DAG."""
        wf = cls(name)
        pending = {spec["name"]: spec for spec in nodes}
        while pending:
            # the first node whose inputs exist: a description in topological order keeps its order
            ready = [next((s for s in pending.values() if all(i in wf._nodes for i in s.get("inputs", []))), None)]
            ready = [s for s in ready if s is not None]
            if not ready:
                unknown = sorted({i for s in pending.values() for i in s.get("inputs", [])} - set(pending) - set(wf._nodes))
                if unknown:
                    raise WorkflowError(f"workflow {name!r} refers to unknown input node(s) {unknown}")
                raise WorkflowError(f"workflow {name!r} has a cycle through nodes {sorted(pending)}")
            for spec in ready:
                del pending[spec["name"]]
                if not spec.get("inputs"):
                    wf.input(spec["name"])
                else:
                    if spec["name"] not in operators:
                        raise WorkflowError(f"workflow {name!r}: node {spec['name']!r} has no operator")
                    # the given operator itself (a stored one, loaded for this workflow), not a copy
                    wf._add(operators[spec["name"]], tuple(wf._nodes[i] for i in spec["inputs"]), spec["name"])
        return wf

    def with_operators(self, operators: "dict[str, Operator]") -> "Workflow":
        """A new workflow of the same name and graph whose operator nodes carry ``operators``
        (node name -> operator; a node not named keeps its own), the objects themselves, not copies.

        This workflow is left as it is: a run binds its own graph this way (its nodes'
        operators bound to their shapes, with their run state), so that the workflow a user
        built stays the specification it was.

        Parameters
        ----------
        operators : dict
            Node name -> the operator the new graph's node carries.

        Returns
        -------
        Workflow
            New `Node` objects, with the same names and edges, in the same order.
        """
        unknown = sorted(set(operators) - {n.name for n in self._nodes.values() if not n.is_input})
        if unknown:
            raise WorkflowError(f"workflow {self.name!r} has no operator node(s) {unknown}; "
                                f"its operator nodes: {[n.name for n in self.nodes if not n.is_input]}")
        graph = Workflow(self.name)
        for node in self._nodes.values():
            op = None if node.is_input else operators.get(node.name, node.operator)
            graph._register(Node(node.name, op, tuple(graph._nodes[i.name] for i in node.inputs), graph))
        return graph

    # -- running --------------------------------------------------------------------------
    def run(self, inputs: dict[str, Any], store: "str | os.PathLike[str]", strategies: dict | None = None,
            max_disk: float | None = None, max_runtime: float | None = None, workload: Any = None,
            executor: str = "spark", spark: Any = None, tile_shape: int | tuple[int, ...] | None = None,
            overwrite: bool = False, resume: bool = False, progress: Any = None, input_metadata: dict | None = None,
            storage_options: dict | None = None, keep: Any = "needed", _known: Any = None, _copies: Any = None) -> Any:
        """Execute the workflow, record lineage, and return the `Run` to query.

        Parameters
        ----------
        inputs : dict
            Input name -> numpy array, or a Zarr array (read tile by tile by the tasks:
            inputs larger than memory); every ``wf.input`` must be bound.
        store : path or URL
            A new directory, or an fsspec URL (``s3://...``), for this run's arrays,
            lineage and catalog; refused if it holds anything (see ``overwrite``).
        strategies : dict, optional
            Node (or node name) -> strategy name or list of names; nodes not given
            are chosen by the optimizer.
        max_disk, max_runtime, workload
            Budgets and sample queries for the optimizer.
        executor : {"spark", "local"}
            Spark tasks over tiles (default), or in-process.
        spark : SparkSession, optional
            A session to use instead of the embedded ``local[*]`` one.
        tile_shape : int or tuple, optional
            Tile lengths for tiled operators (default: 1/64 of the array, between 65,536
            and about 4 million cells per tile).
        overwrite : bool
            Replace a store subzero made (never a directory it did not make, nor one a
            live run is writing).
        resume : bool
            Continue the run a crash, a ``kill`` or a failure left in ``store``: its
            committed nodes (arrays, lineage) are kept and only the others run.  Refused,
            naming what differs, unless the workflow (its nodes, operators' code and
            arguments), the settings (tile shape, strategies, workload, budgets) and the
            inputs' values are those of the stored run.  A store with nothing to continue
            (none yet, or empty) starts afresh; a finished run is returned as it is.
        progress : subzero.progress.Reporter, optional
            Told how the run advances (``node_started``, ``tiles_done``, ``node_finished``).
        input_metadata : dict, optional
            Input name -> a JSON-able dict kept with that input in the catalog (the command
            line keeps a FITS input's header there, and writes it back on FITS export).
        storage_options : dict, optional
            fsspec options of the store's file system, e.g. ``{"endpoint_url":
            "http://127.0.0.1:9000"}`` for an S3-compatible service; they travel with the
            store to the tasks.  Without them, fsspec's configuration and the environment
            (``AWS_ENDPOINT_URL``, ``FSSPEC_S3_ENDPOINT_URL``) apply.
        keep : "needed", "all", or a list of nodes
            Which arrays the store keeps.  ``"needed"`` (the default): the inputs, the
            outputs (nodes no other node reads) and the nodes the ``workload`` queries; an
            intermediate array is not written (on the local executor it is held in memory
            until its readers ran), and reading it (`Run.output`, a query that re-runs a
            node over it) recomputes the tiles asked for from its stored ancestors.
            ``"all"`` stores every array; a list stores those nodes as well.

        Returns
        -------
        subzero.run.Run
            The finished run, to query (typed ``Any`` here: the workflow module does not
            import the layers above it).

        Notes
        -----
        This is a convenience entry point: `subzero.driver.execute` runs the workflow.
        The workflow is not changed by running it: the run binds its own graph
        (`with_operators`), held by the returned `Run`.  The driver is imported here, on
        the first run (as dask's ``compute`` imports its scheduler): the one import from
        this module upward, allowed by name in tests/test_architecture.py.  ``_known`` is
        private: a traced function's run hands over the values its trace computed on these
        very inputs (`RunOptions._known`), and ``_copies`` the copies of its inputs it started
        before tracing (`RunOptions._copies`).
        """
        from subzero.driver import RunOptions, execute

        if self.constants:  # the arrays a traced function captured
            inputs = {**self.constants, **dict(inputs)}
        return execute(self, inputs, RunOptions(
            store, strategies=strategies, max_disk=max_disk, max_runtime=max_runtime, workload=workload,
            executor=executor, spark=spark, tile_shape=tile_shape, overwrite=overwrite, resume=resume,
            progress=progress, input_metadata=input_metadata, storage_options=storage_options, keep=keep,
            _known=_known, _copies=_copies))

    def __repr__(self) -> str:
        return f"Workflow({self.name!r}, nodes={list(self._nodes)})"


def _jsonable(value):
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (int, float, str, bool)) or value is None:
        return value
    return repr(value)
