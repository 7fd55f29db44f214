"""An S3 service on loopback for tests and benchmarks, and a proxy in front of it that fails.

`s3_service` starts moto's ``ThreadedMotoServer`` (a real S3-protocol server, as zarr-python
and s3fs test themselves) on 127.0.0.1 and points this process at it (``AWS_ENDPOINT_URL``
and test credentials), so ``s3://bucket/...`` stores work as on AWS.  `FaultProxy` is a
plain HTTP proxy on loopback that forwards requests to it and fails a fraction of them the
two ways object stores fail transiently: ``503 SlowDown`` (throttling) and a connection
closed without an answer (a reset).  Both are threads of the calling process.
"""

from __future__ import annotations

import http.client
import logging
import os
import random
import socket
import threading
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Iterator

__all__ = ["s3_service", "FaultProxy", "S3Service"]

_SLOW_DOWN = (b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
              b'<Message>Please reduce your request rate.</Message><RequestId>faulty</RequestId></Error>')


class S3Service:
    """A running S3 service: its endpoint and the environment that points clients at it."""

    def __init__(self, endpoint: str):
        self.endpoint = endpoint

    @property
    def env(self) -> dict[str, str]:
        """Environment variables for a process (or Spark worker) using this service."""
        return {"AWS_ENDPOINT_URL": self.endpoint, "AWS_ACCESS_KEY_ID": "testing",
                "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}

    def make_bucket(self, name: str) -> str:
        """Create bucket ``name`` (if missing) and return ``s3://name``."""
        import s3fs

        fs = s3fs.S3FileSystem(endpoint_url=self.endpoint, key="testing", secret="testing",
                               skip_instance_cache=True)
        if not fs.exists(name):
            fs.mkdir(name)
        return f"s3://{name}"


@contextmanager
def s3_service(set_env: bool = True) -> Iterator[S3Service]:
    """Run moto's S3 server on a free loopback port for the ``with`` block.

    With ``set_env``, this process's environment points at it meanwhile (and is restored).
    """
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no access log on stderr
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    service = S3Service(f"http://{host}:{port}")
    saved = {k: os.environ.get(k) for k in service.env}
    if set_env:
        os.environ.update(service.env)
    try:
        yield service
    finally:
        if set_env:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
        server.stop()


class FaultProxy:
    """An HTTP proxy on loopback to ``upstream`` failing a fraction of requests.

    Parameters
    ----------
    upstream : str
        ``http://host:port`` of the real service.
    rate : float
        Fraction of requests that fail (0 to 1); half of the failures answer ``503 SlowDown``,
        half close the connection without an answer.
    seed : int
        For the random choice of the failing requests.
    outage_after : int, optional
        From this many requests on, every request fails (the service goes down mid-run).

    Attributes
    ----------
    endpoint : str
        Where clients connect instead of ``upstream``.
    requests, slowdowns, resets : int
        Counts so far.
    """

    def __init__(self, upstream: str, rate: float = 0.05, seed: int = 0, outage_after: int | None = None):
        self.upstream = upstream.removeprefix("http://").rstrip("/")
        self.rate = float(rate)
        self.outage_after = outage_after
        self.requests = self.slowdowns = self.resets = 0
        self._random = random.Random(seed)
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:  # quiet
                pass

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                fault = proxy._choose()
                if fault == "reset":
                    self.close_connection = True
                    try:  # RST instead of FIN: the client sees "connection reset by peer"
                        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                    except OSError:
                        pass
                    return
                if fault == "slowdown":
                    self.send_response(503, "Slow Down")
                    self.send_header("Content-Type", "application/xml")
                    self.send_header("Content-Length", str(len(_SLOW_DOWN)))
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(_SLOW_DOWN)
                    return
                conn = http.client.HTTPConnection(proxy.upstream, timeout=60)
                try:
                    headers = {k: v for k, v in self.headers.items() if k.lower() not in ("connection",)}
                    conn.request(self.command, self.path, body=body, headers=headers)
                    answer = conn.getresponse()
                    data = answer.read()
                finally:
                    conn.close()
                self.send_response(answer.status, answer.reason)
                for key, value in answer.getheaders():
                    if key.lower() not in ("transfer-encoding", "connection", "content-length", "server", "date"):
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, name="subzero-fault-proxy", daemon=True)

    def _choose(self) -> str | None:
        with self._lock:
            self.requests += 1
            down = self.outage_after is not None and self.requests > self.outage_after
            if not down and self._random.random() >= self.rate:
                return None
            if self._random.random() < 0.5:
                self.slowdowns += 1
                return "slowdown"
            self.resets += 1
            return "reset"

    @property
    def faults(self) -> int:
        """Requests failed so far."""
        return self.slowdowns + self.resets

    def __enter__(self) -> "FaultProxy":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)
