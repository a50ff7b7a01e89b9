"""The deployments and the process that serves them.

- `ingest/ingest`: ad-hoc runs from the Prefect UI or `prefect deployment run` (no schedule).
- `rebuild/rebuild`: run from the UI after changing the chunking settings (its form), the embedder or the
  extractor (UNICHUNK_* settings of the serving process): builds a new index generation beside the live
  one and switches readers when it is verified.
- `switch-generation/switch-generation`: roll back to a retained generation (or on to a ready one).
- `reindex/reindex`: the nightly safety net, on the cron in UNICHUNK_REINDEX_CRON (default "0 2 * * *").
- `ingest-document/ingest-document` and `delete-document/delete-document`: fired by the Prefect events
  "document.updated" / "document.deleted" that the webhook receiver emits; their parameters are Jinja
  templates over the event payload, rendered by the Prefect server when the trigger fires.

`serve_all()` serves them in this one process (`prefect.serve`: each flow run is a subprocess of it)
and exposes /metrics on UNICHUNK_METRICS_PORT (default 9464) for Prometheus.

Scaling out. One served process suits one machine. To spread runs over machines, use the prefect.yaml at
the repo root instead, which declares the same deployments for a process work pool::

    prefect work-pool create unichunk --type process
    prefect deploy --all                       # from the repo root, registers the deployments
    prefect worker start --pool unichunk       # on each machine, as many as you like

Every worker polls the pool and runs flow runs as local subprocesses, so adding workers adds
throughput; the triggers and the cron live on the server and do not care which worker picks a run up.
Within one large run, the tasks themselves can be spread across a cluster by giving the flow a
distributed task runner, e.g. `ingest.with_options(task_runner=DaskTaskRunner(address="tcp://sched:8786"))`
from prefect-dask or `RayTaskRunner(address="ray://head:10001")` from prefect-ray (neither is installed by
default; add the package and set the runner where the deployment is built). Every worker needs the same
UNICHUNK_* settings pointing at shared stores (Qdrant, Neo4j/FalkorDB servers, a shared data dir for
BM25 and the status store), since embedded stores are per machine.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

from prefect import serve
from prefect.events import DeploymentEventTrigger
from prefect.types.entrypoint import EntrypointType
from prometheus_client import start_http_server

from deployments.settings import ServiceSettings
from flows.documents import delete_document, ingest_document
from flows.ingest import ingest
from flows.rebuild import rebuild
from flows.reindex import reindex
from flows.switch import switch_generation

UPDATED_EVENT = "document.updated"
DELETED_EVENT = "document.deleted"
DOCUMENT_RESOURCE = "unichunk.document.*"
DEPLOYMENT_NAMES = (
    "ingest",
    "reindex",
    "ingest-document",
    "delete-document",
    "rebuild",
    "switch-generation",
)

log = logging.getLogger(__name__)


def ingest_document_parameters(settings: ServiceSettings) -> dict[str, Any]:
    """Flow parameters rendered from the triggering event (templates kept whole so types survive)."""
    parameters: dict[str, Any] = {
        "path": "{{ event.payload.path }}",
        "source_system": "{{ event.payload.source_system }}",  # the receiver always fills it in
        "source_id": "{{ event.payload.source_id }}",
    }
    if settings.source_root is not None:
        parameters["root"] = str(settings.source_root.resolve())
    return parameters


def build_deployments(
    settings: ServiceSettings | None = None, names: tuple[str, ...] | list[str] = DEPLOYMENT_NAMES
) -> list[Any]:
    """The RunnerDeployments to serve (only those in `names`), with schedules and triggers attached."""
    settings = settings or ServiceSettings()
    # The configured source, or none: then `ingest` and `reindex` re-scan every source ingested before.
    source = {"params": {"source": settings.source()}} if settings.source() else {"params": {}}
    # Module entrypoints: flow runs import `flows.*` wherever the package is installed, whatever the cwd.
    common: dict[str, Any] = {"entrypoint_type": EntrypointType.MODULE_PATH, "tags": ["unichunk"]}
    builders = {
        "ingest": lambda: ingest.to_deployment(
            "ingest", parameters=source, description="Ad-hoc ingestion of a directory or files.", **common
        ),
        "reindex": lambda: reindex.to_deployment(
            "reindex",
            cron=settings.reindex_cron,
            parameters=source,
            description="Scheduled full incremental scan plus alignment check and repair.",
            **common,
        ),
        "ingest-document": lambda: ingest_document.to_deployment(
            "ingest-document",
            triggers=[
                DeploymentEventTrigger(
                    name="unichunk: document updated",
                    expect={UPDATED_EVENT},
                    match={"prefect.resource.id": DOCUMENT_RESOURCE},
                    parameters=ingest_document_parameters(settings),
                )
            ],
            description="Re-ingest one document when a webhook reports it changed.",
            **common,
        ),
        "delete-document": lambda: delete_document.to_deployment(
            "delete-document",
            triggers=[
                DeploymentEventTrigger(
                    name="unichunk: document deleted",
                    expect={DELETED_EVENT},
                    match={"prefect.resource.id": DOCUMENT_RESOURCE},
                    parameters={"document_id": "{{ event.payload.document_id }}"},
                )
            ],
            description="Remove one document from every sink when a webhook reports it deleted.",
            **common,
        ),
        "rebuild": lambda: rebuild.to_deployment(
            "rebuild",
            parameters=source,
            description="Build a new index generation with new settings, verify it, switch readers to it.",
            **common,
        ),
        "switch-generation": lambda: switch_generation.to_deployment(
            "switch-generation",
            description="Roll back to the last retired index generation (or switch to a given one).",
            **common,
        ),
    }
    unknown = set(names) - set(builders)
    if unknown:
        raise ValueError(f"unknown deployment(s) {sorted(unknown)}; known: {list(builders)}")
    return [builders[name]() for name in names]


def start_metrics_server(port: int, addr: str = "0.0.0.0") -> int | None:
    """Expose the default registry on /metrics (port 0 = disabled); returns the bound port.

    Flow runs are subprocesses and push their own metrics to the Pushgateway; this page shows what the
    serving process itself records (and the process/platform collectors) so Prometheus can scrape it.
    """
    if port == 0:
        return None
    server, _thread = start_http_server(port, addr=addr)
    return server.server_port


def serve_all(
    names: tuple[str, ...] | list[str] = DEPLOYMENT_NAMES, settings: ServiceSettings | None = None
) -> None:
    """Register and serve the deployments against PREFECT_API_URL until interrupted (blocking).

    At most `serve_run_limit` flow runs execute at once; the rest stay scheduled until a slot frees, so a
    burst of webhooks queues instead of starting twenty processes that load the models together."""
    settings = settings or ServiceSettings()
    deployments = build_deployments(settings, names)
    port = start_metrics_server(settings.metrics_port)
    if port:
        log.info("metrics on http://0.0.0.0:%s/metrics", port)
    serve(*deployments, limit=settings.serve_run_limit)


if __name__ == "__main__":  # python -m deployments.serve [name ...]
    logging.basicConfig(level=logging.INFO)
    serve_all(tuple(sys.argv[1:]) or DEPLOYMENT_NAMES)
