"""An ASGI app served by uvicorn in a background thread, on a free port of its own: how the
stand-in upstream runs inside a test or a benchmark."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any, Literal

import uvicorn


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


class ThreadedUvicorn:
    """An ASGI app served by uvicorn in a background thread, on a port of its own."""

    def __init__(
        self,
        app: Any,
        *,
        host: str = "127.0.0.1",
        lifespan: Literal["auto", "on", "off"] = "on",
        log_level: str = "warning",
        startup_timeout_s: float = 60.0,
    ) -> None:
        self.host = host
        self.startup_timeout_s = startup_timeout_s
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind((host, 0))
        self.port = int(self._socket.getsockname()[1])
        config = uvicorn.Config(
            app, log_level=log_level, lifespan=lifespan, access_log=False, timeout_graceful_shutdown=2
        )
        self.server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self._socket]}, name=f"uvicorn-{self.port}", daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> ThreadedUvicorn:
        self._thread.start()
        deadline = time.monotonic() + self.startup_timeout_s
        while not self.server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("server failed to start")
            time.sleep(0.01)
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        self.server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(timeout_s)
        if self._thread.is_alive():
            self.server.force_exit = True
            self._thread.join(timeout_s)
        self._socket.close()

    def __enter__(self) -> ThreadedUvicorn:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
