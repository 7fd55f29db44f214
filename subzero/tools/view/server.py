"""``subzero view STORE``: serve the viewer on a local address with uvicorn until Ctrl-C.

On a loopback address (127.0.0.1, ::1, localhost) the viewer answers anyone on this machine;
on any other address it requires a token, as Jupyter does: the one given, else a random one,
printed in the URL (``http://HOST:PORT/?token=...``).
"""

from __future__ import annotations

import ipaddress
import logging
import secrets
import socket
import threading
import webbrowser
from pathlib import Path
from typing import Any

from subzero.errors import LineageError

__all__ = ["serve", "make_server", "is_loopback", "DEFAULT_HOST", "DEFAULT_PORT"]

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


def is_loopback(host: str) -> bool:
    """Whether ``host`` is an address of this machine only (``localhost``, 127.0.0.0/8, ``::1``)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to any address


def make_server(store: str, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, cache_dir: Path | None = None,
                token: str | None = None) -> tuple[Any, str]:
    """An unstarted ``uvicorn.Server`` for the viewer of ``store`` (opened read-only), and its URL.

    ``server.run()`` serves until ``server.should_exit`` is set (or, in the main thread,
    until Ctrl-C/SIGTERM, which it handles by finishing open requests and returning).
    Requests must carry ``token`` when given; on an address other than loopback
    (`is_loopback`) a random one is made when none is given. The URL carries the token
    (``?token=...``).
    """
    import uvicorn

    from subzero.run import open_run
    from subzero.tools.view.app import create_app

    if not 1 <= port <= 65535:
        raise LineageError(f"--port {port}: give a port number 1..65535")
    if token is not None and not token.strip():
        raise LineageError("--token is empty: give a non-empty token, or leave it out to have one made")
    if token is None and not is_loopback(host):
        token = secrets.token_urlsafe(24)
    run = open_run(store)
    app = create_app(run, cache_dir, token=token)
    _check_port(host, port)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False, lifespan="off")
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{port}/" + (f"?token={token}" if token is not None else "")
    return uvicorn.Server(config), url


def serve(store: str, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, open_browser: bool = False,
          cache_dir: Path | None = None, token: str | None = None) -> None:
    """Serve the viewer of ``store`` until Ctrl-C; print its URL (with the token, if any)
    first, open a browser if asked."""
    server, url = make_server(store, host, port, cache_dir, token)
    print(f"subzero view: {store} at {url} (Ctrl-C stops)", flush=True)
    if not is_loopback(host):
        log.warning("listening on %s: anyone who can reach this address and has the token can read the store's "
                    "arrays", host)
    if open_browser:
        threading.Timer(0.5, webbrowser.open, args=(url,)).start()
    try:
        server.run()  # on Ctrl-C uvicorn finishes open requests, then re-raises the signal
    except KeyboardInterrupt:
        pass
    print("subzero view: stopped", flush=True)
