"""The Python client and the LangChain cache install on their own (clients/python), without the
service's dependencies, and work against a running ``semcache serve``: in a fresh virtual
environment, with pip, as an application's author would install them. pip reaches the package
index for httpx, langchain-core and setuptools."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from semcache.testing.standin_upstream import StandinUpstream
from testkit.servers import SemcacheProcess

ROOT = Path(__file__).resolve().parents[1]
CLIENT = ROOT / "clients" / "python"
# What the service needs and the client must not pull in.
SERVICE_ONLY = ["torch", "sentence_transformers", "fastapi", "uvicorn", "faiss", "semcache"]

QUESTION = "How do I rotate the logs of my web server?"
PARAPHRASE = "How can I rotate my web server's logs?"
ANSWER = "Use logrotate with a daily rule."

# Run by the fresh environment's Python: what is installed, and the client against the service.
CLIENT_SCRIPT = """
import asyncio, importlib.metadata, importlib.util, json, sys
from semcache_client import Client

url, question, paraphrase, answer, service_only = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:]
with Client(url) as cache:
    missed = cache.lookup(question)
    entry_id = cache.store(question, answer)
    exact, similar = cache.lookup(question), cache.lookup(paraphrase)
    async_found = asyncio.run(cache.alookup(paraphrase))
print(json.dumps({
    "httpx": importlib.metadata.version("httpx"),
    "present": [name for name in service_only if importlib.util.find_spec(name) is not None],
    "langchain_core": importlib.util.find_spec("langchain_core") is not None,
    "missed": missed.hit, "entry_id": entry_id,
    "exact": [exact.hit, exact.answer, exact.tier],
    "similar": [similar.hit, similar.answer, similar.tier],
    "async": [async_found.hit, async_found.answer],
}))
"""

LANGCHAIN_SCRIPT = """
import importlib.metadata, importlib.util, json, sys
from langchain_core.globals import set_llm_cache
from langchain_core.language_models import FakeListChatModel
from semcache_client.langchain import SemcacheCache

url, question, service_only = sys.argv[1], sys.argv[2], sys.argv[3:]
cache = SemcacheCache(url)
set_llm_cache(cache)
model = FakeListChatModel(responses=["first answer", "second answer"])
answers = [model.invoke(question).content, model.invoke(question).content]
cache.close()
print(json.dumps({
    "langchain_core": importlib.metadata.version("langchain-core"),
    "present": [name for name in service_only if importlib.util.find_spec(name) is not None],
    "answers": answers, "model_calls": model.i,
}))
"""


def run(command: list[str], cwd: Path, timeout_s: float = 600) -> str:
    """``command`` in ``cwd``, away from the checkout and without this test run's PYTHONPATH
    (either would lend it semcache); its stdout."""
    env = {name: value for name, value in os.environ.items() if name not in ("PYTHONPATH", "PYTHONHOME")}
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=timeout_s, env=env)
    assert done.returncode == 0, (
        f"{' '.join(command)} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    )
    return done.stdout


def last_json(output: str) -> dict[str, Any]:
    return dict(json.loads(output.strip().splitlines()[-1]))


@pytest.mark.slow
def test_the_client_installs_alone_in_a_fresh_environment_and_talks_to_semcache_serve(
    tmp_path: Path, upstream: StandinUpstream
) -> None:
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", str(venv)], tmp_path)  # no --system-site-packages: nothing of ours leaks in
    python = str(venv / "bin" / "python")
    # clients/python as it is in the checkout, copied so that pip's build folders land in tmp_path, not the checkout.
    client = shutil.copytree(CLIENT, tmp_path / "python", ignore=shutil.ignore_patterns("build", "*.egg-info"))
    run([python, "-m", "pip", "install", "--quiet", str(client)], tmp_path)

    with SemcacheProcess(data_dir=tmp_path / "data", upstream_url=upstream.base_url) as service:
        plain = last_json(
            run([python, "-c", CLIENT_SCRIPT, service.url, QUESTION, PARAPHRASE, ANSWER, *SERVICE_ONLY], tmp_path)
        )
        assert plain["httpx"] and plain["present"] == [] and plain["langchain_core"] is False
        assert plain["missed"] is False and plain["entry_id"] > 0
        assert plain["exact"] == [True, ANSWER, "exact"]
        assert plain["similar"] == [True, ANSWER, "semantic"]
        assert plain["async"] == [True, ANSWER]

        run([python, "-m", "pip", "install", "--quiet", f"{client}[langchain]"], tmp_path)
        chained = last_json(
            run([python, "-c", LANGCHAIN_SCRIPT, service.url, "What is a semantic cache?", *SERVICE_ONLY], tmp_path)
        )
        assert chained["langchain_core"] and chained["present"] == []
        assert chained["answers"] == ["first answer", "first answer"] and chained["model_calls"] == 1


def test_semcache_re_exports_the_one_client() -> None:
    import semcache_client
    import semcache_client.langchain

    from semcache.client import Client, Found, SemcacheClientError
    from semcache.integrations.langchain import SemcacheCache

    assert (Client, Found, SemcacheClientError) == (
        semcache_client.Client, semcache_client.Found, semcache_client.SemcacheClientError,
    )  # fmt: skip
    assert SemcacheCache is semcache_client.langchain.SemcacheCache
