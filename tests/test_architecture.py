"""The layering of docs/architecture.md, checked on the source: no new import cycle, no
import across a layer the page forbids, one home per heavy dependency.

The import graph is read from the AST of every module under ``subzero/`` (nothing is
imported): module-level imports, imports inside functions (lazy) and imports under
``TYPE_CHECKING`` all count, relative imports are resolved, and ``from subzero import x``
is an edge to the submodule ``subzero.x`` when there is one.  Module names below are
relative to ``subzero`` (``store.shards`` is ``subzero.store.shards``).

Each pinned exception is a debt named in docs/architecture.md ("Known debts"); pins are
exact, so a debt paid off must be unpinned here too.
"""

from __future__ import annotations

import ast
import functools
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "subzero"
DOC = "docs/architecture.md"

#: import cycles (strongly connected components of more than one module) that exist today
ALLOWED_CYCLES: set[frozenset[str]] = set()

#: imports from a layer up to one above it that are allowed by name, each only inside a
#: function (lazy), and left out of the cycle check: `Workflow.run` imports the driver when
#: called (as dask's ``compute`` imports its scheduler), so the workflow stays a plain DAG;
#: `Run.view` imports the notebook widget when called, so a run loads no front end
UPWARD_LAZY_EDGES: set[tuple[str, str]] = {("dag", "driver"), ("run", "tools.view.widget")}

#: the bottom layer: may import each other only
FOUNDATIONS = {"errors", "tiling", "cells", "boxes", "pairs", "frontier", "modes", "catalog", "spatial_index",
               "lazy", "progress", "inputs_check", "fingerprint", "config"}
MODEL = {"operator", "context"}

#: third-party package -> the only modules that may import it
HEAVY_HOMES = {
    "pyspark": {"executors.spark"},
    "pulp": {"optimizer.ilp"},
    "lmdb": {"store.shards"},
    "rtree": {"spatial_index"},
    "cloudpickle": {"pickling"},
    "fsspec": {"store.location"},
    "zarr": {"store.arrays", "input_files"},  # a user's .zarr input file
}

#: modules that assign ``op.output_shape`` / ``op.input_shapes``: only `Operator.bound`, which
#: sets them on a copy (debt 2 paid: shapes travel in `NodeTask` and `NodeStage`)
SHAPE_MUTATORS = {"operator"}


@dataclass(frozen=True)
class Edge:
    """One import of a subzero module: where it is and how it runs."""

    source: str
    target: str
    line: int
    kind: str  # "top" (module level), "lazy" (inside a function) or "type" (under TYPE_CHECKING)

    def __str__(self) -> str:
        return f"subzero/{self.source.replace('.', '/')}.py:{self.line} imports {self.target} ({self.kind})"


@dataclass
class Source:
    """What the walk found: modules, edges between them, third-party imports, shape mutations."""

    modules: dict[str, Path]
    edges: list[Edge]
    external: dict[str, set[str]]  # top-level package -> importing modules
    external_edges: list[Edge]  # every import of a package outside subzero (target: its top-level name)
    shape_mutations: dict[str, list[int]]  # module -> lines assigning .output_shape/.input_shapes

    def targets(self, module: str) -> set[str]:
        return {e.target for e in self.edges if e.source == module}

    def importers(self, target: str) -> set[str]:
        return {e.source for e in self.edges if e.target == target}

    def edges_from(self, module: str, targets: set[str]) -> list[str]:
        return sorted(str(e) for e in self.edges if e.source == module and e.target in targets)


def _module_name(path: Path) -> tuple[str, bool]:
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    is_package = parts[-1] == "__init__"
    if is_package:
        parts = parts[:-1]
    return ".".join(parts) or "subzero", is_package


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


class _Walker(ast.NodeVisitor):
    """Collects (dotted name, names imported from it or None, line, kind) of every import."""

    def __init__(self) -> None:
        self.functions = 0
        self.type_only = 0
        self.found: list[tuple[str, int, tuple[str, ...] | None, int, str]] = []
        self.shape_lines: list[int] = []

    def _kind(self) -> str:
        return "type" if self.type_only else ("lazy" if self.functions else "top")

    def visit_FunctionDef(self, node: ast.AST) -> None:
        self.functions += 1
        self.generic_visit(node)
        self.functions -= 1

    visit_AsyncFunctionDef = visit_FunctionDef
    visit_Lambda = visit_FunctionDef

    def visit_If(self, node: ast.If) -> None:
        if not _is_type_checking(node.test):
            self.generic_visit(node)
            return
        self.type_only += 1
        for stmt in node.body:
            self.visit(stmt)
        self.type_only -= 1
        for stmt in node.orelse:
            self.visit(stmt)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self.found.append((alias.name, 0, None, node.lineno, self._kind()))

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        self.found.append((node.module or "", node.level, tuple(a.name for a in node.names), node.lineno,
                           self._kind()))

    def _assigned(self, targets: list[ast.expr], line: int) -> None:
        for target in targets:
            for part in ast.walk(target):
                if isinstance(part, ast.Attribute) and part.attr in ("output_shape", "input_shapes"):
                    self.shape_lines.append(line)

    def visit_Assign(self, node: ast.Assign) -> None:
        self._assigned(node.targets, node.lineno)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._assigned([node.target], node.lineno)
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self._assigned([node.target], node.lineno)
        self.generic_visit(node)


@functools.lru_cache(maxsize=1)
def source() -> Source:
    paths = {}
    packages = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        name, is_package = _module_name(path)
        paths[name] = path
        if is_package:
            packages.add(name)
    full = {("subzero" if n == "subzero" else f"subzero.{n}"): n for n in paths}

    def known(dotted: str) -> str | None:
        """The longest prefix of ``dotted`` that is a subzero module, by its short name."""
        while dotted:
            if dotted in full:
                return full[dotted]
            dotted = dotted.rpartition(".")[0]
        return None

    edges: list[Edge] = []
    external: dict[str, set[str]] = {}
    external_edges: list[Edge] = []
    mutations: dict[str, list[int]] = {}
    for name, path in paths.items():
        walker = _Walker()
        walker.visit(ast.parse(path.read_text(), filename=str(path)))
        dotted_self = "subzero" if name == "subzero" else f"subzero.{name}"
        package = dotted_self if name in packages else dotted_self.rpartition(".")[0]
        for module, level, names, line, kind in walker.found:
            if level:  # relative: from the package, up level - 1
                base = package.split(".")
                base = base[:len(base) - (level - 1)]
                module = ".".join(base + ([module] if module else []))
            if module.split(".")[0] != "subzero":
                external.setdefault(module.split(".")[0], set()).add(name)
                external_edges.append(Edge(name, module.split(".")[0], line, kind))
                continue
            targets = [known(f"{module}.{n}") if f"{module}.{n}" in full else known(module)
                       for n in names] if names else [known(module)]
            for target in dict.fromkeys(t for t in targets if t is not None and t != name):
                edges.append(Edge(name, target, line, kind))
        if walker.shape_lines:
            mutations[name] = walker.shape_lines
    return Source(paths, edges, external, external_edges, mutations)


def cycles(src: Source) -> set[frozenset[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    graph = {m: sorted(t for t in src.targets(m) if (m, t) not in UPWARD_LAZY_EDGES) for m in src.modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: set[frozenset[str]] = set()
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10 * len(graph) + 100))

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                found.add(frozenset(component))

    try:
        for v in graph:
            if v not in index:
                connect(v)
    finally:
        sys.setrecursionlimit(limit)
    return found


def _under(prefix: str, src: Source) -> list[str]:
    return sorted(m for m in src.modules if m == prefix or m.startswith(prefix + "."))


def _fail(rule: str, section: str, lines: list[str]) -> str:
    return (f"{rule} (docs: {DOC}, \"{section}\"). Offending imports:\n  " + "\n  ".join(lines) +
            "\nMove the code to the layer it belongs to, or invert the dependency (pass a value or a "
            "protocol in); if the rule itself must change, change the page and this test together.")


# -- the walker itself ---------------------------------------------------------------------------

def test_the_walk_sees_every_kind_of_import():
    src = source()
    assert len(src.modules) > 80 and "store.shards" in src.modules and "subzero" in src.modules
    kinds = {(e.source, e.target): e.kind for e in src.edges}
    assert kinds[("run", "query")] == "top"
    assert kinds[("dag", "driver")] == "lazy"  # Workflow.run imports the driver when called
    assert kinds[("subzero", "run")] == "type"  # under TYPE_CHECKING
    assert ("encoders", "encoders.full_one") in kinds  # relative to absolute, package __init__
    assert ("store", "store.file_store") in kinds
    assert ("tools.cli", "subzero") in kinds  # `from subzero import __version__`
    assert kinds[("tools.cli", "tools.cli.run")] == "top"  # `from subzero.tools.cli import run`: its own module
    assert "pyspark" in src.external and "numpy" in src.external


def test_from_package_import_name_resolves_submodules():
    walker = _Walker()
    walker.visit(ast.parse("from subzero import operators\nfrom . import codec\n"
                           "def f():\n    import subzero.store.shards as s\n"))
    assert [(m, lvl, n, k) for m, lvl, n, _, k in walker.found] == [
        ("subzero", 0, ("operators",), "top"), ("", 1, ("codec",), "top"), ("subzero.store.shards", 0, None, "lazy")]
    src = source()
    assert ("tools.cli.demo", "store.lock") in {(e.source, e.target) for e in src.edges}  # from ... import


# -- cycles --------------------------------------------------------------------------------------

def test_import_cycles_are_exactly_the_pinned_ones():
    src = source()
    found = cycles(src)
    new = [sorted(c) for c in found - ALLOWED_CYCLES]
    gone = [sorted(c) for c in ALLOWED_CYCLES - found]
    detail = []
    for component in found - ALLOWED_CYCLES:
        detail += [str(e) for e in src.edges if e.source in component and e.target in component]
    assert not new, _fail(f"new import cycle(s) {new}; lazy and TYPE_CHECKING imports count too",
                          "Packages and modules", sorted(detail))
    assert not gone, (f"the pinned cycle(s) {gone} are gone: remove them from ALLOWED_CYCLES in "
                      f"{Path(__file__).name} and from \"Known debts\" in {DOC}")


# -- layers --------------------------------------------------------------------------------------

def _check_allowed(src: Source, modules: list[str], allowed, pinned: set[tuple[str, str]], rule: str) -> None:
    bad, used = [], set()
    for m in modules:
        for e in src.edges:
            if e.source != m or allowed(e.target):
                continue
            if (m, e.target) in pinned:
                used.add((m, e.target))
                continue
            bad.append(str(e))
    assert not bad, _fail(rule, "Packages and modules", sorted(bad))
    assert used == pinned, (f"pinned exception(s) {sorted(pinned - used)} no longer occur: unpin them in "
                            f"{Path(__file__).name} and strike them from \"Known debts\" in {DOC}")


def _in(*prefixes: str):
    return lambda m: any(m == p or m.startswith(p + ".") for p in prefixes)


def test_store_imports_nothing_above_it():
    src = source()
    allowed = lambda m: m in FOUNDATIONS or _in("store")(m)  # noqa: E731
    _check_allowed(src, _under("store", src), allowed, set(),
                   "the store (store/*) imports only the foundations and itself; the key layout belongs to "
                   "the encoders")


def test_encoders_import_no_store_and_nothing_above_them():
    src = source()
    allowed = lambda m: m in FOUNDATIONS or _in("encoders")(m)  # noqa: E731
    _check_allowed(src, _under("encoders", src), allowed, set(),
                   "encoders (encoders/*) import only the foundations and each other: never the store, the "
                   "worker, the driver, queries or operators")


def test_operators_import_only_the_model_and_the_foundations():
    src = source()
    allowed = lambda m: m in FOUNDATIONS or m in MODEL or _in("operators")(m)  # noqa: E731
    _check_allowed(src, _under("operators", src), allowed, set(),
                   "operators (operators/*) import only operator, context and the foundations: no run, CLI, "
                   "store, encoders, worker, query or optimizer")


def test_foundations_import_only_foundations():
    src = source()
    _check_allowed(src, sorted(FOUNDATIONS), lambda m: m in FOUNDATIONS, set(),
                   f"the foundations ({', '.join(sorted(FOUNDATIONS))}) import only each other")


def test_the_model_imports_only_the_foundations():
    src = source()
    _check_allowed(src, sorted(MODEL | {"pickling"}), lambda m: m in FOUNDATIONS or m in MODEL, set(),
                   "operator, context and pickling import only the model and the foundations")


def test_optimizer_imports_no_driver_query_store_or_cli():
    src = source()
    forbidden = _in("driver", "run", "query", "replay", "tools", "executors.spark", "store", "workflows")
    _check_allowed(src, _under("optimizer", src), lambda m: not forbidden(m), set(),
                   "the optimizer (optimizer/*) never imports the driver (driver.py), run, query, replay, "
                   "spark, the store or the CLI")


def test_query_reads_runs_through_its_protocol():
    src = source()
    forbidden = _in("run", "driver", "replay", "tools", "store", "executors.spark")
    _check_allowed(src, ["query"], lambda m: not forbidden(m) or m == "store.roles", set(),
                   "query imports neither run, the driver nor the store: it reads a run through the "
                   "store's LineageReader role (store.roles, interfaces only)")


def test_the_worker_and_the_executors_never_import_the_driver_or_queries():
    src = source()
    forbidden = _in("driver", "run", "query", "replay", "tools", "dag", "strategies", "optimizer")
    _check_allowed(src, ["worker", *_under("executors", src)], lambda m: not forbidden(m), set(),
                   "the task side (worker, executors/*) never imports the driver, queries, the workflow or the "
                   "optimizer")


def test_workflow_imports_only_the_model():
    src = source()
    _check_allowed(src, ["dag"], lambda m: m in {"operator", "errors"}, {("dag", "driver")},
                   "dag (the workflow DAG) imports only operator and errors, and the driver (driver.py) "
                   "inside Workflow.run; never run, strategies or the optimizer")


def test_upward_imports_are_the_pinned_lazy_ones():
    src = source()
    upward = [e for e in src.edges if (e.source, e.target) in UPWARD_LAZY_EDGES]
    assert {(e.source, e.target) for e in upward} == UPWARD_LAZY_EDGES, \
        f"pinned upward import(s) {sorted(UPWARD_LAZY_EDGES - {(e.source, e.target) for e in upward})} are gone: unpin them"
    eager = [str(e) for e in upward if e.kind != "lazy"]
    assert not eager, _fail("an upward import allowed by name is made inside a function only (lazy): a module-level "
                            "one would load the driver with the workflow", "Packages and modules", eager)


def test_the_core_imports_no_tool():
    """The tools (tools/*: the command line, the viewer, info, explain, describe, brush, export)
    sit on top of the core: nothing below imports them but ``python -m subzero`` (their old
    paths, ``subzero.cli`` and ``subzero.brush``, are names `subzero._MOVED` resolves, no files)."""
    src = source()
    ok = _in("tools", "__main__")
    bad = [str(e) for e in src.edges if _in("tools")(e.target) and not ok(e.source)
           and (e.source, e.target) not in UPWARD_LAZY_EDGES]  # Run.view's lazy import of the widget
    assert not bad, _fail("the core imports nothing of tools/* (the command line, the viewer, the reports)",
                          "Packages and modules", sorted(bad))


def test_only_the_front_ends_import_the_cli_and_workflows():
    src = source()
    bad = []
    for target in src.modules:
        if _in("tools.cli")(target):
            ok = _in("tools.cli", "__main__")
        elif _in("workflows")(target):
            ok = _in("workflows", "tools.cli")
        else:
            continue
        bad += [str(e) for e in src.edges if e.target == target and not ok(e.source)]
    assert not bad, _fail("only the front ends (tools/cli/*, workflows/*) import tools/cli/* and workflows/*",
                          "Packages and modules", sorted(bad))


def test_subzero_imports_no_benchmark_code_but_its_bench_command_lazily():
    """The benchmarks are a distribution of their own (benchmarks/, package ``subzero_bench``):
    the package imports nothing of it, except ``subzero bench`` inside its command function."""
    src = source()
    assert "bench" not in src.modules and not any(m.startswith("bench.") for m in src.modules), \
        "subzero/bench/ is back: benchmark code lives in benchmarks/subzero_bench (docs: " + DOC + ")"
    imports = [e for e in src.external_edges if e.target == "subzero_bench"]
    bad = [str(e) for e in imports if (e.source, e.kind) != ("tools.cli.bench", "lazy")]
    assert not bad, _fail("subzero imports nothing from the benchmarks (subzero_bench); only `subzero bench` "
                          "(tools/cli/bench.py) imports them, inside its command", "Packages and modules",
                          sorted(bad))
    assert imports, "tools/cli/bench.py no longer imports subzero_bench: update this test and the page"


@pytest.mark.parametrize("package", sorted(HEAVY_HOMES))
def test_each_heavy_dependency_has_one_home(package):
    src = source()
    users = src.external.get(package, set())
    assert users <= HEAVY_HOMES[package], (
        f"{package} is imported by {sorted(users - HEAVY_HOMES[package])}; only {sorted(HEAVY_HOMES[package])} "
        f"may import it (docs: {DOC}, \"Packages and modules\"): go through that module instead")


def test_no_new_output_shape_mutation_sites():
    src = source()
    mutators = set(src.shape_mutations)
    new = {m: src.shape_mutations[m] for m in sorted(mutators - SHAPE_MUTATORS)}
    assert not new, (f"new run-time assignments of op.output_shape / op.input_shapes: {new} (docs: {DOC}, "
                     "\"Known debts\" 2): shapes are data; pass them in the task's records, and bind an "
                     "operator with Operator.bound (a copy) instead")
    gone = SHAPE_MUTATORS - mutators
    assert not gone, (f"{sorted(gone)} no longer assign operator shapes: remove them from SHAPE_MUTATORS in "
                      f"{Path(__file__).name} and from \"Known debts\" in {DOC}")


def test_directions_are_compared_as_the_enum():
    """A direction is a `modes.Direction`, parsed once where a name enters: code compares it
    with ``Direction.BACKWARD``, never with the string ``"backward"``."""
    import re

    pattern = re.compile(r"""[!=]=\s*["'](backward|forward)["']|["'](backward|forward)["']\s*[!=]=""")
    found: dict[str, list[int]] = {}
    for name, path in source().modules.items():
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if pattern.search(line.split("#")[0]) and ">>>" not in line and "``" not in line:
                found.setdefault(name, []).append(number)
    assert not found, (f"directions compared with strings at {found}: compare with modes.Direction (parse the "
                       "name once, with Direction.parse, where it enters)")


# -- the page itself -------------------------------------------------------------------------------

def test_the_page_names_every_module_and_package():
    """Every top-level module, every store module and every package has its line in the page,
    so a new one (or a renamed one) is described where a newcomer looks."""
    text = (ROOT / DOC).read_text()
    missing = []
    for path in sorted(PACKAGE.glob("*.py")):
        if path.stem != "__init__" and f"`{path.stem}`" not in text and f"`{path.stem}.py" not in text:
            missing.append(f"subzero/{path.name}")
    # store and cli modules by their folder (`store/shards`, `cli/run`), the tools' own by name
    for folder, named in (("store", "store/"), ("tools/cli", "cli/"), ("tools", "")):
        for path in sorted(PACKAGE.glob(f"{folder}/*.py")):
            if path.stem != "__init__" and f"`{named}{path.stem}`" not in text and \
                    f"`{named}{path.stem}.py" not in text:
                missing.append(f"subzero/{folder}/{path.name}")
    for folder in sorted(p for p in PACKAGE.iterdir() if (p / "__init__.py").exists()):
        if f"`{folder.name}/" not in text:
            missing.append(f"subzero/{folder.name}/")
    assert not missing, (f"{DOC} does not describe {missing}: add each to the table under \"Packages and "
                         "modules\" (its job and what it may import)")


def test_the_pages_line_references_point_into_existing_files():
    import re

    text = (ROOT / DOC).read_text()
    refs = re.findall(r"`([\w/]+\.py):(\d+)`", text)
    assert refs
    bad = []
    for rel, line in refs:
        path = PACKAGE / rel
        if not path.exists():
            bad.append(f"{rel} (no such file)")
        elif int(line) > len(path.read_text().splitlines()):
            bad.append(f"{rel}:{line} (past its end)")
    assert not bad, f"{DOC} refers to {bad}; bring \"Known debts\" up to date"


# -- public functions: documented and typed ----------------------------------------------------------

@functools.lru_cache(maxsize=1)
def _trees() -> dict[Path, ast.Module]:
    """Every module of the package, parsed once for the tests below."""
    return {path: ast.parse(path.read_text(), filename=str(path)) for path in sorted(PACKAGE.rglob("*.py"))}


@functools.lru_cache(maxsize=1)
def _public_functions() -> list[tuple[str, ast.ClassDef | None, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """Every public function and method of a public module (``where``, its class, its def):
    names without a leading underscore, classes without one, no nested functions, no
    ``@overload`` stubs nor property setters."""
    found = []
    for path, tree in _trees().items():
        rel = path.relative_to(ROOT)
        if any(part.startswith("_") and part != "__init__.py" for part in rel.parts):
            continue

        def public(body: list[ast.stmt], cls: ast.ClassDef | None) -> None:
            for node in body:
                if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                    public(node.body, node)
                elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not node.name.startswith("_"):
                    decorators = {d.attr if isinstance(d, ast.Attribute) else getattr(d, "id", "")
                                  for d in node.decorator_list}
                    if not decorators & {"overload", "setter"}:
                        where = f"{rel}:{node.lineno} {cls.name + '.' if cls else ''}{node.name}"
                        found.append((where, cls, node))

        public(tree.body, None)
    return found


def _documented_methods() -> dict[str, tuple[list[str], set[str]]]:
    """Class name -> (its bases' names, its methods that have a docstring), over the package."""
    classes: dict[str, tuple[list[str], set[str]]] = {}
    for tree in _trees().values():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                bases = [b.attr if isinstance(b, ast.Attribute) else getattr(b, "id", "") for b in node.bases]
                docs = {f.name for f in node.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                        and ast.get_docstring(f)}
                known = classes.get(node.name, ([], set()))
                classes[node.name] = (known[0] + bases, known[1] | docs)
    return classes


def _inherits_doc(classes: dict[str, tuple[list[str], set[str]]], cls: ast.ClassDef, name: str) -> bool:
    """Whether a base of ``cls`` documents ``name`` (as ``inspect.getdoc`` and the API reference
    read it); a base from outside subzero (``json.JSONEncoder.default``) documents its own API."""
    todo, seen = list(classes.get(cls.name, ([], set()))[0]), set()
    while todo:
        base = todo.pop()
        if base in seen or base in ("object", "Protocol", "Generic", "ABC"):
            continue
        seen.add(base)
        if base not in classes:
            return True
        bases, docs = classes[base]
        if name in docs:
            return True
        todo.extend(bases)
    return False


def test_every_public_function_has_a_docstring():
    classes = _documented_methods()
    missing = [where for where, cls, node in _public_functions()
               if not ast.get_docstring(node) and not (cls and _inherits_doc(classes, cls, node.name))]
    assert not missing, ("public functions without a docstring (numpydoc: what it returns, its parameters where "
                         "their names do not say it; an override may rely on its base's):\n  " + "\n  ".join(missing))


#: public functions still without full hints, by module and name: the query walk's, whose
#: ``node`` is typed when that module's rework lands (a `Node` there needs its operator
#: checked, as `subzero.stats.relation` does); fixing one means taking it off this list
UNTYPED: dict[str, set[str]] = {}  # public functions allowed without hints (none now)


def test_every_public_function_has_type_hints():
    missing, pinned = [], set()
    for where, cls, node in _public_functions():
        args = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
        if cls is not None and args and args[0].arg in ("self", "cls"):
            args = args[1:]
        bare = [a.arg for a in args + [a for a in (node.args.vararg, node.args.kwarg) if a] if a.annotation is None]
        if node.returns is None and node.name != "__init__":
            bare.append("return")
        path, name = where.split(":")[0], where.split(" ")[1]
        if bare and name in UNTYPED.get(path, ()):
            pinned.add((path, name))
        elif bare:
            missing.append(f"{where}: {', '.join(bare)}")
    assert not missing, "public functions without type hints (mypy checks what they say):\n  " + "\n  ".join(missing)
    typed = sorted(f"{path} {name}" for path, names in UNTYPED.items() for name in names if (path, name) not in pinned)
    assert not typed, f"now typed (or gone): take them off UNTYPED: {typed}"
