"""``@sz.workflow``: a plain numpy function, traced over symbolic arrays into a `Workflow`.

The function is traced when its inputs' shapes and dtypes are known (JAX's ``jit`` traces
per input signature the same way): ``f.run(inputs, store)`` traces it with those arrays'
shapes and dtypes and the parameters given, then runs the plain `subzero.Workflow` the
trace built, so executors, stores, the optimizer, queries, replay, explain and the CLI
see an ordinary workflow.  ``f.trace(inputs)`` returns that workflow; the traced object is
also still the function (``f(raw, dark)`` computes with numpy).

- Inputs: the parameters without a default, one symbolic array each, named after them.
- Parameters: the parameters with a default; ``params={"threshold": 3}`` (or ``--param
  threshold=3`` on the command line: strings are converted to the default's type)
  re-trace with those values (each set of parameters is its own workflow; the run's
  catalog records the workflow it ran).
- Outputs: a returned dict names its nodes by its keys; a single array is ``out``, a
  tuple or list ``out0``, ``out1``...
"""

from __future__ import annotations

import functools
import inspect
import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from subzero.errors import WorkflowError
from subzero.trace.errors import TraceError
from subzero.trace.symbolic import SymbolicArray
from subzero.trace.tracer import Tracer
from subzero.dag import Workflow

__all__ = ["workflow", "TracedWorkflow"]


class TracedWorkflow:
    """A numpy function that becomes a `Workflow` when traced (see the module docstring)."""

    def __init__(self, fn: Callable, name: str | None = None):
        self.fn = fn
        self.name = name or fn.__name__
        functools.update_wrapper(self, fn)
        sig = inspect.signature(fn)
        self.input_names: list[str] = []
        self.defaults: dict[str, Any] = {}
        self.annotations: dict[str, Any] = {}
        for p in sig.parameters.values():
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                raise WorkflowError(f"@sz.workflow {self.name}: *{p.name} / **{p.name} cannot be traced; name "
                                    "every input array and parameter")
            if p.default is p.empty:
                self.input_names.append(p.name)
            else:
                self.defaults[p.name] = p.default
                self.annotations[p.name] = p.annotation
        if not self.input_names:
            raise WorkflowError(f"@sz.workflow {self.name}: the function has no parameter without a default, so no "
                                "input array; its first parameters (without defaults) are the inputs")
        self._cache: dict[Any, Workflow] = {}
        self.last_trace_seconds: float | None = None

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
            if key not in self.defaults:
                known = ", ".join(self.defaults) or "none"
                raise WorkflowError(f"workflow {self.name!r} has no parameter {key!r}; its parameters: {known}")
            values[key] = _coerce(key, value, self.defaults[key], self.annotations.get(key))
        return values

    def trace(self, inputs: Mapping[str, Any], params: Mapping[str, Any] | None = None) -> Workflow:
        """The workflow for inputs of these shapes and dtypes (arrays, or anything with
        ``.shape`` and ``.dtype``) and these parameters (cached per signature)."""
        signature = self._signature(inputs)
        values = self.parameters(params)
        key = (signature, tuple(sorted((k, repr(v)) for k, v in values.items())))
        if key not in self._cache:
            self._cache[key] = self._trace(signature, values)
        return self._cache[key]

    def _signature(self, inputs: Mapping[str, Any]) -> tuple:
        missing = [n for n in self.input_names if n not in inputs]
        if missing:
            raise WorkflowError(f"workflow {self.name!r} needs input(s) {missing} (its parameters without a "
                                f"default); got {sorted(inputs)}")
        out = []
        for name in self.input_names:
            value = inputs[name]
            shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
            if shape is None or dtype is None:
                value = np.asarray(value)
                shape, dtype = value.shape, value.dtype
            if len(shape) == 0:
                raise WorkflowError(f"input {name!r} is 0-d; workflow inputs are arrays of at least 1 axis "
                                    "(pass a number as a parameter with a default instead)")
            out.append((name, tuple(int(n) for n in shape), np.dtype(dtype).str))
        return tuple(out)

    def _trace(self, signature: tuple, values: dict[str, Any]) -> Workflow:
        started = time.perf_counter()
        tracer = Tracer(self.name)
        args = {}
        for name, shape, dtype in signature:
            args[name] = SymbolicArray(tracer, tracer.input(name, shape), shape, dtype)
        with tracer:
            result = self.fn(**args, **values)
            _name_outputs(tracer, result, self.name)
        wf = tracer.build()
        self.last_trace_seconds = time.perf_counter() - started
        return wf

    # -- running ---------------------------------------------------------------------------------
    def run(self, inputs: Mapping[str, Any], store, params: Mapping[str, Any] | None = None, **kwargs):
        """Trace with ``inputs``' shapes and dtypes and ``params``, and run: `Workflow.run`'s
        arguments otherwise.  Inputs that are not parameters of the function are refused."""
        extra = sorted(set(inputs) - set(self.input_names))
        if extra:
            raise WorkflowError(f"workflow {self.name!r} has no input(s) {extra}; its inputs: "
                                f"{', '.join(self.input_names)}")
        return self.trace(inputs, params).run(dict(inputs), store, **kwargs)

    def __repr__(self) -> str:
        return f"<sz.workflow {self.name}({', '.join(self.input_names)}; params={self.defaults})>"


def workflow(fn: Callable | None = None, *, name: str | None = None):
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
    elif isinstance(result, SymbolicArray):
        items = [("out", result)]
    elif isinstance(result, (tuple, list)):
        items = [(f"out{k}", v) for k, v in enumerate(result)]
    else:
        raise TraceError(f"@sz.workflow {where} returned {type(result).__name__}; return a symbolic array, a tuple "
                         "of them, or a dict name -> array", line="")
    for key, value in items:
        if not isinstance(value, SymbolicArray):
            raise TraceError(f"@sz.workflow {where}: output {key!r} is {type(value).__name__}, not an array computed "
                             "from the inputs", line="")
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
    unknown = [k for k in files if k not in fn.input_names]
    if unknown:
        raise WorkflowError(f"--input {unknown[0]}=...: workflow {fn.name!r} has no input {unknown[0]!r}; its inputs "
                            f"are {', '.join(fn.input_names)}")
    missing = [n for n in fn.input_names if n not in files]
    if missing:
        raise WorkflowError(f"workflow {fn.name!r} needs input {missing[0]!r}: give --input {missing[0]}=PATH "
                            "(.npy, .fits[EXT] or Zarr)")
    arrays = {n: files[n] for n in fn.input_names}
    return fn.trace(arrays, params), arrays
