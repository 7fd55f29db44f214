"""Where a run lives: arrays (Zarr), lineage shards (LMDB + R-trees), catalog and manifests.

The roles (`subzero.store.roles`) say what each client may do: the driver writes through a
`RunWriter`, tasks through a `ShardSink`, queries read through a `LineageReader`.
`FileStore` implements them over a local directory or any fsspec URL; clients get one from
the functions below.  Only `subzero.store.arrays` imports zarr and only
`subzero.store.shards` imports lmdb.
"""

from __future__ import annotations

import os
from typing import cast

from subzero.catalog import RunRecord
from subzero.store.arrays import ArrayRef
from subzero.store.behind import BehindStore, wait_for_writes
from subzero.store.file_store import FileStore, strategy_dirname
from subzero.store.location import Location, resolve
from subzero.store.roles import LineageReader, RunWriter
from subzero.store.shards import ShardSink

__all__ = ["FileStore", "ArrayRef", "Location", "resolve", "strategy_dirname", "LineageReader", "RunWriter",
           "ShardSink", "create_run", "resume_run", "open_store", "check_store_path", "made_by"]


def create_run(store: str | os.PathLike | Location, record: RunRecord, overwrite: bool = False,
               made_by: str | None = None, behind: int | None = None, hold: float = 0.0) -> RunWriter:
    """Take a new store for a run and write its first catalog (`FileStore.create`).  ``behind``:
    the store is a `BehindStore` holding at most that many bytes of queued writes, its first
    catalog the first of them (the caller's thread does not wait for it to reach the disk), each
    write waiting up to ``hold`` seconds while the run computes (`subzero.store.behind.WriteBehind`)."""
    if behind is None:
        return FileStore.create(store, record, overwrite=overwrite, made_by=made_by)
    first: list = []
    out = BehindStore(FileStore.create(store, record, overwrite=overwrite, made_by=made_by, later=first.append),
                      behind, hold)
    for job in first:
        out.behind.submit(job)
    return cast(RunWriter, out)  # a RunWriter whose location is read-only


def resume_run(store: str | os.PathLike | Location, record: RunRecord,
               made_by: str | None = None) -> tuple[RunWriter, RunRecord | None]:
    """Take a store back to continue its run: the writer and the catalog as stored, or None
    when there was nothing to continue (`FileStore.resume`)."""
    return FileStore.resume(store, record, made_by)


def open_store(store: str | os.PathLike | Location, wait: bool = True) -> LineageReader:
    """Open an existing store for reading (`FileStore.open`), once this process has finished
    writing it behind a run (`subzero.store.behind`).  Not when ``wait`` is False: the reader
    of a store this process is still writing behind a run (its catalog may not be on the disk
    yet; the reads wait for the writes: `subzero.store.behind.AfterWrites`), unchecked."""
    if wait:
        wait_for_writes(resolve(store).url)
        return FileStore.open(store)
    return FileStore(resolve(store))


def check_store_path(store: str | os.PathLike | Location, resume: bool, overwrite: bool = False) -> None:
    """Refuse, before any input is read, a store path a new (or resumed) run cannot take."""
    if resume:
        FileStore.check_resumable(store)
    else:
        FileStore.check_new(store, overwrite=overwrite, create=False)


def made_by(store: str | os.PathLike | Location) -> str | None:
    """Who made a store (``made_by`` given to `create_run`), or None when unknown."""
    return FileStore.made_by(store)
