"""``@sz.workflow``: a plain numpy function, traced over symbolic arrays into a `Workflow`.

The function is traced when its inputs' shapes and dtypes are known (JAX's ``jit`` traces
per input signature the same way): ``f.run(inputs, store)`` traces it with those arrays'
shapes and dtypes and the parameters given, then runs the plain `subzero.Workflow` the
trace built, so executors, stores, the optimizer, queries, replay, explain and the CLI
see an ordinary workflow.  ``f.trace(inputs)`` returns that workflow; the traced object is
also still the function (``f(raw, dark)`` computes with numpy).

- Inputs: the parameters given arrays (of at least one axis), one symbolic array each, named
  after them: those without a default, and those with one (``mask=None``) when an array is
  given for them.
- Parameters: the others; ``params={"threshold": 3}`` (or ``--param threshold=3`` on the
  command line: strings are converted to the default's type) re-trace with those values
  (each set of parameters is its own workflow; the run's catalog records the workflow it
  ran).  A number given for a parameter without a default (a required threshold, a
  latitude) is a parameter too; an array given in ``params`` is captured like any constant
  (an input the workflow carries).
- Values: a trace over arrays computes a value when Python asks for one (``if``, ``int()``,
  a loop bound, ``x[mask]``), so the workflow is this run's path; such a trace is kept for
  inputs with the same values only (`TracedWorkflow.report` lists the decisions).
- Outputs: a returned dict names its nodes by its keys; a single array is ``out``, a
  tuple or list ``out0``, ``out1``...
"""

from __future__ import annotations

import functools
import os
import inspect
import time
from collections.abc import Callable, Mapping
from typing import Any, overload

import numpy as np
import xxhash

from subzero import config
from subzero.errors import WorkflowError
from subzero.fingerprint import CopyBeside
from subzero.tiling import default_chunks
from subzero.trace.breaks import Break, bound_since, coarse_calls, library_break, replaceable
from subzero.trace.capture import numpy_calls
from subzero.trace.coarse import coarse_call
from subzero.trace.errors import (ControlFlowError, ConversionError, InPlaceError, TraceError, UnsupportedCallError,
                                  user_files)
from subzero.trace.symbolic import SymbolicArray
from subzero.trace.tracer import Tracer, trace_contexts
from subzero.dag import Workflow

__all__ = ["workflow", "TracedWorkflow", "TraceReport"]

#: library calls a trace may run on values (graph breaks) before it gives up and runs the
#: whole function as one coarse step
MAX_BREAKS = 8

#: functions whose trace fell back to running them whole (`TracedWorkflow._eager`), by their code, the ranks and
#: dtypes of their input arrays and their parameters -> what failed: a new trace of one on such inputs (another
#: `TracedWorkflow` of it too) runs it whole at once instead of tracing it to fail alike (TorchDynamo skips a
#: frame it could not compile the same way); if numpy fails on those inputs, it is traced as before
_RAN_WHOLE: dict[tuple, str] = {}
_RAN_WHOLE_KEPT = 256

#: trace errors that say the code cannot be captured (rather than that subzero's API was misused)
_CANNOT_TRACE = (UnsupportedCallError, ConversionError, ControlFlowError, InPlaceError)


class TracedWorkflow:
    """A numpy function that becomes a `Workflow` when traced (see the module docstring)."""

    def __init__(self, fn: Callable, name: str | None = None):
        self.fn = fn
        self.name: str = str(name or getattr(fn, "__name__", "workflow"))
        functools.update_wrapper(self, fn)
        sig = inspect.signature(fn)
        self.input_names: list[str] = []
        self.defaults: dict[str, Any] = {}
        self.annotations: dict[str, Any] = {}
        self.parameter_names: list[str] = []
        for p in sig.parameters.values():
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                continue  # *args / **kwargs: nothing to bind by name
            self.parameter_names.append(p.name)
            if p.default is p.empty:
                self.input_names.append(p.name)
            else:
                self.defaults[p.name] = p.default
                self.annotations[p.name] = p.annotation
        if not self.parameter_names:
            raise WorkflowError(f"@sz.workflow {self.name}: the function takes no named parameter, so no input "
                                "array; its parameters given arrays are the inputs")
        self._cache: dict[Any, list[tuple[Workflow, Any, list]]] = {}
        self.last_trace_seconds: float | None = None
        self.last_events: list = []

    # -- eager ---------------------------------------------------------------------------------
    def __call__(self, *args, **kwargs):
        """Call the function itself, on numpy arrays."""
        return self.fn(*args, **kwargs)

    # -- tracing -------------------------------------------------------------------------------
    def parameters(self, params: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The parameter values for a trace: the defaults, updated with ``params`` (strings
        converted to the default's type, as ``--param`` gives them)."""
        values = dict(self.defaults)
        for key, value in (params or {}).items():
            if key not in self.parameter_names:
                known = ", ".join(n for n in self.parameter_names) or "none"
                raise WorkflowError(f"workflow {self.name!r} has no parameter {key!r}; its parameters: {known}")
            values[key] = _coerce(key, value, self.defaults.get(key), self.annotations.get(key))
        return values

    def split(self, inputs: Mapping[str, Any], params: Mapping[str, Any] | None = None
              ) -> tuple[dict[str, Any], dict[str, Any]]:
        """``(arrays, parameters)``: which of ``inputs`` are input arrays (at least one axis) and
        the parameter values (numbers given for parameters without a default among them)."""
        unknown = sorted(set(inputs) - set(self.parameter_names))
        if unknown:
            raise WorkflowError(f"workflow {self.name!r} has no input(s) {unknown}; its parameters: "
                                f"{', '.join(self.parameter_names)}")
        arrays, numbers = {}, {}
        for key, value in inputs.items():
            shape = getattr(value, "shape", None)
            if shape is None and isinstance(value, (list, tuple)):
                shape = np.shape(value)
            if shape is None or len(shape) == 0:
                numbers[key] = value.item() if isinstance(value, (np.ndarray, np.generic)) else value
            else:
                arrays[key] = value
        values = self.parameters({**numbers, **dict(params or {})})
        missing = [n for n in self.input_names if n not in arrays and n not in values]
        if missing:
            raise WorkflowError(f"workflow {self.name!r} needs input(s) {missing} (its parameters without a "
                                f"default); got {sorted(inputs)}")
        for key in arrays:
            values.pop(key, None)
        return arrays, values

    def trace(self, inputs: Mapping[str, Any], params: Mapping[str, Any] | None = None) -> Workflow:
        """The workflow for these inputs (arrays, or anything with ``.shape`` and ``.dtype``
        to trace from shapes alone) and these parameters (cached per signature; a trace that
        used values, per input values)."""
        return self._traced(inputs, params)[0]

    def _traced(self, inputs: Mapping[str, Any], params: Mapping[str, Any] | None = None,
                eager_bytes: int | None = None, complete: bool = False, reuse: bool = False
                ) -> tuple[Workflow, dict[str, tuple[np.ndarray | np.dtype, float, bool]]]:
        """`trace`, and the values a new trace computed (node name -> (values, seconds); `Tracer.values`)
        for a run over the same inputs; none for a cached trace.  ``eager_bytes``: a new trace over
        arrays evaluates each step as it is recorded, up to that many bytes of values; ``complete``:
        and then the steps it left to the run (`Tracer.evaluate_rest`, with ``reuse``)."""
        arrays, values = self.split(inputs, params)
        signature = self._signature(arrays)
        key = (signature, tuple(sorted((k, _param_key(v)) for k, v in values.items())))
        cached = self._cache.setdefault(key, [])
        digest = _digest(arrays) if any(d is not None for _, d, _ in cached) else None
        for wf, kept, events in cached:
            if kept is None or kept == digest:
                self.last_events = events
                return wf, {}
        wf, specialized, events, known = self._trace(signature, arrays, values, eager_bytes, complete, reuse)
        if specialized and digest is None:  # kept for these values only
            digest = _digest(arrays)
        cached.append((wf, digest if specialized else None, events))
        del cached[:-8]  # a few traces per signature: a loop over new inputs must not keep every one
        self.last_events = events
        return wf, known

    def report(self, inputs: Mapping[str, Any], params: Mapping[str, Any] | None = None) -> "TraceReport":
        """What tracing with ``inputs`` decided on values and where lineage is coarse, each with
        the user's line (TorchDynamo's ``explain``)."""
        wf = self.trace(inputs, params)
        return TraceReport(self.name, wf, list(self.last_events))

    def _signature(self, arrays: Mapping[str, Any]) -> tuple:
        out = []
        for name in self.parameter_names:
            if name not in arrays:
                continue
            value = arrays[name]
            shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
            if shape is None or dtype is None:
                value = np.asarray(value)
                shape, dtype = value.shape, value.dtype
            out.append((name, tuple(int(n) for n in shape), np.dtype(dtype).str))
        if not out:
            raise WorkflowError(f"workflow {self.name!r} was given no input array (a parameter given an array of at "
                                f"least one axis); its parameters: {', '.join(self.parameter_names)}")
        return tuple(out)

    def _trace(self, signature: tuple, arrays: Mapping[str, Any], values: dict[str, Any],
               eager_bytes: int | None = None, complete: bool = False, reuse: bool = False
               ) -> tuple[Workflow, bool, list, dict[str, tuple[np.ndarray | np.dtype, float, bool]]]:
        started = time.perf_counter()
        whole = self._whole_key(signature, values)
        failed = _RAN_WHOLE.get(whole) if whole is not None else None
        if whole is not None and failed is not None and all(_has_values(arrays[name]) for name, _, _ in signature):
            try:
                return self._eager(signature, arrays, values, None, started, failed)
            except Exception:  # noqa: BLE001 - numpy fails on these inputs: traced, so the error names the line
                _RAN_WHOLE.pop(whole, None)
        breaks: list[Break] = []
        while True:
            tracer = Tracer(self.name, eager_bytes, drop_dead=reuse)
            args = self._symbolic_inputs(tracer, signature, arrays)
            try:
                with coarse_calls(breaks) as applied:
                    with tracer, user_files(self._file()), numpy_calls(), trace_contexts():
                        result = self.fn(**args, **values)
                        _name_outputs(tracer, result, self.name)
                break
            except Exception as exc:  # a library that cannot take traced arrays: break there and trace again
                if isinstance(exc, WorkflowError) and not isinstance(exc, _CANNOT_TRACE):
                    raise  # a misuse of subzero's own API (a udf's declaration, a node name): said, not hidden
                found = library_break(exc) if tracer.has_values() else None
                if found is not None and any(b.code is found.code and b.cached for b in breaks) and \
                        bound_since(found.code):
                    continue  # reached through a binding made since the search the trace reused: again
                if found is not None and not replaceable(found):
                    found = None  # bound where no break reaches it (a method, a property): the next trace fails alike
                if found is None or len(applied) < len(breaks) or len(breaks) >= MAX_BREAKS or \
                        any(b.code is found.code for b in breaks):
                    if not tracer.has_values():
                        raise
                    out = self._eager(signature, arrays, values, exc, started)
                    if whole is not None:
                        _RAN_WHOLE.pop(whole, None)
                        _RAN_WHOLE[whole] = _failure(exc)
                        while len(_RAN_WHOLE) > _RAN_WHOLE_KEPT:
                            del _RAN_WHOLE[next(iter(_RAN_WHOLE))]
                    return out
                breaks.append(found)
        wf = tracer.build()
        known = tracer.values(complete, reuse) if tracer.has_values() else {}
        self.last_trace_seconds = time.perf_counter() - started
        return wf, tracer.specialized, list(tracer.events), known

    def _whole_key(self, signature: tuple, values: dict[str, Any]) -> tuple | None:
        """The key of `_RAN_WHOLE` for a trace of this function with ``signature`` and ``values``
        (None for a callable without code of its own)."""
        code = getattr(inspect.unwrap(self.fn), "__code__", None)
        if code is None:
            return None
        try:
            params = tuple(sorted((k, _param_key(v)) for k, v in values.items()))
            hash(params)
        except TypeError:
            return None
        return code, tuple((name, len(shape), dtype) for name, shape, dtype in signature), params

    def _file(self) -> str:
        code = getattr(inspect.unwrap(self.fn), "__code__", None)
        return code.co_filename if code is not None else ""

    @staticmethod
    def _symbolic_inputs(tracer: Tracer, signature: tuple, arrays: Mapping[str, Any]) -> dict[str, SymbolicArray]:
        args = {}
        for name, shape, dtype in signature:
            given = arrays[name]
            value = given if _has_values(given) else None
            if isinstance(value, (list, tuple)):
                value = np.asarray(value)
            args[name] = SymbolicArray(tracer, tracer.input(name, shape, value), shape, dtype)
        return args

    def _eager(self, signature: tuple, arrays: Mapping[str, Any], values: dict[str, Any], exc: BaseException | None,
               started: float, earlier: str | None = None) -> tuple[Workflow, bool, list, dict[str, tuple[np.ndarray | np.dtype, float, bool]]]:
        """The whole function as one coarse step over every input (the last resort of a trace that
        failed where numpy does not: every output depends on every input); numpy's own error when
        the function fails on numpy arrays too.  ``earlier``: what failed in an earlier trace of the
        function (`_RAN_WHOLE`), when it is run whole without tracing it again (``exc`` None)."""
        concrete = {name: np.asarray(arrays[name]) for name, _, _ in signature}
        checking = time.perf_counter()
        try:
            checked = self.fn(**{k: v.copy() for k, v in concrete.items()}, **values)
        except Exception:
            if exc is None:
                raise
            raise exc from None  # numpy fails too: the trace's error names the user's line
        once = _Copying(self.fn, checked)
        once.seconds = time.perf_counter() - checking  # what computing its outputs took (the run reuses them)
        tracer = Tracer(self.name)
        args = self._symbolic_inputs(tracer, signature, arrays)
        if exc is not None:
            reason = (f"the function could not be traced ({_failure(exc)}), so it ran on this run's values as one "
                      "coarse step: every output depends on every input")
        else:
            reason = (f"the function could not be traced on earlier inputs of these ranks and dtypes ({earlier}), so "
                      "it ran on this run's values as one coarse step: every output depends on every input")
        with tracer:
            result = coarse_call(once, (), {**args, **values}, reason, base=self.name)
            _name_outputs(tracer, result, self.name)
        wf = tracer.build()
        self.last_trace_seconds = time.perf_counter() - started
        return wf, True, list(tracer.events), tracer.values()

    # -- running ---------------------------------------------------------------------------------
    def run(self, inputs: Mapping[str, Any], store: "str | os.PathLike[str]", params: Mapping[str, Any] | None = None,
            **kwargs: Any) -> Any:
        """Trace with ``inputs`` and ``params``, and run: `Workflow.run`'s arguments otherwise.
        Inputs that are not parameters of the function are refused.

        On the local executor, with numpy inputs, the trace computes each step as it records it
        (up to the ``trace_values_mb`` setting; elementwise and neighbourhood steps only when a
        value is needed) and the run stores those values instead of computing the steps again;
        the values Python asked for are reused that way with any local input.  Into a local
        directory, written behind (the ``write_behind`` setting) and planned by no optimizer, the
        trace computes every step, and ``run`` returns as soon as it did: the rest of the run
        (storing, lineage, the catalog) continues on a background thread; its queries wait for it
        by themselves, `Run.wait` until the store is durable."""
        with config.once():  # the trace and the run read each setting once
            return self._run(inputs, store, params, kwargs)

    def _run(self, inputs: Mapping[str, Any], store: "str | os.PathLike[str]", params: Mapping[str, Any] | None,
             kwargs: dict[str, Any]) -> Any:
        arrays, _ = self.split(inputs, params)
        local = kwargs.get("executor") == "local" and not kwargs.get("resume")
        in_memory = all(isinstance(a, (np.ndarray, list, tuple)) for a in arrays.values())  # not a Zarr array
        eager = int(config.get("trace_values_mb") * 2**20) if local and in_memory else None
        behind = local and "://" not in str(store) and config.get("write_behind")
        if behind:
            # the copies a run written behind stores of its inputs: made beside the trace
            kwargs["_copies"] = _copies(arrays, int(config.get("write_behind_mb") * 2**20))
        # a run written behind whose trace computed every value returns at once and continues behind
        # (`subzero.driver`): the trace then computes the steps it would leave to the run too (numpy
        # computes them as well, reusing a temporary's buffer when only the outputs are stored); not for a
        # run the optimizer plans (a workload or a budget)
        complete = bool(behind) and eager is not None and kwargs.get("workload") is None and \
            kwargs.get("max_runtime") is None and (kwargs.get("max_disk") is None or bool(kwargs.get("strategies")))
        reuse = complete and not kwargs.get("strategies") and isinstance(kwargs.get("keep", "needed"), str) and \
            kwargs.get("keep", "needed") == "needed"
        wf, known = self._traced(inputs, params, eager, complete, reuse)
        if known and local:  # the run takes the steps the trace computed on these very arrays
            kwargs["_known"] = known
        return wf.run(dict(arrays), store, **kwargs)

    def __repr__(self) -> str:
        return f"<sz.workflow {self.name}({', '.join(self.input_names)}; params={self.defaults})>"


def _copies(arrays: Mapping[str, Any], limit: int) -> dict[str, CopyBeside]:
    """The copies a local run written behind its return stores of its numpy inputs (each up to
    ``limit`` bytes), started now: a thread makes them while the function is traced."""
    return {name: CopyBeside(a, default_chunks(a.shape)) for name, a in arrays.items()
            if type(a) is np.ndarray and a.flags.c_contiguous and a.nbytes <= limit and a.dtype.kind in "biufc"}


class TraceReport:
    """What a trace decided on this run's values and where its lineage is coarse.

    ``events`` are `subzero.trace.tracer.Event`s (kind, the user's line, what); ``coarse``
    the nodes whose lineage is all-to-all over what they read, with their reasons.
    """

    def __init__(self, name: str, wf: Workflow, events: list):
        self.name, self.workflow, self.events = name, wf, events
        self.coarse = {n.name: getattr(n.operator, "reason", "") for n in wf.nodes
                       if n.operator is not None and getattr(n.operator, "coarse", False)}

    @property
    def exact(self) -> bool:
        """True when every step's lineage is exact."""
        return not self.coarse

    def __str__(self) -> str:
        steps = [n for n in self.workflow.nodes if n.operator is not None]
        lines = [f"trace of {self.name}: {len(steps)} steps, {len(steps) - len(self.coarse)} exact, "
                 f"{len(self.coarse)} coarse"]
        for e in self.events:
            label = {"value": "uses a value", "coarse": "coarse step", "leak": "values left the trace"}[e.kind]
            lines.append(f"  {label}: {e.what}" + (f"\n      at {e.line}" if e.line else ""))
        return "\n".join(lines)

    __repr__ = __str__


@overload
def workflow(fn: Callable, *, name: str | None = None) -> TracedWorkflow: ...


@overload
def workflow(fn: None = None, *, name: str | None = None) -> Callable[[Callable], TracedWorkflow]: ...


def workflow(fn: Callable | None = None, *, name: str | None = None
             ) -> "TracedWorkflow | Callable[[Callable], TracedWorkflow]":
    """Decorator: trace a plain numpy function into a workflow (see `TracedWorkflow`).

    Examples
    --------
    >>> import numpy as np, subzero as sz
    >>> @sz.workflow
    ... def centre(x, scale: float = 1.0):
    ...     return {"centred": (x - np.mean(x)) * scale}
    >>> [n.name for n in centre.trace({"x": np.ones((2, 3))}).nodes]
    ['x', 'mean', 'subtract', 'centred']
    """
    if fn is None:
        return lambda f: TracedWorkflow(f, name)
    return TracedWorkflow(fn, name)


def _name_outputs(tracer: Tracer, result, where: str) -> None:
    from subzero.trace.naming import name as name_node

    if isinstance(result, Mapping):
        items = list(result.items())
    elif isinstance(result, (SymbolicArray, np.ndarray, np.generic)):
        items = [("out", result)]
    elif isinstance(result, (tuple, list)):
        items = [(f"out{k}", v) for k, v in enumerate(result)]
    else:
        raise TraceError(f"@sz.workflow {where} returned {type(result).__name__}; return a symbolic array, a tuple "
                         "of them, or a dict name -> array", line="")
    for key, value in items:
        if isinstance(value, (np.ndarray, np.generic)) and value.dtype != object:
            value = _captured(tracer, np.asarray(value))
        if not isinstance(value, SymbolicArray):
            raise TraceError(f"@sz.workflow {where}: output {key!r} is {type(value).__name__}, not an array",
                             line="")
        if not isinstance(key, str):
            raise TraceError(f"@sz.workflow {where}: output keys must be strings, got {key!r}", line="")
        entry = value.entry
        clash = next((e for e in tracer.entries if e.name == key and e is not entry), None)
        if clash is not None and clash.op is None:
            raise TraceError(f"@sz.workflow {where}: output {key!r} has the name of the input {key!r}; rename the "
                             "output (outputs and inputs share one namespace of node names)", line="")
        if entry.op is None or (entry.name is not None and entry.name != key) or \
                any(e.name == key and e is not entry for e in tracer.entries):
            value = _copy(value)
        name_node(value, key)
        tracer.outputs.append(value.entry)


class _Copying:
    """``fn`` called with copies of its array arguments (so a re-run never updates the stored
    inputs in place), its mapping result laid out as a tuple in key order for `Opaque`'s pick."""

    def __init__(self, fn: Callable, first: Any = None):
        self.fn = fn
        self.__name__ = getattr(fn, "__name__", "workflow")
        self._first = first  # the result of the call the trace made already on the same values: used once
        self.seconds = 0.0  # how long that call took

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        first, self._first = self.__dict__.get("_first"), None
        if first is not None:
            return first
        copied = {k: v.copy() if isinstance(v, np.ndarray) else v for k, v in kwargs.items()}
        return self.fn(*args, **copied)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_first": None}  # never shipped or stored

    def __repr__(self) -> str:
        return f"{self.__name__}(...)"


def _failure(exc: BaseException) -> str:
    """``Type: first line`` of a trace's failure, for a reason."""
    first = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {first[:160]}"


def _captured(tracer: Tracer, value: np.ndarray) -> SymbolicArray:
    """An output the function returned as numpy values: a constant node (after a leak, a coarse
    step over the leaked arrays)."""
    from subzero.trace.coarse import lift

    lifted = lift(tracer, value)
    if isinstance(lifted, SymbolicArray):
        return lifted
    shape = value.shape or (1,)
    return SymbolicArray(tracer, tracer.constant(value.reshape(shape)), value.shape, value.dtype)


def _has_values(value: Any) -> bool:
    """True for arrays whose values a trace can read (numpy, Zarr, anything with ``__array__``)."""
    return isinstance(value, (np.ndarray, list, tuple)) or hasattr(value, "__array__")


def _param_key(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return ("array", value.shape, value.dtype.str, _digest({"v": value}))
    return repr(value)


def _digest(arrays: Mapping[str, Any]) -> str:
    """A digest of the arrays' values (a trace that used values is kept for the same values only)."""
    h = xxhash.xxh3_64()
    for key in sorted(arrays):
        value = np.ascontiguousarray(np.asarray(arrays[key]))
        h.update(key.encode())
        h.update(repr((value.shape, value.dtype.str)).encode())
        # the array's own buffer (C-contiguous: the bytes tobytes() would copy out)
        h.update(value.reshape(-1).view(np.uint8).data if value.dtype != object else
                 repr(value.tolist()).encode())
    return h.hexdigest()


def _copy(x: SymbolicArray) -> SymbolicArray:
    """A node equal to ``x`` (an input or a node named otherwise returned under a new name)."""
    from subzero.trace.calls import ARG, NumpyCall
    from subzero.trace.building import add_node
    from subzero import operators as ops

    node = add_node(ops.Apply(NumpyCall(np.array, (ARG,)), nin=1), [x], "copy", dtype=x.dtype)
    return SymbolicArray(x.tracer, node.entry, x.shape, x.dtype)


def _coerce(key: str, value: Any, default: Any, annotation: Any) -> Any:
    if not isinstance(value, str):
        return value
    kind = annotation if isinstance(annotation, type) else type(default)
    try:
        if kind is bool:
            if value.lower() in ("1", "true", "yes", "on"):
                return True
            if value.lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError(value)
        if kind in (int, float, complex):
            return kind(value)
    except ValueError:
        raise WorkflowError(f"parameter {key}={value!r}: expected a {kind.__name__} (its default is "
                            f"{default!r})") from None
    return value


def from_namespace(namespace: Mapping[str, Any], where: str, files: Mapping[str, Any], params: Mapping[str, str],
                   quick: bool = False, choice: str | None = None) -> tuple[Workflow, dict[str, Any]] | None:
    """``(workflow, inputs)`` from a workflow file's globals that define ``@sz.workflow``
    functions (``subzero run pipeline.py``), or None when they define none.

    ``choice`` (``--workflow NAME``) picks one of several; ``files`` are the ``--input``
    arrays, ``params`` the ``--param`` strings.
    """
    traced: dict[str, TracedWorkflow] = {}
    for key, value in namespace.items():
        if isinstance(value, TracedWorkflow):
            traced.setdefault(value.name, value)
            traced.setdefault(key, value)
    if not traced:
        if choice is not None:
            raise WorkflowError(f"--workflow {choice}: {where} defines no @sz.workflow function")
        return None
    distinct = list({id(v): v for v in traced.values()}.values())
    if choice is not None:
        if choice not in traced:
            raise WorkflowError(f"--workflow {choice}: {where} defines no @sz.workflow function named {choice!r}; it "
                                f"defines {', '.join(sorted(v.name for v in distinct))}")
        fn = traced[choice]
    elif len(distinct) > 1:
        raise WorkflowError(f"{where} defines several @sz.workflow functions "
                            f"({', '.join(sorted(v.name for v in distinct))}); pick one with --workflow NAME")
    else:
        fn = distinct[0]
    if quick:
        raise WorkflowError(f"--quick: {where} defines @sz.workflow {fn.name}, which takes its inputs from --input; "
                            "drop --quick")
    unknown = [k for k in files if k not in fn.parameter_names]
    if unknown:
        raise WorkflowError(f"--input {unknown[0]}=...: workflow {fn.name!r} has no input {unknown[0]!r}; its inputs "
                            f"are {', '.join(fn.input_names)}")
    missing = [n for n in fn.input_names if n not in files and n not in params]
    if missing:
        raise WorkflowError(f"workflow {fn.name!r} needs input {missing[0]!r}: give --input {missing[0]}=PATH "
                            "(.npy, .fits[EXT] or Zarr)")
    arrays = dict(files)
    return fn.trace(arrays, params), arrays
