"""The viewer's web app (Starlette): the page, its tiles and the JSON API over one stored run.

Routes
------
``GET /``                                  the page (``static/index.html``)
``GET /static/...``                        its script and style
``GET /api/run``                           the store, workflow, status, tile size, ``warm`` (stored overview tiles made)
                                           and ``idle`` (no background work left: the same, as the viewer makes
                                           the tiles of the arrays the run did not store only when asked for)
``GET /api/nodes``                         the nodes: ``[{name, operator, shape, dtype, strategies, inputs, ...}]``
``POST /api/lineage``                      ``{"node", "direction", "boxes", "to"}`` -> ``{"answers": {...}, "ms": M}``
``POST /api/export``                       the same body plus ``"target"`` and ``"format"``
                                           (``npy``, ``fits``, ``reg``, ``reg-fk5``): the answer in ``target`` as a file
``GET /api/pixel/{node}?row=R&col=C``      the cell's value, and its RA/Dec where the node has a WCS
``GET /api/style``                         the colours of the brush and of each direction's lineage
                                           (`subzero.tools.export.LINEAGE_COLORS`, as the CLI's pictures use them)
``GET /tiles/{node}/{z}/{ty}/{tx}.png``    a tile of a 2-D node (`subzero.tools.view.tiles`)
``GET /api/values/{node}/{z}/{ty}/{tx}``   the same tile's values, little-endian (headers ``X-Shape: H,W``, ``X-Dtype``)
``GET /api/limits/{node}?mode=M``          display limits ``{"lo", "hi", "mode"}`` (zscale, minmax, 99.5, ...)
``GET /api/line/{node}``                   a 1-D node's line plot, or a one-value node's value (`subzero.tools.view.readouts`)
``GET /api/compass/{node}``                north and east as ``[dcol, drow]`` where the node has a WCS
``GET /api/object/{node}?label=L&bbox=r0,r1,c0,c1``  one catalogue object's cells as row-run boxes
``POST /api/stats``                        a lineage body -> statistics and histograms of the brushed and lineage cells;
                                           ``{"node", "boxes"}`` alone -> those cells' (no lineage walk)

`answer_request` answers one request with these same routes and handlers in this process,
without a socket (the notebook widget, `subzero.tools.view.widget`, sends its page's requests so).

Every error is JSON ``{"error": "..."}``: 400 for a bad request (not JSON, nested too
deeply, unknown node or field, box outside the array, bad direction, too many boxes...), 403
without the token when the app has one, 404 for what does not exist, 413 for a body over the
``view_max_body_bytes`` setting, 415 for a POST body that is not ``application/json``, 409
(with ``"cancelled": true``) for a lineage request a newer one superseded. The app only
reads the store.

Lineage requests are answered by a bounded pool of `LINEAGE_WORKERS` threads (walks run
concurrently; more threads than cores would only queue on the interpreter). A request that
names its client in the header ``X-Subzero-Client: ID`` (the page sends one per tab) is
superseded by the next lineage request of that client in the same direction: the older
one's walk stops at its next step (or never starts, if still queued) and answers 409, so a
dragged brush never leaves a queue of stale walks behind it. A client that disconnects (a
page that aborts its request) cancels its walk the same way.

With a ``token`` (`subzero.tools.view.server` gives one whenever it listens on an address other
than loopback), every request must carry it: ``?token=T`` in the URL (the page's URL as the
server prints it; the answer then sets a cookie, so the page's own requests carry it), the
cookie, or the header ``Authorization: token T``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import http.cookies
import importlib
import json
import logging
import math
import os
import secrets
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, MutableMapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, unquote

import numpy as np
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from subzero import config
from subzero.errors import LineageError, QueryCancelled, StoreError
from subzero.modes import DIRECTIONS, Direction
from subzero.tools.view import readouts
from subzero.tools.view.lineage import (answer_frontiers, display_kind, lineage_answers, node_list,
                                  parse_lineage_request, reachable, shown)
from subzero.tools.view.sky import node_wcs, pixel_to_sky
from subzero.tools.export import atomic_path
from subzero.tools.view.tiles import TILE, TilePyramid, run_cache_dir

if TYPE_CHECKING:
    from subzero.run import Run

__all__ = ["create_app", "answer_request", "Reply", "STATIC", "EXPORT_FORMATS", "TOKEN_COOKIE", "MAX_DEPTH",
           "VALUE_DIGITS", "SKY_DECIMALS", "readout", "LINEAGE_WORKERS", "RECOMPUTE_WORKERS", "PRIMED_MODULES", "CLIENT_HEADER", "DISCONNECT_POLL",
           "Brushes", "Viewer", "display_kinds"]

STATIC = Path(__file__).parent / "static"
EXPORT_FORMATS = {"npy": ".npy", "fits": ".fits", "reg": ".reg", "reg-fk5": ".reg"}
log = logging.getLogger("subzero.view")
TOKEN_COOKIE = "subzero_view_token"
#: the deepest nesting of arrays and objects a request body may have (a lineage body has 3)
MAX_DEPTH = 16
#: significant digits of a cell's value in ``/api/pixel`` (float32 holds about 7)
VALUE_DIGITS = 7
#: decimals of RA/Dec in degrees in ``/api/pixel`` (1e-7 degree: 0.36 milliarcseconds)
SKY_DECIMALS = 7
#: threads answering lineage requests (the cores, at least 2, at most 8)
LINEAGE_WORKERS = max(2, min(8, os.cpu_count() or 2))
#: threads making the tiles of arrays the run did not store (each re-runs the node), at a lower priority
RECOMPUTE_WORKERS = 2
#: modules lineage steps import on first use (`subzero.lazy`), imported as the server starts (`Viewer.prime`)
PRIMED_MODULES = ("scipy.ndimage", "numpy.ma")
#: the request header naming a page's client, whose newer brush supersedes its older one
CLIENT_HEADER = "x-subzero-client"
#: seconds between checks that the client of a running lineage request is still connected
DISCONNECT_POLL = 0.1


class _NotFound(Exception):
    """A tile or node that does not exist: HTTP 404."""


class _BadRequest(LineageError):
    """A request the app refuses with an HTTP status other than 400 (413, 415)."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


_EXAMPLE = '{"node": "stars", "direction": "backward", "boxes": [[10, 26, 30, 46]], "to": null}'


def _too_deep(value: Any, limit: int) -> bool:
    """Whether ``value`` (parsed JSON) nests arrays and objects more than ``limit`` deep (no recursion)."""
    level = [value]
    for _ in range(limit + 1):
        level = [v for x in level if isinstance(x, (list, dict))
                 for v in (x.values() if isinstance(x, dict) else x)]
        if not level:
            return False
    return True


async def _json_body(request: Request) -> Any:
    """The request's body as JSON: 415 unless it is ``application/json``, 413 over the
    ``view_max_body_bytes`` setting (read no further), 400 when it does not parse or nests
    deeper than `MAX_DEPTH`."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/json":
        raise _BadRequest(415, f"the body must be JSON with the header Content-Type: application/json, got "
                               f"{kind or 'no Content-Type'}; send an object such as {_EXAMPLE}")
    limit = config.get("view_max_body_bytes")
    too_big = (f"the body is over {limit} bytes, the limit of the view_max_body_bytes setting "
               f"(SUBZERO_VIEW_MAX_BODY_BYTES); brush fewer, larger boxes, or raise the setting")
    length = request.headers.get("content-length", "")
    if length.isdigit() and int(length) > limit:
        raise _BadRequest(413, too_big)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise _BadRequest(413, too_big)
        chunks.append(chunk)
    raw = b"".join(chunks)
    if not raw.strip():
        raise LineageError(f"the body is empty; send a JSON object such as {_EXAMPLE}")
    try:
        value = json.loads(raw)
    except RecursionError:
        raise LineageError(f"the body nests arrays or objects too deeply to parse; send an object such as "
                           f"{_EXAMPLE}") from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, an integer of too many digits
        raise LineageError(f"the body is not JSON ({getattr(exc, 'msg', None) or exc}); send an object such as "
                           f"{_EXAMPLE}") from None
    if _too_deep(value, MAX_DEPTH):
        raise LineageError(f"the body nests arrays or objects more than {MAX_DEPTH} deep; a request nests 3 deep: "
                           f"{_EXAMPLE}")
    return value


def readout(value: Any, digits: int = VALUE_DIGITS) -> Any:
    """A cell's value as the API shows it: floats to ``digits`` significant digits (None for
    NaN and infinities), anything else as it is.

    >>> readout(481.68158495195786)
    481.6816
    """
    if isinstance(value, float):
        return float(f"{value:.{digits}g}") if math.isfinite(value) else None
    return value


class _TokenGate:
    """ASGI middleware: every request must carry ``token`` (query ``?token=``, the cookie, or
    ``Authorization: token T``), else HTTP 403 with a JSON error. A request that brought it in
    its URL gets the cookie back, so the page's own requests (scripts, tiles) carry it. The
    cookie is named for the token (`TOKEN_COOKIE` + a digest), so two viewers on one host
    (cookies ignore ports) keep theirs apart."""

    def __init__(self, app: Any, token: str):
        self.app, self.token = app, token
        self.cookie = f"{TOKEN_COOKIE}-{hashlib.sha256(token.encode()).hexdigest()[:12]}"

    def _given(self, scope: dict[str, Any]) -> tuple[str | None, bool]:
        query = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("token")
        if query:
            return query[0], True
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        auth = headers.get("authorization", "").split(None, 1)
        if len(auth) == 2 and auth[0].lower() in ("token", "bearer"):
            return auth[1].strip(), False
        cookie = http.cookies.SimpleCookie()
        try:
            cookie.load(headers.get("cookie", ""))
        except http.cookies.CookieError:
            return None, False
        return (cookie[self.cookie].value if self.cookie in cookie else None), False

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given, in_url = self._given(scope)
        if given is None or not secrets.compare_digest(given.encode(), self.token.encode()):
            what = "a wrong token" if given is not None else "no token"
            response = _error(403, f"this viewer needs its token and the request had {what}: open the URL "
                                   "`subzero view` printed (it ends in ?token=...), or send the header "
                                   "'Authorization: token TOKEN'")
            await response(scope, receive, send)
            return
        if not in_url:
            await self.app(scope, receive, send)
            return
        cookie = f"{self.cookie}={self.token}; Path=/; HttpOnly; SameSite=Strict".encode()

        async def send_with_cookie(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), (b"set-cookie", cookie)]}
            await send(message)

        await self.app(scope, receive, send_with_cookie)


class Brushes:
    """The lineage requests in flight: a bounded pool of worker threads answers them, and a
    client's newer request in one direction cancels its older one (see the module docstring).

    Parameters
    ----------
    workers
        Threads of the pool (default `LINEAGE_WORKERS`).
    """

    def __init__(self, workers: int = LINEAGE_WORKERS):
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="subzero-view-lineage")
        self._lock = threading.Lock()
        self._latest: dict[tuple[str, str], threading.Event] = {}
        #: requests a newer one cancelled, since the app started
        self.cancelled = 0

    def begin(self, client: str | None, direction: str) -> threading.Event:
        """A cancel event for a new request; the same client's older one in ``direction`` is cancelled."""
        event = threading.Event()
        if client is not None:
            with self._lock:
                older = self._latest.get((client, direction))
                if older is not None:
                    older.set()
                self._latest[(client, direction)] = event
        return event

    def end(self, client: str | None, direction: str, event: threading.Event) -> None:
        """Forget a finished request (unless a newer one of its client replaced it)."""
        if client is None:
            return
        with self._lock:
            if self._latest.get((client, direction)) is event:
                del self._latest[(client, direction)]
            if event.is_set():
                self.cancelled += 1

    async def answer(self, run: "Run", request: Any, client: str | None,
                     disconnected: Callable[[], Awaitable[bool]] | None = None) -> dict[str, Any]:
        """`lineage_answers` of ``request`` on the pool; `QueryCancelled` when superseded, or
        when ``disconnected`` (asked every `DISCONNECT_POLL` seconds while the walk runs)
        says the client has gone: nobody is left to answer."""
        event = self.begin(client, request.direction.value)
        try:
            future = asyncio.get_running_loop().run_in_executor(self.pool, lineage_answers, run, request, event)
            while disconnected is not None and not future.done():
                await asyncio.wait({future}, timeout=DISCONNECT_POLL)
                if not future.done() and await disconnected():
                    event.set()  # the walk stops at its next step
                    break
            return await future
        finally:
            self.end(client, request.direction.value, event)


def _client(request: Request) -> str | None:
    """The ``X-Subzero-Client`` header: a short printable id, or None."""
    value = request.headers.get(CLIENT_HEADER)
    if value is None:
        return None
    if not value or len(value) > 128 or not value.isprintable():
        raise LineageError(f"the {CLIENT_HEADER} header must be a printable id of 1 to 128 characters, got "
                           f"{shown(value)}; send one id per page (tab), or no header")
    return value


class Viewer:
    """The state of the app: the run, its nodes' WCS, display kinds and tile pyramids (made on
    first use), and the pool that makes the tiles of the arrays the run did not store.

    Parameters
    ----------
    run
        The stored run.
    cache_dir
        Its tile cache (default `subzero.tools.view.tiles.run_cache_dir`).
    warmed
        The event `warm` sets (default a new one); several processes serving one store share
        one (`multiprocessing`), so every one reports ``warm`` when one of them has warmed.
    """

    def __init__(self, run: "Run", cache_dir: Path | None = None, warmed: Any | None = None):
        self.run = run
        run.log_queries = False  # brushes stay out of the store's query log (`subzero explain`)
        self.cache_dir = cache_dir or run_cache_dir(run)
        self.wcs = node_wcs(run)
        self.kinds = display_kinds(run, self.cache_dir)
        self.nodes = node_list(run, {name: True for name in self.wcs}, self.kinds)
        self._pyramids: dict[str, TilePyramid] = {}
        #: set when the stored nodes' overviews are made (by this process, or the one sharing it that warms)
        self.warmed = warmed if warmed is not None else threading.Event()
        self.warm_seconds: float | None = None
        #: makes what re-runs nodes the run did not store (their tiles, their limits), at a lower
        #: priority than the rest of the app, so brushes come first
        self.recompute = ThreadPoolExecutor(max_workers=RECOMPUTE_WORKERS, thread_name_prefix="subzero-view-recompute",
                                            initializer=_lower_priority)
        for entry in self.nodes:
            if len(entry["shape"]) == 2:
                entry["tile"] = TILE
                entry["levels"] = self.pyramid(entry["name"]).top + 1

    def warm(self) -> None:
        """Make the stretch limits and overview tile (the page's first view) of every 2-D node
        the run stored (one read of each array), so those slow tiles are made once, before
        they are asked for; then set `warmed`.

        The nodes the run did not store are left alone: an overview of one re-runs the whole
        node from its stored ancestors (minutes at 1e7 cells), so their tiles are made when a
        page first asks for them, each once (`TilePyramid.values`), on the `recompute` pool."""
        t0 = time.perf_counter()
        for entry in self.nodes:
            if len(entry["shape"]) == 2 and self.pyramid(entry["name"]).stored:
                self._overview(entry["name"])
        self.warm_seconds = time.perf_counter() - t0
        self.warmed.set()

    def prime(self) -> None:
        """Make this process ready to answer brushes at full speed: a one-cell backward and
        forward walk from the middle of every node that stores lineage, to every node it
        reaches, so the modules the walks import (scipy's, a few hundred milliseconds), the
        nodes' grids and manifests and the answers of whole-array steps are loaded before the
        first page brushes rather than during its first brushes. Answers are not kept; the
        modules of `PRIMED_MODULES` are imported first (a walk imports them only where a stored
        payload needs them)."""
        for module in PRIMED_MODULES:
            importlib.import_module(module)
        for entry in self.nodes:
            name = entry["name"]
            if entry["kind"] == "input" or all(s in ("Map", "BlackBox") for s in entry["strategies"]) \
                    or not all(entry["shape"]):
                continue
            cell = [[n // 2, n // 2 + 1] for n in entry["shape"]]
            for direction in DIRECTIONS:
                try:
                    req = parse_lineage_request(self.run, {"node": name, "direction": direction,
                                                           "boxes": [[v for pair in cell for v in pair]], "to": None})
                    if req.to:
                        answer_frontiers(self.run, req)
                except Exception as exc:  # a damaged shard: the brushes that need it will report it  # noqa: BLE001
                    log.warning("view: could not prepare the %s walks from %s: %s", direction, name, exc)

    def _overview(self, name: str) -> None:
        try:
            pyramid = self.pyramid(name)
            pyramid.limits()
            pyramid.png(pyramid.top, 0, 0)
        except Exception as exc:  # a damaged chunk: its tile requests will report it  # noqa: BLE001
            log.warning("view: could not prepare the overview of %s: %s", name, exc)

    def pyramid(self, name: str) -> TilePyramid:
        """The tile pyramid of node ``name``, built on first use (a 404 for an unknown node)."""
        if name not in self._pyramids:
            if name not in self.run.catalog.nodes:
                raise _NotFound(f"unknown node {name!r}")
            if len(self.run.shape(name)) != 2:
                raise _NotFound(f"node {name!r} has shape {self.run.shape(name)}: only 2-D nodes have tiles")
            self._pyramids[name] = TilePyramid(self.run, name, self.cache_dir, self.kinds[name])
        return self._pyramids[name]

    async def make(self, quick: bool, work: Callable[..., Any], *args: Any) -> Any:
        """``work(*args)`` off the event loop: on Starlette's thread pool when ``quick`` (a read
        of stored or cached values), else on the `recompute` pool."""
        if quick:
            from starlette.concurrency import run_in_threadpool

            return await run_in_threadpool(work, *args)
        return await asyncio.get_running_loop().run_in_executor(self.recompute, work, *args)


def display_kinds(run: "Run", cache_dir: Path) -> dict[str, str]:
    """Every committed node's `display_kind`, remembered in ``cache_dir`` (``display.json``,
    keyed by each array's metadata checksum): deciding it samples an integer array, and the
    sample of one the run did not store re-runs the node."""
    path = cache_dir / "display.json"
    try:
        known = json.loads(path.read_text())
        known = known if isinstance(known, dict) else {}
    except (OSError, ValueError):
        known = {}
    kinds: dict[str, str] = {}
    for name in run.committed:
        key = f"{name}|{run.catalog.node(name).array.meta_xxh3 or 'nometa'}"
        kind = known.get(key)
        kinds[name] = kind if kind in ("image", "labels", "mask") else display_kind(run, name)
        known[key] = kinds[name]
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(path) as tmp:
            tmp.write_text(json.dumps(known, sort_keys=True))
    except OSError as exc:  # a read-only cache: decided again next time
        log.warning("view: could not remember the nodes' display kinds in %s: %s", path, exc)
    return kinds


def _lower_priority() -> None:
    """Lower this thread's CPU priority (Linux niceness is per thread), so the page's other
    requests, brushes first, come before the work it does."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), min(os.getpriority(os.PRIO_PROCESS, 0) + 10, 19))
    except (AttributeError, OSError):  # not Linux, or not allowed: the same work at the same priority
        pass


def _in_background(work: Callable[[], None]) -> None:
    """Run ``work`` in this thread at a lower CPU priority, so the page's requests come first
    while the overviews are made."""
    _lower_priority()
    work()


def create_app(run: "Run", cache_dir: Path | None = None, warm: bool = True, token: str | None = None,
               shared: Any | None = None) -> Starlette:
    """The viewer app over ``run`` (`subzero.open_run`); tiles cached under ``cache_dir``
    (default `subzero.tools.view.tiles.run_cache_dir`). With ``warm``, a background thread makes
    the stored nodes' overview tiles at once (`Viewer.warm`). With ``token``, every request must
    carry it (see the module docstring), else HTTP 403. Before that thread makes the overviews it
    primes the process's lineage walks (`Viewer.prime`), as every process of ``shared`` does.

    ``shared``: the ``warmed`` event of several processes serving one store (a
    `multiprocessing` event made before they fork, `subzero.tools.view.server`): the one made
    with ``warm`` sets it, and every one reports ``warm`` and ``idle`` from it."""
    viewer = Viewer(run, cache_dir, shared)
    brushes = Brushes()
    if warm or shared is not None:  # every process serving primes its walks; one makes the overviews
        def start() -> None:
            viewer.prime()
            if warm:
                viewer.warm()

        threading.Thread(target=_in_background, args=(start,), name="subzero-view-warm", daemon=True).start()

    async def index(request: Request) -> Response:
        return FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-cache"})

    async def nodes(request: Request) -> Response:
        return JSONResponse(viewer.nodes)

    async def info(request: Request) -> Response:
        idle = not (warm or shared is not None) or viewer.warmed.is_set()  # no background work left
        return JSONResponse({"store": run.path, "workflow": run.workflow.name, "status": run.catalog.status,
                             "tile": TILE, "warm": viewer.warmed.is_set(), "idle": idle})

    async def lineage(request: Request) -> Response:
        client = _client(request)
        body = await _json_body(request)
        req = parse_lineage_request(run, body)
        return JSONResponse(await brushes.answer(run, req, client, request.is_disconnected))

    async def style(request: Request) -> Response:
        from subzero.tools.export import LINEAGE_COLORS, MASK_RGB, NAN_RGB

        return JSONResponse({"lineage": LINEAGE_COLORS, "mask": [list(c) for c in MASK_RGB], "nan": list(NAN_RGB)})

    async def export(request: Request) -> Response:
        body = await _json_body(request)
        if not isinstance(body, dict):
            raise LineageError('the body must be a JSON object: {"node", "direction", "boxes"} plus "target" and '
                               '"format"')
        body = dict(body)
        if "to" in body:
            raise LineageError(f'an export has no "to" (got {shown(body["to"])}): it writes the answer in one node, '
                               'named by "target"; drop "to"')
        target, fmt = body.pop("target", None), body.pop("format", None)
        if not isinstance(fmt, str) or fmt not in EXPORT_FORMATS:
            raise LineageError(f'"format" must be one of {", ".join(EXPORT_FORMATS)}, got {shown(fmt)}')
        if not isinstance(target, str):
            raise LineageError(f'"target" must be the name of the node whose cells to export (a string), got '
                               f'{shown(target)}')
        if target not in run.catalog.nodes:
            raise LineageError(f'"target" names an unknown node {shown(target)}; the nodes are '
                               f'{", ".join(run.committed)}')
        brushed = body.get("node")
        if target != brushed and isinstance(brushed, str) and brushed in run.catalog.nodes \
                and body.get("direction") in DIRECTIONS:
            direction = Direction(body["direction"])
            reach = reachable(run, brushed, direction)
            if target not in reach:
                where = "upstream" if direction is Direction.BACKWARD else "downstream"
                raise LineageError(f'"target" {target!r} is not {where} of {brushed!r}, so it has no '
                                   f'{body["direction"]} lineage from it; give the brushed node itself or one of '
                                   f'the {where} nodes: {", ".join(reach) or "none"}')
        body["to"] = None if target == brushed else [target]
        req = parse_lineage_request(run, body)
        from starlette.concurrency import run_in_threadpool

        data, filename = await run_in_threadpool(_export_file, viewer, req, target, fmt)
        media = {"npy": "application/octet-stream", "fits": "application/fits"}.get(fmt, "text/plain")
        return Response(data, media_type=media, headers={"Content-Disposition": f'attachment; filename="{filename}"'})

    async def pixel(request: Request) -> Response:
        name = request.path_params["node"]
        if name not in run.catalog.nodes:
            raise _NotFound(f"unknown node {name!r}")
        shape = run.shape(name)
        try:
            row, col = int(request.query_params["row"]), int(request.query_params["col"])
        except (KeyError, ValueError):
            raise LineageError("give ?row=R&col=C (integers)") from None
        if len(shape) != 2 or not (0 <= row < shape[0] and 0 <= col < shape[1]):
            raise LineageError(f"cell ({row}, {col}) is outside node {name!r} of shape {tuple(shape)}")
        from starlette.concurrency import run_in_threadpool

        value = (await run_in_threadpool(run.output(name).__getitem__, (row, col))).item()
        out: dict[str, Any] = {"node": name, "row": row, "col": col, "value": readout(value)}
        if name in viewer.wcs:
            ra, dec = pixel_to_sky(viewer.wcs[name], row, col)
            out["ra"], out["dec"] = round(float(ra), SKY_DECIMALS), round(float(dec), SKY_DECIMALS)
        return JSONResponse(out)

    def checked_tile(request: Request) -> tuple[Any, int, int, int]:
        """The pyramid and tile index a tile request names (an unknown tile: 404)."""
        p = request.path_params
        pyramid = viewer.pyramid(p["node"])
        z, ty, tx = (_tile_index(p[k]) for k in ("z", "ty", "tx"))
        try:
            pyramid.check(z, ty, tx)
        except LineageError as exc:
            raise _NotFound(str(exc)) from None
        return pyramid, z, ty, tx

    async def tile(request: Request) -> Response:
        pyramid, z, ty, tx = checked_tile(request)
        quick = pyramid.png_path(z, ty, tx).exists() or (pyramid.cached(z, ty, tx) and pyramid.limits_cached())
        data = await viewer.make(quick, pyramid.png, z, ty, tx)
        return Response(data, media_type="image/png", headers={"Cache-Control": "max-age=3600"})

    async def values(request: Request) -> Response:
        pyramid, z, ty, tx = checked_tile(request)
        data, (h, w), dtype = await viewer.make(pyramid.cached(z, ty, tx), readouts.tile_values, pyramid, z, ty, tx)
        return Response(data, media_type="application/octet-stream",
                        headers={"X-Shape": f"{h},{w}", "X-Dtype": dtype, "Cache-Control": "max-age=3600"})

    async def limits(request: Request) -> Response:
        pyramid = viewer.pyramid(request.path_params["node"])
        mode = request.query_params.get("mode", "zscale")
        quick = pyramid.stored or (mode == "zscale" and pyramid.limits_cached())
        return JSONResponse(await viewer.make(quick, readouts.limits, pyramid, mode))

    async def line(request: Request) -> Response:
        name = request.path_params["node"]
        if name not in run.catalog.nodes:
            raise _NotFound(f"unknown node {name!r}")
        from starlette.concurrency import run_in_threadpool

        return JSONResponse(await run_in_threadpool(readouts.line, run, name))

    async def compass(request: Request) -> Response:
        name = request.path_params["node"]
        if name not in run.catalog.nodes:
            raise _NotFound(f"unknown node {name!r}")
        if name not in viewer.wcs:
            raise LineageError(f"node {name!r} has no WCS, so no compass; nodes with one: "
                               f"{', '.join(viewer.wcs) or 'none'}")
        return JSONResponse(readouts.compass(viewer.wcs[name], run.shape(name)))

    async def catalog_object(request: Request) -> Response:
        name = request.path_params["node"]
        if name not in run.catalog.nodes:
            raise _NotFound(f"unknown node {name!r}")
        q = request.query_params
        try:
            label = int(q["label"])
            bbox = tuple(int(v) for v in q["bbox"].split(",")) if "bbox" in q else None
        except (KeyError, ValueError):
            raise LineageError("give ?label=L (an integer) and optionally &bbox=r0,r1,c0,c1 (integers)") from None
        if bbox is not None and len(bbox) != 4:
            raise LineageError(f"bbox has {len(bbox)} numbers; give r0,r1,c0,c1")
        from starlette.concurrency import run_in_threadpool

        box = None if bbox is None else (bbox[0], bbox[1], bbox[2], bbox[3])
        return JSONResponse(await run_in_threadpool(readouts.object_boxes, run, name, label, box))

    async def stats(request: Request) -> Response:
        body = await _json_body(request)
        from starlette.concurrency import run_in_threadpool

        if isinstance(body, dict) and "direction" not in body and "to" not in body:  # these cells, no walk
            req = parse_lineage_request(run, {**body, "direction": "backward", "to": None})
            req = dataclasses.replace(req, to=())
        else:
            req = parse_lineage_request(run, body)
        return JSONResponse(await run_in_threadpool(readouts.request_stats, run, req))

    async def cancelled(request: Request, exc: Exception) -> Response:
        return JSONResponse({"error": str(exc), "cancelled": True}, status_code=409)

    async def bad_request(request: Request, exc: Exception) -> Response:
        return _error(getattr(exc, "status", 400), str(exc))

    async def not_found(request: Request, exc: Exception) -> Response:
        return _error(404, str(exc))

    async def http_error(request: Request, exc: Exception) -> Response:
        detail = getattr(exc, "detail", str(exc))
        return _error(getattr(exc, "status_code", 500), detail if isinstance(detail, str) else str(detail))

    async def server_error(request: Request, exc: Exception) -> Response:  # a bug: still a JSON answer
        log.error("view: %s %s failed", request.method, request.url.path, exc_info=exc)
        return _error(500, f"the viewer failed on this request ({type(exc).__name__}: {exc}); please report it")

    routes = [
        Route("/", index),
        Route("/api/run", info),
        Route("/api/nodes", nodes),
        Route("/api/lineage", lineage, methods=["POST"]),
        Route("/api/export", export, methods=["POST"]),
        Route("/api/pixel/{node}", pixel),
        Route("/api/style", style),
        Route("/tiles/{node}/{z}/{ty}/{tx}.png", tile),
        Route("/api/values/{node}/{z}/{ty}/{tx}", values),
        Route("/api/limits/{node}", limits),
        Route("/api/line/{node}", line),
        Route("/api/compass/{node}", compass),
        Route("/api/stats", stats, methods=["POST"]),
        Route("/api/object/{node}", catalog_object),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]
    app = Starlette(routes=routes, exception_handlers={LineageError: bad_request, StoreError: bad_request, QueryCancelled: cancelled,
                                                       _NotFound: not_found, HTTPException: http_error,
                                                       Exception: server_error})
    app.state.viewer = viewer
    app.state.brushes = brushes
    if token is not None:
        if not token:
            raise LineageError("the viewer's token is empty; give a non-empty token, or none on a loopback address")
        app.add_middleware(_TokenGate, token=token)
    return app


@dataclass(frozen=True)
class Reply:
    """An answer of the app (`answer_request`): the HTTP status, the headers (lower-case
    names) and the body's bytes."""

    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        """The body parsed as JSON (every API answer and every error is JSON)."""
        return json.loads(self.body)


async def answer_request(app: Starlette, method: str, path: str, body: bytes | None = None) -> Reply:
    """Answer one request with ``app`` (`create_app`) in this process, as its HTTP server
    would: the same routes, handlers, checks and errors, without a socket.

    Parameters
    ----------
    app : starlette.applications.Starlette
        The viewer's app.
    method : str
        ``"GET"`` or ``"POST"``.
    path : str
        The URL's path and query, URL-encoded as a browser sends it (``/api/pixel/x?row=1&col=2``).
    body : bytes, optional
        A POST's JSON body (sent as ``application/json``).

    Returns
    -------
    Reply
        The status, headers and body the server would have sent.

    Examples
    --------
    >>> reply = asyncio.run(answer_request(create_app(run), "GET", "/api/nodes"))  # doctest: +SKIP
    >>> reply.status, reply.json()[0]["name"]                                        # doctest: +SKIP
    (200, 'x')
    """
    target, _, query = path.partition("?")
    headers = [(b"host", b"subzero-view")]
    if body is not None:
        headers += [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    scope = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "http_version": "1.1",
             "method": method.upper(), "scheme": "http", "path": unquote(target),
             "raw_path": target.encode("latin-1", "replace"), "query_string": query.encode("latin-1", "replace"),
             "root_path": "", "headers": headers, "client": ("127.0.0.1", 0), "server": ("subzero-view", 80)}
    done = asyncio.Event()
    pending = [{"type": "http.request", "body": body or b"", "more_body": False}]
    status, out_headers, chunks = 500, dict[str, str](), list[bytes]()

    async def receive() -> dict[str, Any]:
        if pending:
            return pending.pop()
        await done.wait()  # the client stays until the answer is sent, as a browser does
        return {"type": "http.disconnect"}

    async def send(message: MutableMapping[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = int(message["status"])
            out_headers.update((k.decode("latin-1").lower(), v.decode("latin-1"))
                               for k, v in message.get("headers", []))
        elif message["type"] == "http.response.body":
            chunks.append(bytes(message.get("body", b"")))
            if not message.get("more_body", False):
                done.set()

    try:
        await app(scope, receive, send)
    finally:
        done.set()
    return Reply(status, out_headers, b"".join(chunks))


def _tile_index(text: str) -> int:
    """A tile path's level or index: a small non-negative integer, else a 404."""
    if not (text.isascii() and text.isdigit()) or len(text) > 9:
        raise _NotFound(f"no tile {shown(text)}: a tile is /tiles/NODE/Z/TY/TX.png with small non-negative integers")
    return int(text)


def _export_file(viewer: Viewer, req, target: str, fmt: str) -> tuple[bytes, str]:
    """The answer of ``req`` in ``target`` (or the brush itself when ``target`` is the brushed
    node) written as ``fmt`` by `subzero.tools.export`; returns the file's bytes and its name."""
    from subzero.tools.export import write_mask, write_regions

    run = viewer.run
    if target == req.node:
        mask = np.zeros(run.shape(target), bool)
        for lo, hi in zip(req.lo, req.hi):
            mask[tuple(slice(a, b) for a, b in zip(lo, hi))] = True
        what = f"cells brushed in {target}"
    else:
        frontiers, _ = answer_frontiers(run, req)
        mask = frontiers[target].mask()
        what = f"{req.direction} lineage in {target} of {int(np.prod(req.hi - req.lo, axis=1).sum())} cell(s) of {req.node}"
    if fmt.startswith("reg") and mask.ndim != 2:
        raise LineageError(f"DS9 regions are for 2-D images; node {target!r} has shape {mask.shape}; export a mask")
    wcs = None
    if fmt == "reg-fk5":
        wcs = viewer.wcs.get(target)
        if wcs is None:
            raise LineageError(f"node {target!r} has no WCS (it is not a FITS input with one, nor on its pixel grid); "
                               "export image regions (reg) instead")
    name = f"{target}-{req.direction if target != req.node else 'brush'}{EXPORT_FORMATS[fmt]}"
    with tempfile.TemporaryDirectory(prefix="subzero-view-") as tmp:
        path = os.path.join(tmp, name)
        if fmt in ("npy", "fits"):
            header = None
            if fmt == "fits":
                from subzero.input_files import header_from_text

                text = run.catalog.node(target).metadata.get("fits_header")
                header = header_from_text(text) if text else None
                if header is None and target in viewer.wcs:  # a node on a FITS input's pixel grid
                    header = viewer.wcs[target].to_header()
            write_mask(path, mask, header, history=f"subzero view: {what}")
        else:
            write_regions(path, mask, text=what, wcs=wcs)
        return Path(path).read_bytes(), name
