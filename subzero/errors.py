"""Exception classes: every error subzero raises on purpose is one of these.

Each class also subclasses the builtin it refines, so callers may catch either
``sz.LineageError`` or ``ValueError``.
"""

from __future__ import annotations


class SubZeroError(Exception):
    """Root of every error subzero raises on purpose."""


class LineageError(SubZeroError, ValueError):
    """A lineage query or lineage write was malformed (bad cell, node, path, strategy)."""


class QueryCancelled(SubZeroError):
    """A lineage walk stopped at a step boundary because its caller cancelled it (the
    ``cancel`` event of `subzero.run.Run.backward_many` was set), e.g. the viewer dropping a
    brush that a newer brush of the same client superseded."""


class WorkflowError(SubZeroError, ValueError):
    """A workflow is malformed: cycle, unknown input, shape mismatch, bad strategy."""


class ConfigError(SubZeroError, ValueError):
    """A setting (`subzero.config`: environment, config file or ``config.set``) has a bad value."""


class StoreError(SubZeroError, OSError):
    """A run store is missing, corrupt, already used, or over its budget."""


class StorageUnavailable(StoreError):
    """The store's service (object storage) kept failing past the retry policy's limits
    (`subzero.store.retry`); the command line exits 1 on it (a user error exits 2)."""

    #: what became of the run's cleanup (the writer lock released, or not and why), said after
    #: the message
    cleanup: str = ""

    def __str__(self) -> str:
        text = super().__str__()
        return f"{text}; {self.cleanup}" if self.cleanup else text


class LookupTimeout(Exception):
    """Internal, never reaches users: stored lookups ran past their time budget, so the
    query step re-runs the operator instead (SubZero VII-A)."""
