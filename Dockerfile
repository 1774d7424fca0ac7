# semcache on its embedded default (SQLite + FAISS in /app/index), CPU only.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    HF_HUB_OFFLINE=1 \
    TIKTOKEN_CACHE_DIR=/opt/semcache/tiktoken \
    SEMCACHE_EMBEDDING_CACHE_DIR=/opt/semcache/models \
    SEMCACHE_HOST=0.0.0.0 \
    SEMCACHE_PORT=8080 \
    SEMCACHE_DATA_DIR=/app/index

WORKDIR /app

# The CPU build of torch first, from PyTorch's CPU wheel index: PyPI's Linux torch, pinned or not, is the
# multi-GB CUDA build. The same line is in the README and the Makefile.
RUN pip install --extra-index-url https://download.pytorch.org/whl/cpu torch==2.13.0+cpu

COPY pyproject.toml README.md ./
COPY clients/python ./clients/python
COPY semcache ./semcache
# semcache's client (a dependency) comes from clients/python, installed with it: no index has it.
RUN pip install ./clients/python . \
    && python -c "from pathlib import Path; from semcache.tokens import seed_tiktoken_cache; seed_tiktoken_cache(Path('/opt/semcache/tiktoken'))" \
    && python -c "from pathlib import Path; from semcache.embedders import load_embedder; load_embedder('all-MiniLM-L6-v2', 1, 'onnx-int8', Path('/opt/semcache/models'))" \
    && useradd --create-home --uid 10001 semcache \
    && mkdir -p /app/index \
    && chown semcache:semcache /app/index /opt/semcache/models

USER semcache
VOLUME ["/app/index"]
EXPOSE 8080

# /healthz answers 503 until the model and index are loaded; urlopen raises on it, so the check fails.
HEALTHCHECK --interval=15s --timeout=3s --start-period=60s --retries=3 \
    CMD python -c "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:' + os.environ.get('SEMCACHE_PORT', '8080') + '/healthz', timeout=2)"

ENTRYPOINT ["semcache", "serve"]
