"""The vector sink on qdrant-client: its local mode (`QdrantClient(path=...)`, one directory per
generation under `data_dir`, UNICHUNK_VECTOR_ENGINE=local) or a Qdrant server (UNICHUNK_QDRANT_URL).

`unichunk.sinks.vectors.sink.VectorSink` does the sink's work; this module is its engine, and the only one that
imports qdrant-client (slow to import), which qdrant-edge runs never load.
"""

from __future__ import annotations

import threading
import uuid
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

from qdrant_client import QdrantClient, models

from unichunk.sinks.base import SinkError, redacted_url
from unichunk.sinks.config import SinkSettings
from unichunk.sinks.vectors.base import Embedder
from unichunk.sinks.vectors.sink import (
    _SCROLL_PAGE,
    SHARED_HANDLES,
    SINK_NAME,
    Conditions,
    StoredPoint,
    VectorSink,
    refuse_other_engine,
)


def open_client(settings: SinkSettings) -> QdrantClient:
    """A client for the configured server, else local mode under `settings.qdrant_path`."""
    if settings.qdrant_url:
        api_key = settings.qdrant_api_key.get_secret_value() if settings.qdrant_api_key else None
        return QdrantClient(url=settings.qdrant_url, api_key=api_key)
    path = settings.qdrant_path
    path.mkdir(parents=True, exist_ok=True)
    try:
        return QdrantClient(path=str(path))
    except RuntimeError as exc:
        if "already accessed" not in str(exc):
            raise
        raise SinkError(
            SINK_NAME,
            f"the local Qdrant storage at {path} is already open in another process (or another client in "
            "this one); local mode allows one user at a time: stop the other process, or run a Qdrant "
            "server and set UNICHUNK_QDRANT_URL",
        ) from exc


def client_filter(conditions: Conditions | None) -> models.Filter | None:
    """The qdrant-client filter for `conditions` (None or empty: no filter)."""
    if not conditions:
        return None
    must: list[models.Condition] = [
        models.FieldCondition(key=key, match=models.MatchAny(any=accepted))
        for key, accepted in conditions.items()
    ]
    return models.Filter(must=must)


class QdrantSink(VectorSink):
    """`VectorSink` on qdrant-client: a given client, else the configured server, else local mode."""

    engine = "local"

    def __init__(
        self, settings: SinkSettings, embedder: Embedder | None = None, client: QdrantClient | None = None
    ) -> None:
        self._given_client = client
        super().__init__(settings, embedder)

    @property
    def location(self) -> str | None:
        """The Qdrant server's URL (API key never part of it); None in local mode or with a given client."""
        url = self.settings.qdrant_url
        return redacted_url(url) if url and self._given_client is None else None

    def _store_open(self) -> None:
        """Attach the given client, else the configured server, else this directory's shared local-mode
        client."""
        if self._given_client is not None:
            self.client, self._lock = self._given_client, threading.RLock()
        elif self.settings.qdrant_url:
            self.client, self._lock = open_client(self.settings), threading.RLock()
            self._release_client = self.client.close
        else:
            refuse_other_engine(self.settings, self.engine)
            key = str(self.settings.qdrant_path.resolve())
            self.client, self._lock, self._release_client = SHARED_HANDLES.acquire(
                key, lambda: open_client(self.settings), lambda c: c.close()
            )

    def _store_exists(self) -> bool:
        return self.client.collection_exists(self.collection)

    def _store_create(self, dimension: int) -> None:
        self.client.create_collection(
            self.collection,
            vectors_config=models.VectorParams(size=dimension, distance=models.Distance.COSINE),
        )

    def _store_index(self, fields: Sequence[str]) -> None:
        """Keyword payload indexes (idempotent): a server filters and deletes by them without a scan."""
        with warnings.catch_warnings():
            # Local mode warns that payload indexes do nothing there; a server needs them for filters.
            warnings.filterwarnings("ignore", message="Payload indexes have no effect", category=UserWarning)
            for field_name in fields:
                self.client.create_payload_index(
                    self.collection, field_name, field_schema=models.PayloadSchemaType.KEYWORD, wait=True
                )

    def _store_vectors(self) -> tuple[int, str]:
        params = self.client.get_collection(self.collection).config.params.vectors
        if not isinstance(params, models.VectorParams):
            raise SinkError(
                self.name, f"collection {self.collection!r} uses named vectors; expected one vector"
            )
        return params.size, params.distance.value

    def _store_upsert(self, points: list[StoredPoint]) -> None:
        structs = [
            models.PointStruct(id=pid, vector=vector, payload=payload) for pid, vector, payload in points
        ]
        self.client.upsert(self.collection, points=structs, wait=True)

    def _store_delete(self, ids: list[str]) -> None:
        self.client.delete(self.collection, models.PointIdsList(points=list(ids)), wait=True)

    def _store_set_payload(self, ids: list[str], payload: dict[str, Any]) -> None:
        self.client.set_payload(self.collection, payload=payload, points=list(ids), wait=True)

    def _store_scroll(
        self, conditions: Conditions | None, fields: list[str] | bool
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        """(point ID, payload subset, or all of it with `fields=True`) for every matching point, by page."""
        scroll_filter = client_filter(conditions)
        offset: models.ExtendedPointId | None = None
        while True:
            records, offset = self.client.scroll(
                self.collection,
                scroll_filter=scroll_filter,
                limit=_SCROLL_PAGE,
                offset=offset,
                with_payload=fields,
                with_vectors=False,
            )
            for record in records:
                yield str(uuid.UUID(str(record.id))), record.payload or {}
            if offset is None:
                return

    def _store_query(
        self, vector: list[float], conditions: Conditions, k: int
    ) -> list[tuple[float, dict[str, Any]]]:
        response = self.client.query_points(
            self.collection, query=vector, query_filter=client_filter(conditions), limit=k, with_payload=True
        )
        return [(point.score, point.payload or {}) for point in response.points]

    def _store_count(self, conditions: Conditions) -> int:
        return self.client.count(self.collection, count_filter=client_filter(conditions), exact=True).count

    def _store_retrieve(self, ids: list[str]) -> list[dict[str, Any]]:
        records = self.client.retrieve(self.collection, ids=ids, with_payload=True, with_vectors=False)
        return [r.payload or {} for r in records]

    def _store_drop(self) -> None:
        if self.client.collection_exists(self.collection):
            self.client.delete_collection(self.collection)

    def alias_target(self, alias: str) -> str | None:
        """The collection `alias` points at, if it exists."""
        with self._lock:
            found = [a.collection_name for a in self.client.get_aliases().aliases if a.alias_name == alias]
        return found[0] if found else None

    def point_alias(self, alias: str) -> None:
        """Make `alias` name this sink's collection, in one atomic alias operation.

        On a server, outside readers (dashboards, other apps) query the alias and see whole generations
        only; our own readers resolve the generation registry, so all three stores come from the same
        generation. In local mode each generation has its own directory (no other process can read it
        while it is open anyway), so the alias there simply names that directory's collection.
        """
        with self._operation("alias"), self._lock:
            self._check_collection(create=True)  # an alias needs its collection to exist
            current = self.alias_target(alias)
            if current == self.collection:
                return
            if current is None and self.client.collection_exists(alias):
                raise SinkError(
                    self.name, f"a collection named {alias!r} exists, so it cannot become the live alias"
                )
            operations: list[models.AliasOperations] = []
            if current is not None:
                operations.append(
                    models.DeleteAliasOperation(delete_alias=models.DeleteAlias(alias_name=alias))
                )
            operations.append(
                models.CreateAliasOperation(
                    create_alias=models.CreateAlias(collection_name=self.collection, alias_name=alias)
                )
            )
            self.client.update_collection_aliases(change_aliases_operations=operations)
