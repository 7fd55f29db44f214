"""subzero's one configuration object: every setting, its type, default and meaning, in one record.

A value is resolved at use, never at import, from (lowest first):

1. the default in `SETTINGS`;
2. the config file: ``$SUBZERO_CONFIG`` if set, else ``~/.config/subzero/config.toml``
   (a TOML table of ``name = value``, e.g. ``s3_retries = 3``; a ``[subzero]`` table works too);
3. the environment: ``SUBZERO_<NAME>`` (``SUBZERO_FUSE=0``, ``SUBZERO_S3_RETRIES=3``);
4. per-call overrides: ``with sz.config.set(fuse=False): ...`` (a `contextvars` context: one
   thread's or task's overrides never leak into another's; the local executor's threads run in
   the caller's context).

A run resolves each setting once, when it first reads it (`once`: the per-node and per-tile
reads then cost a lookup); a `set` inside the run is still seen at once.

Spark workers are other processes: they see the defaults, the file and their own environment,
not a driver's `set`.  What a task must agree on with the driver (the chunk compressor) travels
in the task itself.

Examples
--------
>>> from subzero import config
>>> config.get("fuse")
True
>>> with config.set(fuse=False):
...     config.get("fuse")
False
"""

from __future__ import annotations

import contextvars
import os
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping

from subzero.errors import ConfigError

__all__ = ["Setting", "SETTINGS", "get", "set", "once", "source", "rows", "markdown_table", "cache_root", "config_path",
           "ConfigError"]


@dataclass(frozen=True)
class Setting:
    """One setting: its name (``s3_retries``), type, default (None: decided at use, as `doc` says)
    and a one-line meaning.  Its environment variable is ``SUBZERO_`` + the name in capitals."""

    name: str
    type: type
    default: Any
    doc: str
    minimum: float | None = None
    choices: tuple[str, ...] = ()

    @property
    def env(self) -> str:
        """The environment variable that sets it (``SUBZERO_S3_RETRIES``)."""
        return "SUBZERO_" + self.name.upper()

    def parse(self, value: Any, where: str) -> Any:
        """``value`` (a string from the environment, or a TOML / Python value) as this setting's
        type; a `ConfigError` naming ``where`` it came from, the expected type and the value."""
        if value is None and self.default is None:
            return None
        kind = self.type.__name__
        try:
            if self.type is bool:
                out: Any = _parse_bool(value)
            elif self.type is int:
                if isinstance(value, bool):
                    raise ValueError(value)
                out = int(value) if isinstance(value, int) else int(float(str(value).strip()))
                if isinstance(value, str) and float(value) != out:
                    raise ValueError(value)
            elif self.type is float:
                if isinstance(value, bool):
                    raise ValueError(value)
                out = float(value)
            else:
                if not isinstance(value, str):
                    raise ValueError(value)
                out = value
        except (TypeError, ValueError):
            raise ConfigError(f"{where}={value!r} is not a valid {kind} ({self.doc}); "
                              f"give {_example(self)}") from None
        if self.minimum is not None and out < self.minimum:
            raise ConfigError(f"{where}={value!r} is below {self.minimum:g} ({self.doc}); give {_example(self)}")
        if self.choices and out not in self.choices:
            raise ConfigError(f"{where}={value!r} is not one of {', '.join(self.choices)} ({self.doc})")
        return out


def _parse_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ValueError(value)


def _example(s: Setting) -> str:
    if s.type is bool:
        return "a bool (1/0, true/false, yes/no, on/off)"
    if s.choices:
        return "one of " + ", ".join(s.choices)
    low = "" if s.minimum is None else f" >= {s.minimum:g}"
    return f"an {s.type.__name__}{low}" if s.type is int else f"a {s.type.__name__}{low}"


#: every setting subzero reads, in the order of the documented table (docs/guide/configuration.md)
SETTINGS: tuple[Setting, ...] = (
    # -- running ---------------------------------------------------------------------------------
    Setting("fuse", bool, True, "run consecutive per-tile nodes that store no lineage as one stage"),
    Setting("in_process_bytes", int, 2**20,
            "inputs up to this many bytes run on the local executor instead of starting Spark (0: never)",
            minimum=0),
    Setting("hold_mb", float, 2048.0,
            "megabytes of unstored intermediate arrays the local executor keeps in memory for later nodes (beyond: "
            "stored)", minimum=0),
    Setting("trace_values_mb", float, 1024.0,
            "megabytes of values a traced function's local run (f.run(..., executor='local')) computes as it traces, "
            "each step once with numpy, and stores without computing again (beyond: the run computes the rest)",
            minimum=0),
    Setting("recompute_cache_mb", float, 256.0,
            "megabytes of recomputed tiles of unstored arrays a process keeps, of all arrays together", minimum=0),
    Setting("library_threads", int, 1,
            "threads a library's own parallel code (OpenMP: astroscrappy's L.A.Cosmic) uses in one operator call; "
            "subzero runs tiles in parallel itself, and more threads than cores slow every tile down; 0: the "
            "library's default", minimum=0),
    Setting("query_memo_mb", float, 64.0,
            "megabytes a run's queries keep of whole-array steps' answers, as many of re-run tiles' lineage, "
            "and as many of stored payload tiles read whole, so a later step or query reaching them does not "
            "compute or read them again", minimum=0),
    Setting("recompute_seconds", float, 0.05,
            "a run without budgets stores an intermediate a query's re-run step would recompute for longer than "
            "this many seconds", minimum=0),
    Setting("commit_seconds", float, 1.0,
            "the longest a run goes without writing its catalog, and the longest a write behind it waits while it "
            "computes (committed nodes become visible to a resume; 0: after every node)", minimum=0),
    Setting("write_behind", bool, True,
            "a local run into a local store returns once computed; a background thread writes the store "
            "(Run.wait() until it is durable); a traced run whose trace computed every value returns then, its "
            "lineage recorded behind it too"),
    Setting("write_behind_mb", float, 1024.0,
            "megabytes of arrays a run written behind keeps queued for writing (beyond: the run waits; larger "
            "arrays are written by the tiles)", minimum=0),
    Setting("reuse_calibration", bool, True,
            "a run planned by the optimizer reuses the calibration an earlier run in the same process made of a "
            "node with the same operators and inputs upstream, tiles and candidates, instead of measuring again"),
    Setting("keep_calibration", bool, True,
            "with reuse_calibration, a node's calibration is also kept on disk (under the cache directory's "
            "calibration/), so the first run of a new process over the same reuses it; subzero's code changing "
            "makes it stale"),
    Setting("local_threads", int, None, "threads of the local executor (unset: the cores, at most 4)", minimum=1),
    Setting("compressor", str, "auto", "how array chunks are compressed",
            choices=("auto", "none", "lz4", "zstd")),
    Setting("chunk_cache_mb", float, 256.0, "megabytes of decoded chunks a process keeps (0: none)", minimum=0),
    # -- caches ----------------------------------------------------------------------------------
    Setting("cache", str, None, "the user's cache directory (unset: ~/.cache/subzero)"),
    Setting("cache_max_bytes", int, 2 * 10**9, "the most bytes the local cache of remote shards keeps", minimum=0),
    # -- Spark -----------------------------------------------------------------------------------
    Setting("spark_master", str, None, "the Spark master a new session uses (unset: embedded local[*, 4])"),
    Setting("driver_memory", str, "1g", "spark.driver.memory of a session subzero starts"),
    Setting("tasks_per_core", int, 4, "Spark tasks per core a node's tiles are split into", minimum=1),
    Setting("spark_connect_timeout", float, 10.0, "seconds to reach a spark:// master before giving up", minimum=0),
    Setting("spark_probe_timeout", float, 5.0, "seconds a master's port may take to answer a protocol probe",
            minimum=0),
    Setting("spark_start_timeout", float, 180.0, "seconds a Spark session may take to start", minimum=0),
    Setting("spark_executor_timeout", float, 120.0, "seconds a master may take to give the application an executor",
            minimum=0),
    Setting("spark_cds", bool, True, "start the driver JVM from a class-data-sharing archive (faster start)"),
    # -- object storage: the retry policy (subzero.store.retry) ----------------------------------
    Setting("storage_timeout", float, 60.0,
            "seconds one store operation may keep failing (503 SlowDown, resets, timeouts) before the run gives up",
            minimum=0),
    Setting("storage_run_timeout", float, 300.0,
            "seconds the store's service may be failing in all during one run (or query process) before giving up",
            minimum=0),
    Setting("s3_retries", int, 100, "the most attempts at one store operation (storage_timeout usually ends them first)",
            minimum=1),
    Setting("storage_backoff_max", float, 5.0, "the longest wait in seconds between two attempts", minimum=0),
    Setting("storage_connect_timeout", float, 5.0, "seconds one request may take to connect to the service",
            minimum=0),
    Setting("storage_read_timeout", float, 20.0, "seconds one request may wait for the service's answer",
            minimum=0),
    Setting("lock_release_timeout", float, 10.0,
            "seconds a failed run's cleanup (marking it failed, releasing the writer lock) may take in all",
            minimum=0),
    Setting("open_wait_seconds", float, 60.0,
            "seconds open_run waits for a store another live process is still writing (its run, or the "
            "writes behind it) before refusing it", minimum=0),
    Setting("lock_lease", float, 60.0,
            "seconds a writer lock on object storage lasts unless renewed (a heartbeat renews it every third)",
            minimum=1),
    # -- the viewer (subzero view) ---------------------------------------------------------------
    Setting("view_max_body_bytes", int, 2**20, "the largest request body the viewer accepts, in bytes (HTTP 413 beyond)",
            minimum=1),
    Setting("view_max_boxes", int, 10_000, "the most boxes one viewer lineage or export request may brush", minimum=1),
    Setting("view_workers", int, None, "processes serving the viewer (subzero view --workers; unset: the cores this "
            "process may use, at most 4)", minimum=1),
)

_BY_NAME = {s.name: s for s in SETTINGS}
_overrides: contextvars.ContextVar[Mapping[str, Any]] = contextvars.ContextVar("subzero_config", default={})
_file_cache: dict[str, tuple[int, dict[str, Any]]] = {}


class _Held:
    """What `once` keeps: the overrides its values were resolved under, name -> value as first
    resolved, and the config file's values as first read (one look at the file per run)."""

    def __init__(self, overrides: Mapping[str, Any]):
        self.overrides = overrides
        self.values: dict[str, Any] = {}
        self.file: tuple[str, dict[str, Any]] | None = None


_once: contextvars.ContextVar[_Held | None] = contextvars.ContextVar("subzero_config_once", default=None)


def config_path() -> Path:
    """The config file read: ``$SUBZERO_CONFIG``, else ``~/.config/subzero/config.toml``."""
    given = os.environ.get("SUBZERO_CONFIG")
    return Path(given).expanduser() if given else Path.home() / ".config" / "subzero" / "config.toml"


_paths: dict[tuple[str | None, str | None], str] = {}  # (SUBZERO_CONFIG, HOME) -> config_path(), as text


def _config_file() -> str:
    """`config_path` as text, worked out once per value of the variables it depends on (a
    setting is read per node and per array handle: this keeps a read to a stat)."""
    key = (os.environ.get("SUBZERO_CONFIG"), os.environ.get("HOME"))
    got = _paths.get(key)
    if got is None:
        got = _paths[key] = str(config_path())
    return got


def _file_values() -> tuple[str, dict[str, Any]]:
    """The config file's settings (re-read when the file changes; empty when there is none)."""
    path = _config_file()
    try:
        stamp = os.stat(path).st_mtime_ns
    except OSError:
        if os.environ.get("SUBZERO_CONFIG"):
            raise ConfigError(f"SUBZERO_CONFIG={path!r}: no such config file; create it or unset "
                              "SUBZERO_CONFIG") from None
        return path, {}
    cached = _file_cache.get(path)
    if cached is not None and cached[0] == stamp:
        return path, cached[1]
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"config file {path!r} cannot be read ({exc}); fix its TOML or move it away") from None
    if isinstance(data.get("subzero"), dict):
        data = {**{k: v for k, v in data.items() if k != "subzero"}, **data["subzero"]}
    unknown = sorted(data.keys() - _BY_NAME.keys())
    if unknown:
        raise ConfigError(f"config file {path!r} names unknown settings {', '.join(unknown)}; "
                          f"known: {', '.join(_BY_NAME)}")
    values = {name: _BY_NAME[name].parse(value, f"{path}: {name}") for name, value in data.items()}
    _file_cache[path] = (stamp, values)
    return path, values


def _setting(name: str) -> Setting:
    try:
        return _BY_NAME[name]
    except KeyError:
        raise ConfigError(f"unknown setting {name!r}; known: {', '.join(_BY_NAME)}") from None


def _resolve(name: str, held: _Held | None = None) -> tuple[Any, str]:
    setting = _setting(name)
    overrides = _overrides.get()
    if name in overrides:
        return overrides[name], "set()"
    text = os.environ.get(setting.env)
    if text is not None and text != "":
        return setting.parse(text, setting.env), "environment"
    if held is None:
        path, values = _file_values()
    else:  # inside `once`: the file is looked at once
        if held.file is None:
            held.file = _file_values()
        path, values = held.file
    if name in values:
        return values[name], path
    return setting.default, "default"


def get(name: str) -> Any:
    """The current value of the setting ``name`` (see the module docstring for the order).

    Examples
    --------
    >>> get("s3_retries") >= 1
    True
    """
    held = _once.get()
    if held is not None and held.overrides is _overrides.get():  # inside `once`, under the overrides it began with
        values = held.values
        if name in values:
            return values[name]
        got = values[name] = _resolve(name, held)[0]
        return got
    return _resolve(name)[0]


def source(name: str) -> str:
    """Where the current value of ``name`` comes from: ``default``, the config file's path,
    ``environment`` or ``set()``."""
    return _resolve(name)[1]


class set:  # noqa: N801 (dask.config.set's name and shape)
    """Override settings for the code inside ``with``; values are checked as the environment's are.

    Examples
    --------
    >>> with set(s3_retries=3):
    ...     get("s3_retries")
    3
    """

    def __init__(self, **values: Any):
        self._values = {name: _setting(name).parse(value, f"config.set({name})") for name, value in values.items()}
        self._token: contextvars.Token[Mapping[str, Any]] | None = None

    def __enter__(self) -> "set":
        self._token = _overrides.set({**_overrides.get(), **self._values})
        return self

    def __exit__(self, *exc: object) -> None:
        if self._token is not None:
            _overrides.reset(self._token)
            self._token = None


class once:  # noqa: N801 (a context manager, as `set`)
    """Inside ``with``, `get` resolves each setting once, at its first read, and then answers
    from memory, and the config file is looked at once (a run reads some settings per node and
    per tile: each read would otherwise look at the environment and the config file).  Overrides made by `set` inside are seen at
    once (their reads are not remembered); nested uses share the outermost one's values.

    Examples
    --------
    >>> with once():
    ...     get("fuse") == get("fuse")
    True
    """

    def __init__(self) -> None:
        self._token: contextvars.Token[_Held | None] | None = None

    def __enter__(self) -> "once":
        if _once.get() is None:
            self._token = _once.set(_Held(_overrides.get()))
        return self

    def __exit__(self, *exc: object) -> None:
        if self._token is not None:
            _once.reset(self._token)
            self._token = None


def cache_root() -> str:
    """The user's cache directory: the ``cache`` setting, else ``~/.cache/subzero``."""
    root = get("cache")
    return str(Path(root).expanduser()) if root else os.path.join(Path.home(), ".cache", "subzero")


def rows() -> Iterator[tuple[str, str, str, str, str]]:
    """(name, value, source, type, meaning) of every setting, now."""
    for s in SETTINGS:
        value, where = _resolve(s.name)
        yield s.name, "" if value is None else str(value), where, s.type.__name__, s.doc


def _default_text(s: Setting) -> str:
    return "unset" if s.default is None else repr(s.default) if s.type is str else str(s.default)


def markdown_table() -> str:
    """The documented table of every setting (docs/guide/configuration.md holds it verbatim)."""
    lines = ["| name | environment variable | type | default | meaning |", "|---|---|---|---|---|"]
    for s in SETTINGS:
        kind = s.type.__name__ + (f" >= {s.minimum:g}" if s.minimum is not None else "")
        kind = " \\| ".join(f"`{c}`" for c in s.choices) if s.choices else kind
        lines.append(f"| `{s.name}` | `{s.env}` | {kind} | `{_default_text(s)}` | {s.doc} |")
    return "\n".join(lines)
