"""The service's own settings (deployments, webhook receiver, metrics), read from `UNICHUNK_*` variables.

The other settings have their own homes: chunking in `chunking.config` (`UNICHUNK_CHUNK_*`, and the loader's
`UNICHUNK_MAX_DOCUMENT_BYTES`), stores and models in `sinks.config`, the metrics push in `index.metrics`.
README.md's configuration table lists them all; a test keeps it in step with these models.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

SAMPLE_CORPUS = Path(__file__).resolve().parent / "sample_corpus"


class ServiceSettings(BaseSettings):
    """Env: UNICHUNK_SOURCE_ROOT, UNICHUNK_REINDEX_CRON, UNICHUNK_WEBHOOK_SECRET, ..."""

    model_config = SettingsConfigDict(env_prefix="UNICHUNK_", extra="ignore")

    source_root: Path | None = Field(
        None,
        description="The directory the scheduled reindex scans (unset: the bundled sample corpus) and webhook "
        "paths must stay inside (unset: webhook paths are refused).",
    )
    reindex_cron: str = Field("0 2 * * *", description="When the reindex deployment runs.")
    metrics_port: int = Field(
        9464, ge=0, le=65535, description="/metrics port of the served process; 0 = off."
    )
    webhook_secret: SecretStr | None = Field(None, description="Shared HMAC secret; unset = refuse all.")
    webhook_max_body: int = Field(1024 * 1024, ge=1, description="Largest accepted webhook body in bytes.")
    webhook_tolerance: int = Field(
        300, ge=1, description="Max age (and future skew) of a webhook timestamp, in seconds."
    )
    debug: bool = Field(False, description="CLI errors show their traceback instead of one line.")

    def scan_root(self) -> str:
        """The directory `ingest` and `reindex` scan by default: the source root, else the sample corpus."""
        return str((self.source_root or SAMPLE_CORPUS).resolve())
