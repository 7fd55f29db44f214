"""The tracer: records the operators a traced function applies, then builds the workflow.

Nodes are named when the trace ends: first the names the user gave (`subzero.name`, the
returned dict's keys, the function's parameters), then automatic names from the numpy or
scipy call (``gaussian_filter``, ``gaussian_filter_1``, ...) in call order, so the same
function always gives the same names.

A trace over real inputs also knows values, computed when Python asks for one (``bool``,
``int``, a loop bound, a data-dependent shape) from the inputs, memoized per entry: the
workflow is then the path this run took (`Tracer.specialized`), as lazy tensors compute on
demand.  Every such decision and every coarse step is recorded (`Tracer.events`) with the
user's line, for the trace report.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import time
import warnings
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, ContextManager

import numpy as np

from subzero.errors import WorkflowError
from subzero.operator import Operator
from subzero.operators.shape import Slice
from subzero.oracle import evaluate_operator, run_plain
from subzero.tiling import Elementwise, Halo
from subzero.trace.errors import ControlFlowError, TraceError
from subzero.dag import Workflow

__all__ = ["Entry", "Event", "Tracer", "current_tracer", "add_trace_context", "trace_contexts", "outside_trace"]

#: the smallest values (bytes) a trace that drops dead values (`Tracer.drop_dead`) lets go of: smaller
#: ones cost no page faults worth a sweep
DEAD_BYTES = 1 << 18

#: numpy's floating-point error handling when nothing changed it
_DEFAULT_ERRSTATE = {"divide": "warn", "over": "warn", "under": "ignore", "invalid": "warn"}

#: context managers entered around every trace (front ends above this package register theirs:
#: ``subzero.ndimage`` routes scipy.ndimage calls made inside libraries to its operators)
_TRACE_CONTEXTS: list[Callable[[], ContextManager[Any]]] = []


def add_trace_context(factory: Callable[[], ContextManager[Any]]) -> None:
    """Enter ``factory()`` around every trace from now on (once per factory)."""
    if factory not in _TRACE_CONTEXTS:
        _TRACE_CONTEXTS.append(factory)


@contextlib.contextmanager
def trace_contexts() -> Iterator[None]:
    """The registered trace contexts, entered in registration order."""
    with contextlib.ExitStack() as stack:
        for factory in list(_TRACE_CONTEXTS):
            stack.enter_context(factory())
        yield

_CURRENT: contextvars.ContextVar["Tracer | None"] = contextvars.ContextVar("subzero_tracer", default=None)


@dataclass(eq=False)
class Entry:
    """One node to be: an input (``op is None``) or an operator applied to entries."""

    base: str
    op: Operator | None
    inputs: tuple["Entry", ...] = ()
    shape: tuple[int, ...] = ()
    name: str | None = None          # fixed by the user (or an input's parameter name)
    line: str = ""                   # the user's line that made it
    constant: bool = False           # an array the function captured (an input the workflow carries)
    value: Any = field(default=None, repr=False)   # the values, once computed (or given)
    seconds: float = 0.0             # how long computing its values took (0: given, or not computed)
    order: int = 0                   # its place in call order (topological)
    #: ``op`` bound to the entries' shapes (`bound_op`), made once for every question the trace asks of it
    bound: Operator | None = field(default=None, repr=False)
    #: the entries recorded since that read this one's values
    readers: list["Entry"] = field(default_factory=list, repr=False)

    def bound_op(self) -> Operator:
        """``op`` bound to its inputs' shapes and this entry's, as the run binds it (made once)."""
        if self.bound is None:
            if self.op is None:
                raise TraceError(f"the input {self.name!r} has no operator to bind")
            self.bound = self.op.bound([i.shape for i in self.inputs], self.shape)
        return self.bound


@dataclass(frozen=True)
class Event:
    """Something the trace decided on values or made coarse, for the trace report.

    ``kind`` is ``"value"`` (Python asked for a value: the path is this run's),
    ``"coarse"`` (a step whose lineage is all-to-all over what it read) or ``"leak"``
    (a library turned a traced array into numpy values).
    """

    kind: str
    line: str
    what: str


class Tracer:
    """Collects entries while a function is traced; `build` turns them into a `Workflow`."""

    def __init__(self, name: str, eager_bytes: int | None = None, drop_dead: bool = False):
        self.name = name
        #: let go of a step's values once nothing needs them (`_drop_dead`): every reader recorded has its
        #: values, no traced array of the function stands for it, it is no output, no named node and no
        #: array numpy code holds; they are handed to the run as their dtype (`dead`), as numpy frees a
        #: temporary after its last reader (a run that stores only its outputs: nothing else reads them)
        self.drop_dead = drop_dead
        #: the traced arrays made under this tracer, while something holds them (`hold`)
        self._arrays: "weakref.WeakSet[Any]" = weakref.WeakSet()
        #: id(entry) -> entry: the steps whose values this trace computed itself that it may let go of
        self._droppable: dict[int, Entry] = {}
        #: id(entry) -> the dtype of the values `_drop_dead` let go of (recomputed from its inputs when read)
        self.dead: dict[int, np.dtype] = {}
        #: evaluate each step as it is recorded while the values computed so far hold at most this
        #: many bytes (None: only when Python asks for a value); past it, values are computed on demand
        self.eager_bytes = eager_bytes
        #: bytes of the values computed so far (the inputs' own arrays are not counted)
        self.value_bytes = 0
        self._pending: Entry | None = None  # the step recorded last: evaluated when the next one is
        self._names: dict[int, str] = {}  # id(entry) -> its node's name, once built
        self._exposed: list[Entry] = []  # entries whose own values numpy code outside subzero holds (`leak`)
        self.entries: list[Entry] = []
        self.outputs: list[Entry] = []  # the entries the traced function returned, in order
        self.events: list[Event] = []
        self.leaked: list[Entry] = []
        self._inputs_without_values = 0
        #: id(entry) -> the dtype of the values `evaluate_rest` computed for it, then computed a reader
        #: into (their array now holds the reader's values)
        self.dropped: dict[int, np.dtype] = {}
        #: id(entry) of the steps `evaluate_rest` evaluated: those the trace would have left to the run
        self.left: set[int] = set()

    def input(self, name: str, shape: tuple[int, ...], value: Any = None) -> Entry:
        """Record an input of ``shape`` named ``name`` (its values, when known); its entry."""
        entry = Entry(name, None, (), tuple(shape), name=name, value=value, order=len(self.entries))
        self.entries.append(entry)
        self._inputs_without_values += value is None
        return entry

    def constant(self, value: np.ndarray, line: str = "", owned: bool = False) -> Entry:
        """Record an array the function captured as an input the workflow carries (tiled
        like any input, so it never meets a tile of another shape); its entry.  The values it
        has now are kept (a copy, unless ``owned``: no one else holds the array), since the
        code may write into it afterwards (a library's ``np.add(out, x, out=out)``)."""
        value = np.asarray(value) if owned else np.array(value, copy=True)
        entry = Entry("constant", None, (), tuple(int(n) for n in value.shape), line=line, constant=True,
                      value=value, order=len(self.entries))
        self.entries.append(entry)
        return entry

    def add(self, op: Operator, inputs: tuple[Entry, ...], base: str, line: str = "") -> Entry:
        """Record ``op`` on ``inputs``; its output shape comes from the operator (it checks
        the shapes and arguments now, so a bad call fails on the user's line)."""
        shapes = tuple(e.shape for e in inputs)
        try:
            shape = op.infer_output_shape(shapes)
        except WorkflowError as exc:
            raise TraceError(str(exc), line or None) from None
        if shape is None:
            raise TraceError(f"{type(op).__name__} has an output shape only running tells; the numpy front end "
                             "needs shapes at trace time", line or None)
        state = np.geterr()
        if state != _DEFAULT_ERRSTATE:  # the user's np.errstate reaches the run of this step
            op.errstate = {k: str(v) for k, v in state.items()}
        entry = Entry(base, op, tuple(inputs), tuple(int(n) for n in shape), line=line, order=len(self.entries))
        self.entries.append(entry)
        for i in inputs:
            i.readers.append(entry)
        if self.eager_bytes is not None:
            self.evaluate_pending()
            self._pending = entry  # evaluated with the next step (its caller may still give it its values)
        return entry

    def evaluate_pending(self) -> None:
        """Evaluate the step recorded last (and the steps before it that it needs), if the trace
        evaluates eagerly and their values fit in `eager_bytes` (an estimate before: 8 bytes a
        cell; the values' own bytes after).  Left to the run: a step computed tile by tile from
        its input boxes (`Elementwise`, `Halo`: a fused stage computes a chain of them on the
        executor's threads without holding each one), unless a later step or Python needs its
        values; a step that fails on its values (the run fails there, naming the node); past the
        budget, every later step (computed on demand, as a trace from shapes is)."""
        e, self._pending = self._pending, None
        if e is None or self.eager_bytes is None:
            return
        if e.value is not None:  # given by its caller (a coarse step's result)
            self.value_bytes += int(np.asarray(e.value).nbytes)
            return
        if not _tiled_cheaply(e):
            self.evaluate_within_budget(e)

    def evaluate_within_budget(self, e: Entry) -> bool:
        """Evaluate ``e`` and the steps before it that it needs, if the trace evaluates eagerly,
        those steps are elementwise (a neighbourhood step, a convolution say, is left to the run's
        threads, and so is everything after it) and their values fit in `eager_bytes` (past it,
        the trace stops evaluating eagerly); whether ``e`` has its values now."""
        if e.value is not None:
            return True
        if self.eager_bytes is None:
            return False
        try:
            missing = self._missing(e, "")
        except ControlFlowError:
            return False
        if any(m is not e and not _elementwise(m.op) for m in missing):
            return False
        if self.value_bytes + 8 * sum(math.prod(m.shape) for m in missing) > self.eager_bytes:
            self.eager_bytes = None  # over the budget: lazily from here on, as a trace from shapes is
            return False
        for m in missing:
            try:
                self._evaluate(m)
            except Exception:  # noqa: BLE001 - the run computes it (and fails there, naming the node, as without this)
                m.value = None
                return False
        return True

    def evaluate_rest(self, reuse: bool = False) -> bool:
        """Evaluate every step of the built workflow still without values (those left to the run:
        `Elementwise` and `Halo` steps, and what follows a neighbourhood step), in call order, while
        the values fit in `eager_bytes`, as numpy computes each of them once: a run that has every
        value from its trace computes nothing and continues behind its return
        (`subzero.driver`).  Stops at a step that fails on its values, or past the budget (the run
        then computes the rest, as without this); whether every step has its values now.

        ``reuse`` (nothing but the workflow's outputs is stored): an elementwise step that computes
        into a given array (`Operator.fills_out`) is computed into the values of an input that this
        pass computed, that it alone reads and that is no output, as numpy reuses its temporaries
        (a fresh array per step costs its page faults, as much as the step): that input's values
        are then not handed to the run, only their dtype (`dropped`; its array is not stored and no
        query reads it: it is recomputed from its inputs when read)."""
        if self.eager_bytes is None:
            return all(e.value is not None or id(e) in self.dropped or id(e) in self.dead for e in self.entries)
        readers: dict[int, int] = {}
        for e in self.entries:
            for i in set(map(id, e.inputs)):
                readers[i] = readers.get(i, 0) + 1
        kept = {id(e) for e in self.outputs}
        fresh = self.left  # computed by this pass: values nobody but the trace has seen
        for k, e in enumerate(self.entries):  # call order is topological
            if e.value is not None or e.op is None or id(e) in self.dead:
                continue
            spare = next((i for i in e.inputs if reuse and id(i) in fresh and readers.get(id(i)) == 1 and
                          id(i) not in kept and _spare(i, e) and self._one_stage(i, k)), None)
            if spare is None and \
                    self.value_bytes + int(np.prod(e.shape, dtype=np.int64)) * 8 > self.eager_bytes:
                self.eager_bytes = None  # over the budget: the run computes the rest
                return False
            try:
                if spare is None or not self._evaluate_into(e, spare):
                    self._evaluate(e)
            except Exception:  # noqa: BLE001 - the run computes it (and fails there, naming the node)
                e.value = None
                return False
            fresh.add(id(e))
        return True

    def _one_stage(self, spare: Entry, k: int) -> bool:
        """Whether the run would compute ``spare`` and ``self.entries[k]`` in one fused stage, where
        ``spare`` is never written (`subzero.driver`): they and every step between them in call
        order were left to the run (`left`), are computed tile by tile from their input boxes and
        have one shape.  (Else the run holds ``spare``'s array, and would compute it again.)"""
        e = self.entries[k]
        start = next(j for j in range(k - 1, -1, -1) if self.entries[j] is spare)
        between = self.entries[start:k]
        return _tiled_cheaply(e) and all(id(x) in self.left and x.shape == e.shape and _tiled_cheaply(x)
                                         for x in between)

    def _evaluate_into(self, e: Entry, spare: Entry) -> bool:
        """Compute ``e``'s values into ``spare``'s array (`evaluate_rest`), when they have its dtype;
        ``spare`` then keeps only its dtype (`dropped`).  Whether it was done."""
        args = [_read_only(i.value) if i is not spare else i.value for i in e.inputs]
        op = e.bound_op()
        firsts = [a[(slice(0, 1),) * a.ndim] if a.ndim else a for a in args]
        with warnings.catch_warnings(), outside_trace():
            warnings.simplefilter("ignore")
            if np.asarray(evaluate_operator(e.op, firsts)).dtype != spare.value.dtype:  # type: ignore[arg-type]
                return False
            started = time.perf_counter()
            e.value = evaluate_operator(op, args, bound=True, out=spare.value)
            e.seconds = time.perf_counter() - started
        self.dropped[id(spare)] = spare.value.dtype
        spare.value = None
        self._droppable.pop(id(spare), None)
        self._may_drop(e)
        return True

    # -- dead values --------------------------------------------------------------------------------
    def hold(self, array: Any) -> None:
        """Note ``array``, a traced array made under this tracer: while it lives, the values of the
        entry it stands for are not let go of (`_drop_dead`)."""
        if self.drop_dead:
            self._arrays.add(array)

    def _drop_dead(self) -> None:
        """Let go of the values nothing needs any more (`drop_dead`), before new values are made: the
        allocator hands their memory to the next step, as numpy's does a temporary's."""
        if not self._droppable:
            return
        built = set(self._names) if self._names else None  # once built: a step the workflow left out reads nothing
        outputs = {id(e) for e in self.outputs} | {id(e) for e in self._exposed}
        live: set[int] | None = None  # what the traced arrays alive stand for: asked once a step passed the rest
        for key, e in list(self._droppable.items()):
            if key in outputs or e.name is not None or e is self._pending or e.value is None or \
                    not e.readers or any(r.value is None and id(r) not in self.dead and
                                         (built is None or id(r) in built) for r in e.readers):
                continue
            if live is None:
                live = {id(a._entry) for a in list(self._arrays)}
            if key in live:
                continue
            del self._droppable[key]
            self.dead[key] = np.asarray(e.value).dtype
            self.value_bytes -= int(np.asarray(e.value).nbytes)
            e.value = None

    def computed(self, e: Entry) -> None:
        """Note that ``e``'s values, given by its caller, are those its operator computes from its
        inputs' values: `_drop_dead` may let go of them (they are computed again when read)."""
        self._may_drop(e)

    def _may_drop(self, e: Entry) -> None:
        """Count ``e``, whose values this trace computed itself, among those `_drop_dead` may let go of."""
        if self.drop_dead and isinstance(e.value, np.ndarray) and e.value.nbytes >= DEAD_BYTES:
            self._droppable[id(e)] = e

    def _restore(self, e: Entry) -> None:
        """Compute again the values of ``e``'s inputs that were let go of (`dead`): a step that reads
        them was recorded after all (a reader made from something else than a traced array)."""
        for i in e.inputs:
            if i.value is None and id(i) in self.dead:
                self.value(i)

    # -- values -----------------------------------------------------------------------------------
    @property
    def specialized(self) -> bool:
        """True when the trace used values: the workflow is this run's path."""
        return any(e.kind in ("value", "leak") for e in self.events)

    def note(self, kind: str, line: str, what: str) -> None:
        """Record an `Event` (deduplicated by kind, line and what)."""
        event = Event(kind, line, what)
        if event not in self.events:
            self.events.append(event)

    def leak(self, entry: Entry, line: str, caller: str, shared: bool = False) -> None:
        """Record that ``caller`` turned ``entry`` into numpy values at ``line``: arrays that enter
        the trace afterwards may derive from them (`leaked`).  ``shared``: numpy code holds the
        trace's own array of them (not a copy), so it may write into it: they are not handed to the
        run (`values`)."""
        if shared:
            self._exposed.append(entry)
        if _depends_on_data(entry):
            self.leaked.append(entry)
            self.note("leak", line, f"{caller} turned {entry.name or entry.base} into numpy values: what it "
                      "computes enters the workflow as a coarse step over them (wrap the call with "
                      "sz.udf(fn, lineage=...) for exact lineage)")

    def has_values(self) -> bool:
        """True when every input's values are known (a trace over real arrays)."""
        return self._inputs_without_values == 0

    def value(self, entry: Entry, why: str = "this") -> np.ndarray:
        """The values of ``entry`` (in its node shape), computed from the inputs on first use."""
        if entry.value is not None:
            if not isinstance(entry.value, np.ndarray):
                entry.value = np.asarray(entry.value)
            return entry.value
        for e in self._missing(entry, why):
            if e.value is None:
                self._evaluate(e)
        return np.asarray(entry.value)

    def _missing(self, entry: Entry, why: str) -> list[Entry]:
        """``entry`` and every ancestor still without values, in call order (topological)."""
        needed: dict[int, Entry] = {}
        stack = [entry]
        while stack:  # every ancestor still without values (no recursion: loops unroll into long chains)
            e = stack.pop()
            if id(e) in needed or e.value is not None:
                continue
            if e.op is None:
                raise ControlFlowError(
                    f"{why} needs values, and the input {e.name!r} was traced from its shape alone; trace "
                    "with the input arrays (f.trace(inputs) / f.run(inputs, store) with numpy or Zarr arrays)")
            needed[id(e)] = e
            stack.extend(e.inputs)
        return sorted(needed.values(), key=lambda e: e.order)

    def _evaluate(self, e: Entry) -> None:
        """Compute ``e``'s values from its inputs' (which have theirs), timed.  The operator sees
        read-only views of them (the values are this run's, shared by every reader and handed to the
        run): one that writes into its inputs is given copies instead.  Values nothing needs any more
        are let go of first (`_drop_dead`)."""
        if self.drop_dead:
            self._restore(e)
            self._drop_dead()
        args = [_read_only(i.value) for i in e.inputs]
        started = time.perf_counter()
        token = _CURRENT.set(None)  # `outside_trace`: the operator's code runs as plain numpy
        try:  # numpy's errors and warnings silenced once for the step (`evaluate_operator` sets them per call)
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                try:
                    out = _sliced(e.op, args[0]) if type(e.op) is Slice else \
                        run_plain(e.bound_op(), args) \
                        if all(a.shape == i.shape for a, i in zip(args, e.inputs)) else \
                        run_plain(_bound_to(e.op, args), args)  # type: ignore[arg-type]
                except ValueError as exc:
                    if "read-only" not in str(exc):
                        raise
                    copies = [np.array(a, copy=True) for a in args]
                    out = run_plain(_bound_to(e.op, copies), copies)  # type: ignore[arg-type]
        finally:
            _CURRENT.reset(token)
        e.seconds = time.perf_counter() - started
        if self._pending is e:  # counted here: not again as a value its caller gave
            self._pending = None
        # a fresh array of the node's shape stays itself (a view of it is copied by a run that holds it)
        e.value = out.reshape(e.shape) if out.shape != e.shape and out.size == int(np.prod(e.shape)) else out
        self.value_bytes += int(e.value.nbytes)
        self.dead.pop(id(e), None)
        self._may_drop(e)

    def values(self, complete: bool = False,
               reuse: bool = False) -> dict[str, tuple[np.ndarray | np.dtype, float, bool]]:
        """Node name -> (its values, the seconds computing them took, whether the trace would have
        left them to the run: evaluated by `evaluate_rest`) of every step of the built
        workflow (`build`) whose values this trace computed, for a run over the same inputs to
        reuse.  Left out: the values of a step numpy code outside subzero holds as the trace's own
        array (`leak` with ``shared``: it may have written into them; it is otherwise given a copy)
        and of every step computed from them.  ``complete``: the steps left to the run are
        evaluated first (`evaluate_rest`, reusing buffers when ``reuse``), so that a run may take
        every value from the trace; a step whose array a later step was computed into gives its
        dtype instead of its values (`dropped`), and so does a step whose values nothing needed any
        more (`dead`), when every step's values are known (else it is left out: the run computes it)."""
        self.evaluate_pending()
        every = complete and self.evaluate_rest(reuse)
        if self.drop_dead:
            self._drop_dead()  # what the last steps read
        names = self._names
        tainted = {id(e) for e in self._exposed if e.op is not None}  # an input's values are the caller's own
        out: dict[str, tuple[np.ndarray | np.dtype, float, bool]] = {}
        for e in self.entries:  # call order is topological
            if any(id(i) in tainted for i in e.inputs):
                tainted.add(id(e))
            if e.op is None or id(e) in tainted or id(e) not in names:
                continue
            if id(e) in self.dropped:
                out[names[id(e)]] = (self.dropped[id(e)], e.seconds, True)
            elif id(e) in self.dead:  # handed as known only when every value is (else the run computes it)
                if every:
                    out[names[id(e)]] = (self.dead[id(e)], e.seconds, id(e) in self.left)
            elif e.value is not None:
                out[names[id(e)]] = (np.asarray(e.value), e.seconds, id(e) in self.left)
        return out

    def build(self) -> Workflow:
        """The workflow of the entries the named ones need (the outputs, `subzero.name`d
        nodes, the inputs), in call order, named (see the module docstring): a value the
        function computed but did not use is left out."""
        self.entries = _needed(self.entries)
        taken = {e.name for e in self.entries if e.name is not None}
        counts: dict[str, int] = {}
        names: dict[int, str] = {}
        for e in self.entries:
            if e.name is not None:
                names[id(e)] = e.name
                continue
            base = _clean(e.base)
            k = counts.get(base, 0)
            candidate = base if k == 0 else f"{base}_{k}"
            while candidate in taken:
                k += 1
                candidate = f"{base}_{k}"
            counts[base] = k + 1
            taken.add(candidate)
            names[id(e)] = candidate
        wf = Workflow(self.name)
        nodes = {}
        for e in self.entries:
            if e.op is None:
                nodes[id(e)] = wf.input(names[id(e)])
                if e.constant:
                    wf.constants[names[id(e)]] = e.value
            else:  # the trace's own operator, made for this step: the node carries it (no copy)
                nodes[id(e)] = wf._add(e.op, tuple(nodes[id(i)] for i in e.inputs), names[id(e)])
        wf.results = [names[id(e)] for e in self.outputs if e.op is not None]
        self._names = names
        return wf

    # -- the tracer in force ----------------------------------------------------------------------
    def __enter__(self) -> "Tracer":
        self._token = _CURRENT.set(self)
        return self

    def __exit__(self, *exc) -> None:
        _CURRENT.reset(self._token)


def _tiled_cheaply(e: Entry) -> bool:
    """Whether the run computes ``e``'s tiles from their input boxes in one pass (`Elementwise`,
    `Halo`): fused with its neighbours and spread over the executor's threads, it is as fast tiled
    as evaluated whole here (a large convolution faster), and holds no value in between.  Asked of
    the operator bound to the entry's shapes, as the run binds it (a stencil's halo is its radius
    over the input's axes: unbound, it has no tiling)."""
    op = e.op
    if op is None or op.two_pass:
        return False
    try:
        return type(e.bound_op().effective_tiling()) in (Elementwise, Halo)
    except Exception:  # noqa: BLE001 - a tiling its shapes do not give: evaluated here
        return False


def _spare(i: Entry, e: Entry) -> bool:
    """Whether ``e``, an elementwise step, may be computed into ``i``'s array (`Tracer.evaluate_rest`):
    ``i`` is a one-pass step whose values are an array of its own (no view), writable, in C order, of
    ``e``'s shape, and ``e`` computes into a given array (`Operator.fills_out`)."""
    from subzero.worker import computes_into

    v = i.value
    return isinstance(v, np.ndarray) and i.op is not None and not i.op.two_pass and e.op is not None and \
        _elementwise(e.op) and v.base is None and v.flags.c_contiguous and v.flags.writeable and \
        v.shape == e.shape and not v.dtype.hasobject and computes_into(e.bound_op())


def _elementwise(op: Operator | None) -> bool:
    """Whether ``op`` computes each cell from the same cell of its inputs (`Elementwise`, one pass)."""
    if op is None or op.two_pass:
        return False
    try:
        return type(op.effective_tiling()) is Elementwise
    except Exception:  # noqa: BLE001 - a tiling that needs shapes
        return False


def _sliced(op: Slice, x: np.ndarray) -> np.ndarray:
    """``op``'s values on the whole array ``x`` as numpy's basic indexing gives them: a view (its
    tiles build an index map per axis and copy; numpy code slicing a large array pays nothing)."""
    bounds = [Slice._per_axis(v, x.ndim, name) for v, name in
              ((op.start, "start"), (op.stop, "stop"), (op.step, "step"))]
    return x[tuple(slice(a, b, c) for a, b, c in zip(*bounds))]


def _bound_to(op: Operator, arrays: list[np.ndarray]) -> Operator:
    """``op`` bound to the shapes of ``arrays`` (values of a shape other than the entries', as a
    library's may be) and the output they give."""
    shapes = tuple(a.shape for a in arrays)
    return op.bound(shapes, op.infer_output_shape(shapes))


def _read_only(value: Any) -> np.ndarray:
    """A read-only view of ``value`` (as an array)."""
    view = np.asarray(value).view()
    view.flags.writeable = False
    return view


def _needed(entries: list[Entry]) -> list[Entry]:
    keep = {id(e) for e in entries if e.name is not None}
    for e in reversed(entries):  # call order is topological: consumers come after their inputs
        if id(e) in keep:
            keep.update(id(i) for i in e.inputs)
    return [e for e in entries if id(e) in keep]


def _depends_on_data(entry: Entry) -> bool:
    """True when ``entry`` reads an input that is not a captured constant."""
    stack, seen = [entry], set()
    while stack:
        e = stack.pop()
        if e.op is None and not e.constant:
            return True
        for i in e.inputs:
            if id(i) not in seen:
                seen.add(id(i))
                stack.append(i)
    return False


@contextlib.contextmanager
def outside_trace() -> Iterator[None]:
    """No trace in force within: code computing this run's values (an operator, a coarse step)
    runs as plain numpy, whatever it calls."""
    token = _CURRENT.set(None)
    try:
        yield
    finally:
        _CURRENT.reset(token)


def current_tracer() -> Tracer | None:
    """The tracer of the trace under way in this context, or None."""
    return _CURRENT.get()


def _clean(base: str) -> str:
    out = "".join(c if c.isalnum() or c in "_.-" else "_" for c in base) or "node"
    return out if (out[0].isalpha() or out[0] == "_") else f"_{out}"


