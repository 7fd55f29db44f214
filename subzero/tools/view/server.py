"""``subzero view STORE``: serve the viewer on a local address with uvicorn until Ctrl-C.

On a loopback address (127.0.0.1, ::1, localhost) the viewer answers anyone on this machine;
on any other address it requires a token, as Jupyter does: the one given, else a random one,
printed in the URL (``http://HOST:PORT/?token=...``).

With ``workers`` > 1 (`default_workers`: the ``view_workers`` setting, else the cores this
process may use, at most 4) the server pre-forks: this process binds the one listening socket,
then forks that many worker processes, each opening the store and serving the same app on that
socket (the kernel hands each connection to one of them), so brushes from many clients use
every core instead of queueing on one interpreter. One worker makes the stored nodes' overview
tiles in the background; all report ``warm`` and ``idle`` from an event they share. Ctrl-C or SIGTERM stops
them all; if one dies, the others are stopped.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import secrets
import signal
import socket
import sys
import threading
import traceback
import webbrowser
from pathlib import Path
from typing import Any

from subzero.errors import LineageError

__all__ = ["serve", "make_server", "default_workers", "is_loopback", "DEFAULT_HOST", "DEFAULT_PORT"]

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765
log = logging.getLogger("subzero.view")


def _bind(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port``; a `LineageError` naming the fix when it cannot be bound
    (in use, or no such address)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(family, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind((host, port))
    except OSError as exc:
        s.close()
        raise LineageError(f"cannot listen on {host}:{port} ({exc.strerror or exc}); choose another --port "
                           "(or --host)") from None
    return s


def _check_port(host: str, port: int) -> None:
    """A `LineageError` naming the fix when ``host:port`` cannot be bound (in use, or no such address)."""
    _bind(host, port).close()


def default_workers() -> int:
    """How many processes `serve` starts: the ``view_workers`` setting, else the cores this
    process may use, at most 4."""
    from subzero import config

    chosen = config.get("view_workers")
    if chosen is not None:
        return int(chosen)
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover  (not Linux)
        cores = os.cpu_count() or 1
    return max(1, min(cores, 4))


def is_loopback(host: str) -> bool:
    """Whether ``host`` is an address of this machine only (``localhost``, 127.0.0.0/8, ``::1``)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to any address


def make_server(store: str, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, cache_dir: Path | None = None,
                token: str | None = None, warm: bool = True, shared: Any | None = None,
                bound: bool = False) -> tuple[Any, str]:
    """An unstarted ``uvicorn.Server`` for the viewer of ``store`` (opened read-only), and its URL.

    ``server.run()`` serves until ``server.should_exit`` is set (or, in the main thread,
    until Ctrl-C/SIGTERM, which it handles by finishing open requests and returning).
    Requests must carry ``token`` when given; on an address other than loopback
    (`is_loopback`) a random one is made when none is given. The URL carries the token
    (``?token=...``). ``warm`` and ``shared``: as `subzero.tools.view.app.create_app` takes them;
    ``bound``: the caller has bound the port already (a pre-forked worker; serve it with
    ``server.run(sockets=[sock])``).
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
    app = create_app(run, cache_dir, warm=warm, token=token, shared=shared)
    if not bound:
        _check_port(host, port)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False, lifespan="off")
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{port}/" + (f"?token={token}" if token is not None else "")
    return uvicorn.Server(config), url


def serve(store: str, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, open_browser: bool = False,
          cache_dir: Path | None = None, token: str | None = None, workers: int | None = None) -> None:
    """Serve the viewer of ``store`` until Ctrl-C; print its URL (with the token, if any)
    first, open a browser if asked. ``workers``: processes serving it (default
    `default_workers`; more than one: pre-forked on one socket, see the module docstring)."""
    workers = default_workers() if workers is None else int(workers)
    if workers < 1:
        raise LineageError(f"--workers {workers}: give 1 or more processes")
    if workers > 1 and hasattr(os, "fork"):
        _serve_forked(store, host, port, open_browser, cache_dir, token, workers)
        return
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


def _serve_forked(store: str, host: str, port: int, open_browser: bool, cache_dir: Path | None, token: str | None,
                  workers: int) -> None:
    """`serve` with ``workers`` pre-forked processes on one listening socket; returns when
    they have all stopped (Ctrl-C or SIGTERM here, or one of them died)."""
    import multiprocessing

    from subzero.run import open_run

    if not 1 <= port <= 65535:
        raise LineageError(f"--port {port}: give a port number 1..65535")
    if token is not None and not token.strip():
        raise LineageError("--token is empty: give a non-empty token, or leave it out to have one made")
    if token is None and not is_loopback(host):
        token = secrets.token_urlsafe(24)  # one token for every worker
    run = open_run(store)  # a bad store is reported here, once, before any worker starts
    from subzero.store.shards import close_all
    from subzero.tools.view.app import Viewer
    from subzero.tools.view.tiles import run_cache_dir

    viewer = Viewer(run, cache_dir or run_cache_dir(run))  # display kinds decided once (they may re-run nodes)
    viewer.prime()  # the modules brushes import, imported once, before the workers fork
    viewer.recompute.shutdown()
    del viewer, run
    close_all()  # an LMDB environment must not be used across a fork: each worker opens its own
    sock = _bind(host, port)
    sock.listen(2048)
    context = multiprocessing.get_context("fork")
    shared = context.Event()  # set by the worker that warms; every worker reports from it
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{port}/" + (f"?token={token}" if token is not None else "")
    print(f"subzero view: {store} at {url} ({workers} worker processes; Ctrl-C stops)", flush=True)
    if not is_loopback(host):
        log.warning("listening on %s: anyone who can reach this address and has the token can read the store's "
                    "arrays", host)
    pids: list[int] = []
    for k in range(workers):
        pid = os.fork()
        if pid == 0:  # a worker: its own run (its own LMDB handles), the shared socket
            code = 0
            try:
                signal.signal(signal.SIGINT, signal.default_int_handler)
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                server, _ = make_server(store, host, port, cache_dir, token, warm=k == 0, shared=shared, bound=True)
                server.run(sockets=[sock])
            except KeyboardInterrupt:
                pass
            except BaseException:  # noqa: BLE001  (reported, then this worker ends; the others are stopped)
                traceback.print_exc()
                code = 1
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        pids.append(pid)
    sock.close()
    if open_browser:
        threading.Timer(0.5, webbrowser.open, args=(url,)).start()

    left = set(pids)

    def stop(signum: int, frame: Any) -> None:
        for pid in list(left):
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        while left:
            try:
                pid, _ = os.wait()
            except KeyboardInterrupt:  # the workers got the same Ctrl-C: wait for them to finish
                stop(signal.SIGINT, None)
                continue
            except ChildProcessError:
                break
            if pid in left:
                left.discard(pid)
                stop(signal.SIGTERM, None)  # one stopped (Ctrl-C, SIGTERM, or died): stop the others
    finally:
        signal.signal(signal.SIGTERM, previous)
    print("subzero view: stopped", flush=True)
