"""Where a store lives: a local directory or any fsspec URL, and the file operations on it.

A `Location` is picklable (fsspec file systems are), so Spark tasks receive it and
read or write the store themselves.  Local directories get the fast paths (atomic
rename, files LMDB can map in place); other file systems are written object by
object and read through a local cache of immutable files.
"""

from __future__ import annotations

import os
import posixpath
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from subzero.errors import StoreError
from subzero.store.failures import store_file_error

__all__ = ["Location", "resolve"]


def _scheme(url: str) -> str:
    return url.split("://", 1)[0] if "://" in url else "file"


def resolve(store: "str | os.PathLike | Location") -> "Location":
    """The `Location` of a store given as a path, a URL (``file://``, ``s3://``, ``memory://``...)
    or a `Location`; a scheme whose fsspec package is missing is a `StoreError`."""
    if isinstance(store, Location):
        return store
    if not isinstance(store, (str, os.PathLike)):
        raise StoreError(f"store must be a directory path or an fsspec URL such as 's3://bucket/run', "
                         f"got {type(store).__name__}")
    url = os.fspath(store)
    if not url:
        raise StoreError("store is empty; give a directory path or an fsspec URL")
    import fsspec

    scheme = _scheme(url)
    if scheme == "file":
        path = str(Path(url[7:] if url.startswith("file://") else url).expanduser().absolute())
        return Location(path, fsspec.filesystem("file"), path)
    try:
        fs, path = fsspec.core.url_to_fs(url)
    except ImportError as exc:
        raise StoreError(f"store {url!r}: the {scheme!r} file system needs a package that is not installed "
                         f"({exc}); install it (e.g. 'pip install s3fs' for s3://) or use a local directory") from exc
    except (ValueError, OSError) as exc:
        raise StoreError(f"store {url!r} cannot be reached ({type(exc).__name__}: {exc}); check the URL and "
                         "credentials") from exc
    return Location(url.rstrip("/"), fs, path.rstrip("/"))


@dataclass(frozen=True)
class Location:
    """A store root: the URL a user gave, its file system and the root path in it."""

    url: str
    fs: Any
    root: str

    @property
    def is_local(self) -> bool:
        """True for a directory of this machine's file system (LMDB maps its files in place)."""
        return "file" in (self.fs.protocol if isinstance(self.fs.protocol, tuple) else (self.fs.protocol,))

    @property
    def scheme(self) -> str:
        return _scheme(self.url)

    def path(self, *parts: str) -> str:
        """The path of ``parts`` under the root, in the file system's own syntax."""
        if self.is_local:
            return os.path.join(self.root, *parts)
        return posixpath.join(self.root, *parts)

    def child_url(self, *parts: str) -> str:
        """A URL of ``parts`` under the root (what zarr and users are given)."""
        if self.is_local:
            return self.path(*parts)
        return posixpath.join(self.url, *parts)

    # -- files ----------------------------------------------------------------------------
    def exists(self, *parts: str) -> bool:
        try:
            return bool(self.fs.exists(self.path(*parts)))
        except OSError as exc:
            raise self._unreachable(exc) from exc

    def isdir(self, *parts: str) -> bool:
        try:
            return bool(self.fs.isdir(self.path(*parts)))
        except OSError as exc:
            raise self._unreachable(exc) from exc

    def listdir(self, *parts: str) -> list[str]:
        """Names in a directory (empty if it does not exist)."""
        path = self.path(*parts)
        try:
            if self.is_local:
                return sorted(os.listdir(path))
            return sorted(posixpath.basename(p.rstrip("/")) for p in self.fs.ls(path, detail=False))
        except FileNotFoundError:
            return []
        except OSError as exc:  # a file where the directory belongs, no permission...
            raise store_file_error(exc, "the directory", self.child_url(*parts)) from exc

    def makedirs(self, *parts: str) -> None:
        try:
            self.fs.makedirs(self.path(*parts), exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create {self.child_url(*parts)!r} ({exc}); check that the store "
                             "location is writable") from exc

    def read_bytes(self, *parts: str) -> bytes:
        return self.fs.cat_file(self.path(*parts))

    def write_bytes(self, data: bytes, *parts: str, durable: bool = True) -> None:
        """Write a file atomically: a reader sees the old file or the new one, never a part.

        ``durable`` also flushes it to the disk before it replaces the old one (catalogs and
        manifests); data files skip it, as a checksum tells a torn one after a power loss.
        """
        path = self.path(*parts)
        if not self.is_local:
            self.fs.pipe_file(path, data)  # object stores replace objects whole
            return
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=os.path.basename(path) + ".",
                                   suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                if durable:
                    fh.flush()
                    os.fsync(fh.fileno())
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise

    def append_text(self, text: str, *parts: str) -> None:
        with self.fs.open(self.path(*parts), "a") as fh:
            fh.write(text)

    def remove(self, *parts: str) -> None:
        try:
            self.fs.rm(self.path(*parts), recursive=True)
        except FileNotFoundError:
            pass

    def size(self, *parts: str) -> int:
        return int(self.fs.size(self.path(*parts)))

    def put_file(self, local_path: str, *parts: str) -> None:
        """Copy a local file into the store (remote file systems)."""
        self.fs.put_file(local_path, self.path(*parts))

    def get_file(self, local_path: str, *parts: str) -> None:
        """Copy a store file to this machine (remote file systems)."""
        self.fs.get_file(self.path(*parts), local_path)

    def _unreachable(self, exc: Exception) -> StoreError:
        return StoreError(f"store {self.url!r} cannot be reached ({type(exc).__name__}: {exc}); check the "
                          "URL, the network and the credentials")

    def __repr__(self) -> str:
        return f"Location({self.url!r})"
