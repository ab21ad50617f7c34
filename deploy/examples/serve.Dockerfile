# `dream serve --http` in a container: the base install (no Dagster), every agent under /data/agents served over
# Streamable HTTP at /agents/<id>/mcp. Build from the project root, run with a token (a non-loopback bind needs one):
#   docker build -f deploy/examples/serve.Dockerfile -t dream-serve .
#   docker run -p 8765:8765 -e DREAM_SERVE_TOKEN=a-secret-of-16-chars-or-more -v "$PWD/data/agents:/data/agents" dream-serve
# Clients reach it as http://127.0.0.1:8765/agents/NAME/mcp; for another host name, add `--allow-host NAME:8765` to the
# command. Not built by the test suite (no Docker here); test_install.py checks its files and its command.

# The wheel, with the compiled BM25 kernel (a C compiler in this stage only).
FROM python:3.11-slim AS wheel
RUN apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY directives ./directives
COPY dream_assets ./dream_assets
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

FROM python:3.11-slim
COPY --from=wheel /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels \
    && useradd --create-home dream && mkdir -p /data/agents && chown dream /data/agents
USER dream
ENV DREAM__ProfileRoot=/data/agents
VOLUME /data/agents
EXPOSE 8765
CMD ["dream", "serve", "--http", "0.0.0.0:8765", "--profile-root", "/data/agents", "--create"]
