"""Where a store lives: a local directory or any fsspec URL, and the file operations on it.

A `Location` is picklable (fsspec file systems are), so Spark tasks receive it and
read or write the store themselves.  Local directories get the fast paths (atomic
rename, files LMDB can map in place); other file systems are written object by
object and read through a local cache of immutable files.
"""

from __future__ import annotations

import functools
import json
import os
import posixpath
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, TypeVar

from subzero.errors import StoreError
from subzero.store import retry
from subzero.store.failures import store_file_error

__all__ = ["Location", "resolve", "parse_storage_options", "configure_storage_options"]

# a request that fails transiently (503 SlowDown, a connection reset or timeout) is retried by
# `subzero.store.retry`'s one policy (time budgets in `subzero.config`); s3fs and botocore make
# one attempt per call, so their retries do not multiply ours


_T = TypeVar("_T")


def _scheme(url: str) -> str:
    return url.split("://", 1)[0] if "://" in url else "file"


def parse_storage_options(items: "list[str] | None") -> dict[str, Any]:
    """``["endpoint_url=http://127.0.0.1:9000", "client_kwargs.region_name=eu-west-1", "anon=false"]``
    -> fsspec storage options: a dotted key is a nested dict, a value is JSON when it parses
    (``true``, ``3``, ``{...}``), else a string.

    Examples
    --------
    >>> parse_storage_options(["endpoint_url=http://127.0.0.1:9000", "client_kwargs.region_name=eu", "anon=true"])
    {'endpoint_url': 'http://127.0.0.1:9000', 'client_kwargs': {'region_name': 'eu'}, 'anon': True}
    """
    out: dict[str, Any] = {}
    for item in items or []:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise StoreError(f"--storage-option {item!r} must look like KEY=VALUE (e.g. endpoint_url=http://host:9000)")
        try:
            value = json.loads(text)
        except ValueError:
            value = text
        *parents, last = key.strip().split(".")
        node = out
        for part in parents:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise StoreError(f"--storage-option {item!r}: {part!r} is given both as a value and as a group")
        node[last] = value
    return out


def configure_storage_options(url: str, options: dict[str, Any]) -> None:
    """Make ``options`` the defaults of every file system of ``url``'s protocol in this process
    (fsspec's own configuration, as ``FSSPEC_S3_ENDPOINT_URL`` or ``~/.config/fsspec/*.json`` set
    it): what ``--storage-option`` does, so every command's stores open with them."""
    if not options:
        return
    import fsspec.config

    current = fsspec.config.conf.setdefault(_scheme(url), {})
    for key, value in options.items():
        if isinstance(value, dict) and isinstance(current.get(key), dict):
            current[key] = {**current[key], **value}
        else:
            current[key] = value


def storage_defaults(url: str) -> dict[str, Any]:
    """A copy of the defaults every file system of ``url``'s protocol opens with in this process
    (fsspec's configuration, which `configure_storage_options` changes)."""
    import fsspec.config

    return dict(fsspec.config.conf.get(_scheme(url), {}))


def restore_storage_defaults(url: str, saved: dict[str, Any]) -> None:
    """Make ``saved`` (from `storage_defaults`) the defaults of ``url``'s protocol again."""
    import fsspec.config

    fsspec.config.conf[_scheme(url)] = dict(saved)


def resolve(store: "str | os.PathLike | Location", storage_options: dict[str, Any] | None = None) -> "Location":
    """The `Location` of a store given as a path, a URL (``file://``, ``s3://``, ``memory://``...)
    or a `Location`; a scheme whose fsspec package is missing is a `StoreError`.

    ``storage_options`` go to the file system (fsspec's ``storage_options``: for ``s3://``,
    ``endpoint_url``, ``key``, ``secret``, ``client_kwargs``, ``config_kwargs``...); without
    them fsspec's configuration and the environment apply (``AWS_ENDPOINT_URL``,
    ``FSSPEC_S3_*``).  The options travel with the `Location` to the tasks.  A request to an
    ``s3://`` store that fails transiently is retried with backoff within the storage budgets (`subzero.store.retry`).
    """
    if isinstance(store, Location):
        return store
    if not isinstance(store, (str, os.PathLike)):
        raise StoreError(f"store must be a directory path or an fsspec URL such as 's3://bucket/run', "
                         f"got {type(store).__name__}")
    url = os.fspath(store)
    if not url:
        raise StoreError("store is empty; give a directory path or an fsspec URL")
    scheme = _scheme(url)
    if scheme == "file":
        path = str(Path(url[7:] if url.startswith("file://") else url).expanduser().absolute())
        return Location(path, LocalFiles(), path)
    import fsspec

    options = dict(storage_options or {})
    if scheme in ("s3", "s3a"):
        _endpoint_from_environment(options)
        options = retry.client_options(options, storage_defaults(url))
    try:
        fs, path = fsspec.core.url_to_fs(url, **options)
    except ImportError as exc:
        raise StoreError(f"store {url!r}: the {scheme!r} file system needs a package that is not installed "
                         f"({exc}); install it (e.g. 'pip install s3fs' for s3://) or use a local directory") from exc
    except (ValueError, OSError, TypeError) as exc:
        raise StoreError(f"store {url!r} cannot be reached ({type(exc).__name__}: {exc}); check the URL and "
                         "credentials") from exc
    return Location(url.rstrip("/"), fs, path.rstrip("/"))


def _remote(doing: str):
    """Retry a failing object store within the storage budgets (`subzero.store.retry`), then
    report it as a `StoreError` naming the store and its service (a missing file stays
    `FileNotFoundError`: callers act on it); local files are untouched."""
    def wrap(method):
        @functools.wraps(method)
        def call(self: "Location", *args, **kwargs):
            if self.is_local:
                return method(self, *args, **kwargs)
            target = "/".join(a for a in args if isinstance(a, str) and not a.startswith("/"))
            what = f"{doing} {target!r}" if target else doing
            try:
                return self.retrying(what, lambda: method(self, *args, **kwargs))
            except (FileNotFoundError, StoreError):
                raise
            except Exception as exc:
                raise self.service_error(exc, what) from exc
        return call
    return wrap


def _endpoint_from_environment(options: dict[str, Any]) -> None:
    """Make botocore's ``AWS_ENDPOINT_URL(_S3)`` an explicit option when nothing else names the
    endpoint: it then travels with the store to the tasks (whose environment may lack it), and
    fsspec's cache of file systems cannot hand back one made for another endpoint."""
    import fsspec.config

    if options.get("endpoint_url") or (options.get("client_kwargs") or {}).get("endpoint_url"):
        return
    if fsspec.config.conf.get("s3", {}).get("endpoint_url"):
        return
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    if endpoint:
        options["endpoint_url"] = endpoint


class LocalFiles:
    """This machine's file system, standing in for fsspec's ``LocalFileSystem`` without importing
    fsspec (and asyncio with it): the checks a query makes are answered with `os`, any other
    method is fsspec's own, imported on first use.  Picklable and equal to every other one."""

    protocol = ("file", "local")

    def exists(self, path: str) -> bool:
        """True when ``path`` exists."""
        return os.path.exists(path)

    def isdir(self, path: str) -> bool:
        """True when ``path`` is a directory."""
        return os.path.isdir(path)

    def cat_file(self, path: str) -> bytes:
        """The bytes of the file at ``path``."""
        with open(path, "rb") as fh:
            return fh.read()

    def size(self, path: str) -> int:
        """The size of the file at ``path``, in bytes."""
        return os.stat(path).st_size

    @property
    def files(self) -> Any:
        """fsspec's local file system (imported here, on first use)."""
        import fsspec

        return fsspec.filesystem("file")

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):  # pickle's and copy's probes: not fsspec's business
            raise AttributeError(name)
        return getattr(self.files, name)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LocalFiles)

    def __hash__(self) -> int:
        return hash(LocalFiles)

    def __repr__(self) -> str:
        return "LocalFiles()"


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
        """The URL's scheme (``file`` for a directory)."""
        return _scheme(self.url)

    @property
    def service(self) -> str:
        """The service holding the store, for messages: ``S3 at http://127.0.0.1:9000``."""
        if self.scheme in ("s3", "s3a"):
            opts = getattr(self.fs, "client_kwargs", None) or {}
            endpoint = (getattr(self.fs, "endpoint_url", None) or opts.get("endpoint_url")
                        or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL"))
            return f"S3 at {endpoint}" if endpoint else "S3"
        return f"the {self.scheme}:// file system"

    def retrying(self, doing: str, call: "Callable[[], _T]") -> "_T":
        """``call()`` under the storage retry policy (`subzero.store.retry.attempt`): a
        `StorageUnavailable` when the service keeps failing; local stores call it once."""
        if self.is_local:
            return call()
        if getattr(self.fs, "retries", 1) != 1:  # s3fs: one attempt per call, the policy retries
            self.fs.retries = 1
        return retry.attempt(call, self.service, self.url, doing)

    def service_error(self, exc: BaseException, doing: str) -> StoreError:
        """The `StoreError` of a failing service: names the store, the service and what failed."""
        text = " ".join(str(exc).split()) or type(exc).__name__
        return StoreError(f"store {self.url!r}: {self.service} failed while {doing} ({type(exc).__name__}: "
                          f"{text[:300]}), after retrying; check the service and try again (a run this stopped is not "
                          "marked done: continue it with --resume)")

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
    def _fresh(self, path: str) -> None:
        """Forget fsspec's cached listings around ``path``: another process may have written
        the store since (s3fs caches directory listings for the life of the process)."""
        if not self.is_local:
            self.fs.invalidate_cache(path)

    def exists(self, *parts: str) -> bool:
        """True when the store path ``parts`` exists."""
        return self._check("exists", parts)

    def isdir(self, *parts: str) -> bool:
        """True when the store path ``parts`` is a directory."""
        return self._check("isdir", parts)

    def _check(self, test: str, parts: tuple[str, ...]) -> bool:
        """The filesystem's ``test`` (``exists``, ``isdir``) of ``parts``, on fresh listings."""
        def call() -> bool:
            self._fresh(self.path(*parts))
            return bool(getattr(self.fs, test)(self.path(*parts)))

        try:
            return self.retrying(f"checking {'/'.join(parts)!r}", call)
        except StoreError:
            raise
        except Exception as exc:  # botocore's connection errors are not OSErrors
            raise self._unreachable(exc) from exc

    @_remote("listing")
    def listdir(self, *parts: str) -> list[str]:
        """Names in a directory (empty if it does not exist)."""
        path = self.path(*parts)
        try:
            if self.is_local:
                return sorted(os.listdir(path))
            self._fresh(path)
            return sorted(posixpath.basename(p.rstrip("/")) for p in self.fs.ls(path, detail=False))
        except FileNotFoundError:
            return []
        except OSError as exc:  # a file where the directory belongs, no permission...
            if not self.is_local:  # the service failing (SlowDown, resets): retried, then said as such
                raise
            raise store_file_error(exc, "the directory", self.child_url(*parts)) from exc

    def makedirs(self, *parts: str) -> None:
        """Create the directory ``parts`` (and its parents); a `StoreError` when it cannot be made."""
        try:
            self.retrying(f"creating {'/'.join(parts)!r}", lambda: self.fs.makedirs(self.path(*parts), exist_ok=True))
        except StoreError:
            raise
        except OSError as exc:
            if not self.is_local:
                raise self.service_error(exc, f"creating {'/'.join(parts)!r}") from exc
            raise StoreError(f"cannot create {self.child_url(*parts)!r} ({exc}); check that the store "
                             "location is writable") from exc
        except Exception as exc:  # botocore's connection errors are not OSErrors
            if self.is_local:
                raise
            raise self.service_error(exc, f"creating {'/'.join(parts)!r}") from exc

    @_remote("reading")
    def read_bytes(self, *parts: str) -> bytes:
        """The bytes of the store file ``parts``."""
        return self.fs.cat_file(self.path(*parts))

    @_remote("writing")
    def write_bytes(self, data: "bytes | memoryview", *parts: str, durable: bool = True) -> None:
        """Write a file atomically: a reader sees the old file or the new one, never a part.

        ``durable`` also flushes it to the disk before it replaces the old one (catalogs and
        manifests); data files skip it, as a checksum tells a torn one after a power loss.
        """
        path = self.path(*parts)
        if not self.is_local:
            self.fs.pipe_file(path, bytes(data))  # object stores replace objects whole
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

    @_remote("removing")
    def remove(self, *parts: str) -> None:
        """Remove a file or a directory tree (nothing when it does not exist)."""
        try:
            self.fs.rm(self.path(*parts), recursive=True)
        except FileNotFoundError:
            pass

    @_remote("uploading")
    def put_file(self, local_path: str, *parts: str) -> None:
        """Copy a local file into the store (remote file systems)."""
        self.fs.put_file(local_path, self.path(*parts))

    @_remote("downloading")
    def get_file(self, local_path: str, *parts: str) -> None:
        """Copy a store file to this machine (remote file systems)."""
        self.fs.get_file(self.path(*parts), local_path)

    def _unreachable(self, exc: Exception) -> StoreError:
        return StoreError(f"store {self.url!r} cannot be reached: {self.service} answered {type(exc).__name__}: "
                          f"{exc}; check the URL, the network and the credentials")

    def __repr__(self) -> str:
        return f"Location({self.url!r})"
