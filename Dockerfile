# syntax=docker/dockerfile:1
# Atlas Jobs: one image for the API, the workers and the one-shot migration.
#   docker build -t atlas-jobs .
#   docker run --rm -e DATABASE_URL=postgresql://... atlas-jobs migrate
#   docker run -p 8000:8000 -e DATABASE_URL=... -e ATLAS_SIGNING_SECRET=... atlas-jobs api
# Configuration comes only from the environment (README "Configuration").

# -- build: wheels of the project and of its runtime dependencies --------------------
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml setup.py MANIFEST.in README.md ./
COPY alembic ./alembic
COPY atlas_jobs ./atlas_jobs
COPY app ./app
COPY workers ./workers
RUN pip wheel --no-cache-dir --wheel-dir /wheels ".[s3]"

# -- runtime: the installed wheels, no build tools, no dev tools, not root ----------------
FROM python:3.11-slim AS runtime
RUN useradd --system --uid 10001 --create-home --home-dir /home/atlas atlas
COPY --from=build /wheels /wheels
# Pinned by construction: --no-index installs exactly the wheels built above.
# hadolint ignore=DL3013
RUN pip install --no-cache-dir --no-index --find-links /wheels "atlas-jobs[s3]" \
    && rm -rf /wheels
USER 10001
WORKDIR /home/atlas
ENV PYTHONUNBUFFERED=1 \
    ATLAS_HOST=0.0.0.0 \
    ATLAS_PORT=8000 \
    ATLAS_LOG_FORMAT=json \
    ATLAS_DATA_DIR=/home/atlas/data
EXPOSE 8000
# Liveness of the API process (a worker container overrides it: see docker-compose.yml).
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import urllib.request as u; u.urlopen('http://127.0.0.1:8000/livez', timeout=2)"]
ENTRYPOINT ["atlas-jobs"]
CMD ["api"]
