"""The service's own settings (deployments, webhook receiver, metrics), read from `UNICHUNK_*` variables.

The other settings have their own homes: chunking in `unichunk.chunking.config` (`UNICHUNK_CHUNK_*`, and the loader's
`UNICHUNK_MAX_DOCUMENT_BYTES`), stores and models in `unichunk.sinks.config`, the metrics push in `unichunk.index.metrics`.
README.md's configuration table lists them all; a test keeps it in step with these models.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from unichunk.chunking.ids import default_source_name

SAMPLE_CORPUS = Path(__file__).resolve().parent / "sample_corpus"


class ServiceSettings(BaseSettings):
    """Env: UNICHUNK_SOURCE_ROOT, UNICHUNK_REINDEX_CRON, UNICHUNK_WEBHOOK_SECRET, ..."""

    model_config = SettingsConfigDict(env_prefix="UNICHUNK_", extra="ignore")

    source_root: Path | None = Field(
        None,
        description="The source webhooks name and the served `ingest`/`reindex` scan by default; webhook paths "
        "must stay inside it (unset: webhook paths are refused, and runs scan every source ingested before).",
    )
    source_name: str | None = Field(
        None,
        description="Name of the source at UNICHUNK_SOURCE_ROOT, part of its document IDs (unset: derived from "
        "the absolute root; set it to keep IDs when the folder moves).",
    )
    reindex_cron: str = Field("0 2 * * *", description="When the reindex deployment runs.")
    serve_run_limit: int = Field(
        2,
        ge=1,
        le=64,
        description="Flow runs the served process (and a `unichunk worker`, unless `--limit`) runs at once; "
        "more wait, queued (runs on one embedded store run one at a time anyway, and each run process holds "
        "its models in memory). Above 1 where runs are sharded: a sharded run's parent holds a slot.",
    )
    metrics_port: int = Field(
        9464,
        ge=0,
        le=65535,
        description="/metrics port of the served process (and a `unichunk worker`, unless `--metrics-port`); "
        "0 = off.",
    )
    webhook_secret: SecretStr | None = Field(
        None,
        description="Shared HMAC secret: signs for any source, or only the UNICHUNK_SOURCE_ROOT source once "
        "UNICHUNK_WEBHOOK_SECRETS is set; unset with no UNICHUNK_WEBHOOK_SECRETS = refuse all.",
    )
    webhook_max_body: int = Field(1024 * 1024, ge=1, description="Largest accepted webhook body in bytes.")
    webhook_tolerance: int = Field(
        300, ge=1, description="Max age (and future skew) of a webhook timestamp, in seconds."
    )
    webhook_batching: bool = Field(
        True,
        description="Updates webhooks report wait in a queue, and the run that takes the embedded store lock "
        "applies all of them (one start-up for a burst); false: each run applies its own update only.",
    )
    api_token: SecretStr | None = Field(
        None,
        description="Bearer token the service's API routes (/search, /documents, /status) require "
        "(`Authorization: Bearer ...`); unset = open, allowed only when the service listens on loopback.",
    )
    token: SecretStr | None = Field(
        None,
        description="The caller's own access token (`unichunk tokens create`) that the CLI sends to a running "
        "service and the MCP server runs its tools as; unset: UNICHUNK_API_TOKEN, else none (the owner, "
        "in-process).",
    )
    webhook_secrets: dict[str, SecretStr] = Field(
        default_factory=dict,
        description='One webhook HMAC secret per source, a JSON object (`{"docs": "...", "crm": "..."}`): a '
        "delivery signed with a source's secret may only touch that source (else 403). With it set, "
        "UNICHUNK_WEBHOOK_SECRET signs for the UNICHUNK_SOURCE_ROOT source only (unset: for any source).",
    )
    service_url: str | None = Field(
        None,
        description="URL of a running `unichunk serve` the CLI's search/status/delete talk to (unset: the "
        "one whose `service.json` is in the data dir, if running; else they work in-process).",
    )
    service_busy_wait: float = Field(
        10.0,
        ge=0,
        le=600,
        description="Seconds a search waits while a flow run holds the embedded vector store, before the "
        "service answers 503 with Retry-After.",
    )
    mcp_roots: list[Path] = Field(
        default_factory=list,
        description='Folders the MCP server\'s `ingest` tool may read, a JSON list (`["/srv/docs"]`); a path '
        "must resolve (symlinks followed) inside one of them. Empty: UNICHUNK_SOURCE_ROOT if set, else the "
        "tool refuses every path.",
    )
    debug: bool = Field(
        False,
        description="CLI errors show their traceback instead of one line, and Prefect's console logging of "
        "flow and task runs reaches the terminal again.",
    )

    def source_system(self) -> str | None:
        """The configured source's name (`source_system` of its documents), or None without a source root."""
        if self.source_root is None:
            return None
        return self.source_name or default_source_name(self.source_root)

    def mcp_ingest_roots(self) -> list[Path]:
        """The folders the MCP `ingest` tool may read, absolute and resolved: UNICHUNK_MCP_ROOTS, else the
        source root, else none (ingest refused: an agent must never be able to read the whole disk)."""
        roots = self.mcp_roots or ([self.source_root] if self.source_root is not None else [])
        return [root.expanduser().resolve() for root in roots]

    def source(self) -> dict[str, str] | None:
        """The configured source as flow parameters (`SourceParams` JSON), or None without a source root."""
        if self.source_root is None:
            return None
        root = self.source_root.expanduser().resolve()
        return {
            "kind": "directory",
            "root": str(root),
            "source_system": self.source_name or default_source_name(root),
        }
