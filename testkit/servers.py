"""Running real servers on loopback for tests and benchmarks: in a thread, or as a process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from semcache.testing.uvicorn_thread import free_port


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


@contextmanager
def standin_process(latency_s: float = 0.0, jitter_s: float = 0.0) -> Iterator[str]:
    """The stand-in upstream in its own process, so it does not share the client's interpreter;
    yields its OpenAI base URL once it answers. Each answer waits ``latency_s`` plus up to
    ``jitter_s`` more (fixed per prompt)."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "semcache.testing.standin_upstream", "--port", str(port),
         "--latency-s", str(latency_s), "--latency-jitter-s", str(jitter_s), "--log-level", "warning"]
    )  # fmt: skip
    try:
        wait_for_standin(f"http://127.0.0.1:{port}/v1/models", process)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        process.terminate()
        process.wait(10)


@contextmanager
def semcache_before_standin(folder: Path, env: dict[str, str]) -> Iterator[SemcacheProcess]:
    """``semcache serve`` on ``folder``/data, logging to ``folder``/semcache.log, in front of a
    stand-in upstream of its own: both as processes, stopped on exit."""
    with (
        standin_process() as upstream,
        SemcacheProcess(data_dir=folder / "data", upstream_url=upstream, env=env,
                        log_path=folder / "semcache.log") as process,
    ):  # fmt: skip
        yield process


def wait_for_standin(url: str, process: subprocess.Popen[bytes], timeout_s: float = 30) -> None:
    """Until ``url`` answers 200, while the stand-in's ``process`` runs; else RuntimeError."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and process.poll() is None:
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            time.sleep(0.1)
    raise RuntimeError(f"the stand-in upstream did not start (see {url})")
