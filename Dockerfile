# GraphGate: an Ollama-compatible chat gateway in front of a real Ollama.
#
#   docker build -t graphgate .
#   docker run -d -p 127.0.0.1:11435:11435 -v graphgate-data:/data
#       -e GRAPHGATE_UPSTREAM=http://ollama-host:11434
#       -e GRAPHGATE_ADMIN_PASSWORD=change-me graphgate
#   (one command, split here for width)
#
# See docker-compose.yml for a complete ollama + graphgate + open-webui setup.

FROM python:3.11-slim

# TIKTOKEN_CACHE_DIR is deliberately empty: tiktoken then reads its encoding
# straight from the installed package instead of copying it under /tmp.
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore \
    TIKTOKEN_CACHE_DIR=""

WORKDIR /app

# What the package build needs: pyproject.toml names README.md as the readme,
# the packages are proxy and admin, and templates/ installs as admin.templates
# (the console finds its templates and static files as package resources).
# tests/test_packaging.py replays these steps and starts the result.
COPY pyproject.toml README.md ./
COPY proxy/ ./proxy/
COPY admin/ ./admin/
COPY templates/ ./templates/

# A regular (non-editable) install, with the postgresql extra (psycopg, pgvector) so the same image
# also runs on GRAPHGATE_STORE=postgresql://... (docker-compose.scale.yml); drop the build leftovers after.
RUN pip install --no-cache-dir "/app[postgresql]" \
 && rm -rf /app/build /app/*.egg-info

# Unprivileged runtime user owning the data directory.
RUN groupadd --gid 10001 graphgate \
 && useradd --uid 10001 --gid 10001 --create-home --shell /usr/sbin/nologin graphgate \
 && mkdir -p /data \
 && chown graphgate:graphgate /data

VOLUME /data

ENV GRAPHGATE_HOST=0.0.0.0 \
    GRAPHGATE_PORT=11435 \
    GRAPHGATE_DATA_DIR=/data

EXPOSE 11435

USER graphgate

# Readiness, not just liveness: /rag/health answers 503 when the upstream Ollama is unreachable or the
# store cannot be opened, so `docker ps` shows "unhealthy" with the reason in the body (GET / would
# say "Ollama is running" regardless). A missing model is reported but stays 200. Docker does not
# restart an unhealthy container, so an Ollama that is down causes no restart loop. Its upstream
# check is bounded by GRAPHGATE_DISCOVERY_TIMEOUT (5 s), hence the 10 s timeout. slim images have no
# curl: the standard library probes it (urlopen raises on a 503).
HEALTHCHECK --interval=30s --timeout=10s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import urllib.request,sys; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:11435/rag/health', timeout=8).status == 200 else 1)"]

CMD ["graphgate", "serve"]
