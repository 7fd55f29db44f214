"""The run entry: the driver `Workflow.run` delegates to, installed from the layer above.

`workflow` is a pure DAG low in the planning layer; the driver that runs it
(`execution.execute`) sits above it and imports it.  So that ``wf.run(...)`` works while
the workflow module imports no driver, the package's ``__init__`` (which Python runs before
any ``subzero.*`` submodule) installs a runner here with `install_runner`, and
`Workflow.run` calls `runner`.  This module imports only `errors`.
"""

from __future__ import annotations

from typing import Any, Protocol

from subzero.errors import WorkflowError

__all__ = ["WorkflowRunner", "install_runner", "runner"]


class WorkflowRunner(Protocol):
    """What `Workflow.run` calls: ``(workflow, inputs, store, **options) -> Run``
    (the signature of `subzero.execution.execute`)."""

    def __call__(self, workflow: Any, inputs: dict[str, Any], store: Any, /, **options: Any) -> Any: ...


_installed: WorkflowRunner | None = None


def install_runner(run: WorkflowRunner) -> None:
    """Make ``run`` the driver `Workflow.run` delegates to (the package installs
    `subzero.execution.execute` through a lazy wrapper)."""
    global _installed
    _installed = run


def runner() -> WorkflowRunner:
    """The installed driver.

    Raises
    ------
    WorkflowError
        If none is installed (only when the package's ``__init__`` was bypassed).
    """
    if _installed is None:
        raise WorkflowError("no driver is installed for Workflow.run: import subzero (the package installs "
                            "subzero.execution.execute), or call subzero.execution.execute directly")
    return _installed
