"""Running real servers on loopback for tests and benchmarks: in a thread, or as a process."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Literal

import httpx
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


def wait_healthy(url: str, timeout_s: float = 120.0, process: subprocess.Popen[bytes] | None = None) -> None:
    """Block until ``url``/healthz answers 200."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"semcache exited with code {process.returncode} before it was healthy")
        try:
            health = httpx.get(f"{url}/healthz", timeout=2)
        except httpx.HTTPError:
            health = None
        if health is not None and health.status_code == 200:
            return
        if health is not None and health.json().get("status") == "failed":
            raise RuntimeError(f"semcache failed to load: {health.json().get('error')}")
        time.sleep(0.1)
    raise TimeoutError(f"{url} did not become healthy in {timeout_s} s")


def kill_process(process: subprocess.Popen[bytes] | None) -> None:
    """``kill -9`` a child process, if it still runs."""
    if process is not None and process.poll() is None:
        process.send_signal(signal.SIGKILL)
        process.wait(10)


def stop_process(process: subprocess.Popen[bytes] | None, timeout_s: float) -> None:
    """SIGTERM, then ``kill -9`` if it has not exited after ``timeout_s``."""
    if process is not None and process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            kill_process(process)


class SemcacheProcess:
    """``semcache serve`` as a child process, for restarts and ``kill -9``."""

    def __init__(
        self,
        *args: str,
        data_dir: Path,
        upstream_url: str,
        env: dict[str, str] | None = None,
        log_path: Path | None = None,
    ) -> None:
        self.port = free_port()
        self.args = ["--port", str(self.port), "--data-dir", str(data_dir), "--upstream", upstream_url, *args]
        self.env = {**os.environ, **(env or {})}
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 120.0) -> SemcacheProcess:
        if self.log_path is None:
            output: Any = subprocess.DEVNULL
        else:
            output = open(self.log_path, "ab")  # noqa: SIM115 - the child inherits it; closed below
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "semcache", "serve", *self.args],
                env=self.env,
                stdout=output,
                stderr=subprocess.STDOUT,
            )
        finally:
            if output is not subprocess.DEVNULL:
                output.close()
        wait_healthy(self.url, timeout_s, self.process)
        return self

    def kill(self) -> None:
        """``kill -9``: no shutdown handlers run."""
        kill_process(self.process)

    def stop(self) -> None:
        stop_process(self.process, timeout_s=30)

    def __enter__(self) -> SemcacheProcess:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
