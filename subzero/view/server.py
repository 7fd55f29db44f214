"""``subzero view STORE``: serve the viewer on a local address with uvicorn until Ctrl-C."""

from __future__ import annotations

import logging
import socket
import threading
import webbrowser
from pathlib import Path

from subzero.errors import LineageError

__all__ = ["serve", "make_server", "DEFAULT_HOST", "DEFAULT_PORT"]

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765
log = logging.getLogger("subzero.view")


def _check_port(host: str, port: int) -> None:
    """A `LineageError` naming the fix when ``host:port`` cannot be bound (in use, or no such address)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as exc:
            raise LineageError(f"cannot listen on {host}:{port} ({exc.strerror or exc}); choose another --port "
                               "(or --host)") from None


def make_server(store: str, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, cache_dir: Path | None = None):
    """An unstarted ``uvicorn.Server`` for the viewer of ``store`` (opened read-only), and its URL.

    ``server.run()`` serves until ``server.should_exit`` is set (or, in the main thread,
    until Ctrl-C/SIGTERM, which it handles by finishing open requests and returning).
    """
    import uvicorn

    from subzero.run import open_run
    from subzero.view.app import create_app

    if not 1 <= port <= 65535:
        raise LineageError(f"--port {port}: give a port number 1..65535")
    run = open_run(store)
    app = create_app(run, cache_dir)
    _check_port(host, port)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False, lifespan="off")
    shown = f"[{host}]" if ":" in host else host
    return uvicorn.Server(config), f"http://{shown}:{port}/"


def serve(store: str, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, open_browser: bool = False,
          cache_dir: Path | None = None) -> None:
    """Serve the viewer of ``store`` until Ctrl-C; print its URL first, open a browser if asked."""
    server, url = make_server(store, host, port, cache_dir)
    print(f"subzero view: {store} at {url} (Ctrl-C stops)", flush=True)
    if host not in ("127.0.0.1", "localhost", "::1"):
        log.warning("listening on %s: anyone who can reach this address can read the store's arrays", host)
    if open_browser:
        threading.Timer(0.5, webbrowser.open, args=(url,)).start()
    try:
        server.run()  # on Ctrl-C uvicorn finishes open requests, then re-raises the signal
    except KeyboardInterrupt:
        pass
    print("subzero view: stopped", flush=True)
