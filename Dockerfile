# One image for the workers (`unichunk worker`), the one-shot `prefect deploy` of prefect.yaml (hence
# prefect.yaml in /app: the deployments run their flows from /app), and the webhook receiver
# (`uvicorn --factory unichunk.deployments.service.webhook:create_app`); `unichunk serve` for a single
# machine. Every folder pyproject.toml installs (inside `unichunk`) is copied:
# a missing one (index, retrieval, unichunk once were) installs fine and fails at the first import.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    DO_NOT_TRACK=1 \
    PREFECT_SERVER_ANALYTICS_ENABLED=false \
    HF_HUB_OFFLINE=1 \
    UNICHUNK_DATA_DIR=/data

WORKDIR /app
# Pass e.g. --build-arg PIP_EXTRA_INDEX_URL=<a CPU-only torch index> to avoid the multi-GB CUDA torch.
ARG PIP_EXTRA_INDEX_URL=""
COPY pyproject.toml constraints.txt README.md prefect.yaml ./
COPY chunking ./chunking
COPY sinks ./sinks
COPY index ./index
COPY retrieval ./retrieval
COPY tasks ./tasks
COPY engine ./engine
COPY flows ./flows
COPY unichunk ./unichunk
COPY deployments ./deployments
RUN pip install -c constraints.txt .

RUN useradd --create-home --uid 10001 unichunk && mkdir -p /data && chown unichunk /data
USER unichunk
VOLUME ["/data"]
EXPOSE 8787 9464

CMD ["unichunk", "serve", "--no-webhook"]
