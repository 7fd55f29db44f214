"""``run.view()``: the viewer inside a Jupyter notebook, as an anywidget.

The widget's module is the page's own code (``static/view.js``, read when a widget is made)
followed by ``static/widget.js``, which mounts it in the output cell (``mount(element, api,
{onSelect})``) with an ``api`` (``json``, ``post``, ``bytes``, as the page's own over HTTP) that
sends the page's requests over the widget's message channel. Python answers each with the
viewer's own app (`subzero.tools.view.app.create_app`, through `subzero.tools.view.app.answer_request`):
the same routes, checks and errors as ``subzero view``, binary tile values included, in this
process, without a port.

The brushed cells are the synced trait ``brush`` (``{"node": NAME, "boxes": [[r0, r1, c0, c1],
...]}``, ``{}`` for none): a selection drawn in the cell (box, circle, lasso, regions, a
catalogue row) sets it, and setting it (`ViewerWidget.show`) brushes in the cell.
`ViewerWidget.selection` reads it as cells.

>>> w = run.view()                                          # doctest: +SKIP
>>> w.show([(3, 4), (3, 5)], node="bright")                 # doctest: +SKIP
>>> w.selection.node, w.selection.cells.tolist()            # doctest: +SKIP
('bright', [[3, 4], [3, 5]])
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import anywidget
import numpy as np
import traitlets

from subzero.boxes import cover_coords, ids_in_boxes
from subzero.cells import as_boxes, as_coords, sorted_unique, to_coords, to_ids
from subzero.errors import LineageError
from subzero.tools.view.app import STATIC, Reply, answer_request, create_app

if TYPE_CHECKING:
    from subzero.run import Run

__all__ = ["ViewerWidget", "Selection", "widget_esm", "widget_css", "REQUEST_SECONDS", "HEIGHT"]

#: the longest one request from the cell may take before its answer is an error (a 504)
REQUEST_SECONDS = 120.0
#: the viewer's height in the output cell, in CSS pixels
HEIGHT = 760
#: the headers of an answer the cell's page reads (the others stay in Python)
_HEADERS = ("content-type", "content-disposition", "x-shape", "x-dtype")


def widget_esm(static: Path = STATIC) -> str:
    """The widget's ES module: the page's ``view.js`` followed by ``widget.js`` (which uses its
    ``mount``), read from ``static`` now, so the widget runs the page's code as it is (neither
    file imports another: the two make one module)."""
    return (static / "view.js").read_text(encoding="utf-8") + "\n" + (static / "widget.js").read_text(encoding="utf-8")


def widget_css(static: Path = STATIC) -> str:
    """The page's ``view.css`` (every rule is under the class ``szv``, which the notebook does not
    use, so it styles the viewer and nothing else) and the widget's own size in the cell
    (`HEIGHT`)."""
    css = (static / "view.css").read_text(encoding="utf-8")
    return css + f"\n.szv.szv-widget {{ height: {HEIGHT}px; border: 1px solid #333; }}\n"


class Selection(NamedTuple):
    """The brushed cells of a viewer: the node's name (None when nothing is brushed) and the
    cells as an ``(n, ndim)`` int64 array of sorted unique coordinates."""

    node: str | None
    cells: np.ndarray


class _Loop:
    """One event loop on a daemon thread, where the widgets' requests are answered (the
    kernel's own thread runs a loop already, so the app cannot run there)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None

    def loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                threading.Thread(target=loop.run_forever, name="subzero-view-widget", daemon=True).start()
                self._loop = loop
            return self._loop

    def answer(self, app: Any, method: str, path: str, body: bytes | None, seconds: float) -> Reply:
        future = asyncio.run_coroutine_threadsafe(answer_request(app, method, path, body), self.loop())
        return future.result(seconds)


_LOOP = _Loop()


class ViewerWidget(anywidget.AnyWidget):
    """The viewer of a run in a notebook cell (what `subzero.run.Run.view` returns).

    Parameters
    ----------
    run : Run
        The run to show (`subzero.open_run`, or what `Workflow.run` returned).
    warm : bool
        Make every 2-D node's overview tile at once, on a background thread, as ``subzero view``
        does.
    cache_dir : pathlib.Path, optional
        Where tiles are cached (default `subzero.tools.view.tiles.run_cache_dir`).

    Attributes
    ----------
    brush : dict
        The synced brush, ``{"node": NAME, "boxes": [[r0, r1, c0, c1], ...]}`` (disjoint
        half-open boxes of a 2-D node, as the viewer's API takes them) or ``{}``.
    """

    _esm = traitlets.Unicode("").tag(sync=True)
    _css = traitlets.Unicode("").tag(sync=True)
    brush = traitlets.Dict().tag(sync=True)

    def __init__(self, run: "Run", warm: bool = True, cache_dir: Path | None = None):
        super().__init__(_esm=widget_esm(), _css=widget_css())
        self.run = run
        self.app = create_app(run, cache_dir, warm=warm)
        self.on_msg(self._on_message)

    # -- the selection, from Python -------------------------------------------------------
    @property
    def selection(self) -> Selection:
        """The brushed node and its cells (`Selection`): what was brushed in the cell, or given
        to `show` last."""
        node = self.brush.get("node")
        if not node:
            return Selection(None, np.empty((0, 0), np.int64))
        shape = self.run.shape(node)
        flat = np.asarray(self.brush.get("boxes") or [], np.int64).reshape(-1, 2 * len(shape))
        ids = ids_in_boxes(flat[:, 0::2], flat[:, 1::2], shape)
        return Selection(node, to_coords(ids, shape))

    def show(self, cells: Any = None, node: Any = None, box: Any = None) -> None:
        """Brush ``cells`` (or ``box``) of the 2-D ``node`` in the viewer, as if drawn there: the
        cell shows the node in its main frame with their lineage, and `selection` gives them back.

        Parameters
        ----------
        cells
            Coordinates of ``node``'s cells, in any form `subzero.run.Run.backward` takes
            (``[(r, c), ...]``, an ``(n, ndim)`` array, a boolean mask).
        node : str or Node, optional
            The node brushed; default: the node brushed now.
        box
            Instead of ``cells``: ``[(lo, hi), ...]``, one half-open pair per axis, or a list of boxes.

        Raises
        ------
        LineageError
            No node (none given and none brushed), an unknown node, a node that is not 2-D, or
            cells outside it.
        """
        if node is None:
            node = self.brush.get("node")
            if not node:
                raise LineageError("show(cells) needs the node the cells belong to: nothing is brushed yet; "
                                   "give node=NAME")
        name = self.run.node(node).name
        shape = self.run.shape(name)
        if len(shape) != 2:
            raise LineageError(f"the viewer brushes cells of 2-D nodes; node {name!r} has shape {shape}: brush a "
                               f"2-D node, or ask the run itself (run.backward / run.forward)")
        if (cells is None) == (box is None):
            raise LineageError(f"show needs cells or box (one of them) of node {name!r} (shape {shape})")
        if box is not None:
            lo, hi = as_boxes(box, shape, f"node {name!r}")
            coords = to_coords(ids_in_boxes(lo, hi, shape), shape)
        else:
            coords = as_coords(cells, shape, f"node {name!r}")
            coords = to_coords(sorted_unique(to_ids(coords, shape)), shape)
        if len(coords) == 0:
            self.brush = {}
            return
        lo, hi = cover_coords(coords)
        flat = np.empty((len(lo), 2 * len(shape)), np.int64)
        flat[:, 0::2], flat[:, 1::2] = lo, hi
        self.brush = {"node": name, "boxes": flat.tolist()}

    def clear(self) -> None:
        """Clear the brush (in the cell too)."""
        self.brush = {}

    # -- the page's requests --------------------------------------------------------------
    def request(self, path: str, body: Any = None) -> Reply:
        """Answer one of the page's requests as the cell's code sends it: ``GET path`` without
        ``body``, else ``POST path`` with ``body`` as JSON (``bytes`` are sent as they are)."""
        data = body if isinstance(body, bytes) or body is None else _json_bytes(body)
        return _LOOP.answer(self.app, "GET" if body is None else "POST", path, data, REQUEST_SECONDS)

    def _on_message(self, widget: Any, content: Any, buffers: list[Any]) -> None:
        if not isinstance(content, dict) or content.get("kind") != "request":
            return
        self.send(*_reply_message(self, content))


def _json_bytes(body: Any) -> bytes:
    import json

    return json.dumps(body).encode()


def _reply_message(widget: ViewerWidget, content: dict[str, Any]) -> tuple[dict[str, Any], list[bytes]]:
    """The reply to one request message of the cell: ``({kind: "reply", id, status, headers},
    [body])``; a malformed message or a request that fails is answered too (a JSON error)."""
    path, method, body = content.get("path"), content.get("method", "GET"), content.get("body")
    try:
        if not isinstance(path, str) or not path.startswith("/") or method not in ("GET", "POST") \
                or not (body is None or isinstance(body, str)):
            raise LineageError(f"a widget request is {{kind, id, method: GET|POST, path: /..., body: a JSON string "
                               f"or null}}; got method {method!r:.40}, path {path!r:.80}")
        data = body.encode() if isinstance(body, str) else None
        reply = _LOOP.answer(widget.app, method, path, data, REQUEST_SECONDS)
    except LineageError as exc:
        reply = Reply(400, {"content-type": "application/json"}, _json_bytes({"error": str(exc)}))
    except TimeoutError:
        reply = Reply(504, {"content-type": "application/json"},
                      _json_bytes({"error": f"the request took over {REQUEST_SECONDS:.0f} s"}))
    headers = {k: v for k, v in reply.headers.items() if k in _HEADERS}
    return {"kind": "reply", "id": content.get("id"), "status": reply.status, "headers": headers}, [reply.body]
