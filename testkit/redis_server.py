"""A real ``redis-server`` process on a free port, for tests and benchmarks that stop, kill and
restart it. Never the machine's shared 6379."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import redis

from semcache.testing.uvicorn_thread import free_port

from .servers import kill_process, stop_process


class RedisServer:
    """``redis-server`` in ``folder``. With ``appendonly``, every write is fsynced before Redis
    replies (``appendfsync always``): the setting for losing no acknowledged entry. ``start`` after
    ``stop`` or ``kill`` restarts it on the same port and folder, with what its AOF kept."""

    def __init__(self, folder: Path, *, appendonly: bool = True, port: int | None = None) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed (Debian/Ubuntu: apt install redis-server)")
        self.binary = binary
        self.folder = folder
        self.appendonly = appendonly
        self.port = port or free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout_s: float = 10.0) -> RedisServer:
        self.folder.mkdir(parents=True, exist_ok=True)
        args = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.folder)]
        args += ["--save", "", "--daemonize", "no", "--logfile", str(self.folder / "redis.log")]
        if self.appendonly:
            args += ["--appendonly", "yes", "--appendfsync", "always"]
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        client = redis.Redis(port=self.port, socket_connect_timeout=0.2)
        deadline = time.monotonic() + timeout_s
        try:
            while True:
                try:
                    if client.ping():
                        return self
                except (redis.ConnectionError, redis.BusyLoadingError):
                    if self.process.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError(f"redis-server did not start; see {self.folder / 'redis.log'}") from None
                    time.sleep(0.05)
        finally:
            client.close()

    def kill(self) -> None:
        """``kill -9``: Redis gets no chance to flush anything."""
        kill_process(self.process)

    def stop(self) -> None:
        stop_process(self.process, timeout_s=10)

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port)

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
