"""LiteLLM's proxy with its response cache on, in front of the same stand-in upstream as semcache.

Used by ``python -m benchmarks run``. LiteLLM runs from a throwaway venv, benchmarks/.venv-litellm,
created on first use from the package index (about two minutes and 0.8 GB); it is a benchmark, never
a dependency of semcache.

What "its cache enabled" means here: ``litellm --config`` with ``litellm_settings: {cache: true,
cache_params: {type: local}}`` (in-process memory, like semcache's embedded store) or ``type:
redis`` on a private ``redis-server``. Both are exact caches: the key is a hash of the request. A
hit is told by the ``x-litellm-cache-key`` response header. LiteLLM's semantic caches
(``redis-semantic``, ``qdrant-semantic``) need Redis Stack's search module or a Qdrant server,
and an embedding API; none of those is available on this machine, so paraphrases reach the
upstream, and the benchmark says so instead of measuring a semantic hit.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import httpx
import yaml

from semcache.testing.uvicorn_thread import free_port
from testkit.redis_server import RedisServer

from .http_load import MODEL, Reply
from .quality_vs_gptcache import BenchmarkError, run_step, stderr

HERE = Path(__file__).resolve().parent
LITELLM_VENV = HERE / ".venv-litellm"
LITELLM_VERSION = "1.108.7"
LITELLM_REQUIREMENT = f"litellm[proxy]=={LITELLM_VERSION}"
SEMANTIC_UNAVAILABLE = (
    "LiteLLM's semantic caches (redis-semantic, qdrant-semantic) need Redis Stack's search module or a "
    "Qdrant server plus an embedding API; none is available here, so only its exact cache was measured "
    "and a paraphrase is a miss that reaches the upstream"
)
CacheType = Literal["local", "redis"]


@dataclass(frozen=True)
class Proxy:
    base_url: str
    master_key: str
    config: dict[str, Any]
    pid: int


def built_litellm_venv(venv: Path = LITELLM_VENV) -> Path | None:
    """The venv's ``litellm`` command when the venv holds the pinned version, else None."""
    command = venv / "bin" / "litellm"
    marker = venv / ".benchmark-requirements"
    if command.exists() and marker.exists() and marker.read_text().strip() == LITELLM_REQUIREMENT:
        return command
    return None


def ensure_litellm_venv(venv: Path = LITELLM_VENV) -> Path:
    """Create or complete the throwaway LiteLLM venv; return its ``litellm`` command."""
    if (built := built_litellm_venv(venv)) is not None:
        return built
    stderr.print(f"[bold]Setting up LiteLLM in {venv}[/bold] (first run only: about two minutes, 0.8 GB of disk)")
    python = venv / "bin" / "python"
    if not python.exists():
        run_step(f"creating the venv {venv}", [sys.executable, "-m", "venv", str(venv)])
    run_step(f"installing {LITELLM_REQUIREMENT}", [str(python), "-m", "pip", "install", "-q", LITELLM_REQUIREMENT])
    (venv / ".benchmark-requirements").write_text(LITELLM_REQUIREMENT + "\n")
    return venv / "bin" / "litellm"


def litellm_outcome(response: Reply) -> str:
    """``exact`` for a cache hit (LiteLLM names the cache key it served from), else ``miss``."""
    if response.status != 200:
        return "error"
    return "exact" if response.headers.get("x-litellm-cache-key") else "miss"


def proxy_config(upstream_url: str, master_key: str, cache_params: dict[str, Any]) -> dict[str, Any]:
    return {
        "model_list": [
            {
                "model_name": MODEL,
                "litellm_params": {"model": f"openai/{MODEL}", "api_base": upstream_url, "api_key": "sk-standin"},
            }
        ],
        "litellm_settings": {"cache": True, "cache_params": cache_params},
        # LiteLLM refuses to start without a master key; it is the client's bearer token.
        "general_settings": {"master_key": master_key},
    }


@contextmanager
def litellm_proxy(command: Path, upstream_url: str, cache: CacheType, log_path: Path) -> Iterator[Proxy]:
    """``litellm --config`` with one worker, on a free port; yields once it answers."""
    with ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="litellm-bench-")))
        cache_params: dict[str, Any] = {"type": "local"}
        if cache == "redis":
            redis = stack.enter_context(RedisServer(work / "redis", appendonly=False))
            cache_params = {"type": "redis", "host": "127.0.0.1", "port": redis.port}
        master_key = "sk-" + secrets.token_hex(32)
        config = proxy_config(upstream_url, master_key, cache_params)
        config_path = work / "litellm.yaml"
        config_path.write_text(yaml.safe_dump(config))
        port = free_port()
        env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_LOG": "ERROR"}
        env.pop("PYTHONPATH", None)
        args = [str(command), "--config", str(config_path), "--host", "127.0.0.1", "--port", str(port)]
        with log_path.open("ab") as log:
            process = subprocess.Popen([*args, "--num_workers", "1"], stdout=log, stderr=subprocess.STDOUT, env=env)
        stack.callback(_stop, process)
        _wait_until_live(f"http://127.0.0.1:{port}/health/liveliness", process, log_path)
        shown = {**config, "general_settings": {"master_key": "sk-<random>"}}
        yield Proxy(f"http://127.0.0.1:{port}/v1", master_key, shown, process.pid)


def _wait_until_live(url: str, process: subprocess.Popen[bytes], log_path: Path, timeout_s: float = 240) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            tail = "\n".join(log_path.read_text(errors="replace").strip().splitlines()[-15:])
            raise BenchmarkError(f"the LiteLLM proxy exited with code {process.returncode}:\n{tail}")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise BenchmarkError(f"the LiteLLM proxy did not answer {url} within {timeout_s:.0f} s; see {log_path}")


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
