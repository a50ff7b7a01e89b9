"""Where the graph's one set of Cypher queries runs: Neo4j (Bolt) or FalkorDB (Redis protocol).

Everything that differs between the two lives here, so `unichunk.sinks.graph.cypher` holds each query once: how a
statement is executed and retried, how results become dicts, and how indexes and uniqueness constraints
are declared (FalkorDB has no `IF NOT EXISTS` and declares constraints with a Redis command).

The Neo4j driver is imported when a Neo4j backend is made, not with this module: it is slow to import, and
the default FalkorDB runs never need it.
"""

from __future__ import annotations

import logging
import re
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any

from falkordb import FalkorDB
from redis.exceptions import ResponseError

from unichunk.sinks.base import redacted_url
from unichunk.sinks.config import SinkSettings
from unichunk.sinks.graph.falkordb_server import ensure_server

log = logging.getLogger(__name__)

# (label, property): looked up by key on every write, so each needs an index; all but document_id are unique.
INDEXED = (
    ("Chunk", "chunk_id"),
    ("Chunk", "document_id"),
    ("Entity", "name"),
    ("Entity", "alias"),  # the graph retriever's look-up by surname or acronym
    ("Document", "document_id"),
)
UNIQUE = (("Chunk", "chunk_id"), ("Entity", "name"), ("Document", "document_id"))
_LABEL = re.compile(r"(?<=:)(Chunk|Entity|Document)\b")


def namespaced_labels(query: str, namespace: str | None) -> str:
    """`query` with our node labels suffixed by `namespace` (`:Chunk` -> `:Chunk_g1a2b`).

    Neo4j Community holds one graph per server, so an index generation lives beside the others under its
    own labels (with its own uniqueness constraints); FalkorDB gives each generation its own graph instead.
    """
    return query if namespace is None else _LABEL.sub(lambda m: f"{m.group(1)}_{namespace}", query)


class GraphBackend(ABC):
    """Runs one Cypher statement at a time; each statement is atomic, nothing spans two."""

    name: str

    @abstractmethod
    def run(self, query: str, params: Mapping[str, Any] | None = None, *, write: bool = True) -> list[dict]:
        """Execute one statement and return its rows as dicts keyed by the RETURN aliases."""

    @abstractmethod
    def setup_schema(self) -> None:
        """Create the indexes and uniqueness constraints (idempotent)."""

    @abstractmethod
    def clear(self) -> None:
        """Remove every node and relationship this sink stores (used by tests and full rebuilds)."""

    def close(self) -> None:  # noqa: B027 - optional
        """Release the connection."""

    @property
    def location(self) -> str | None:
        """The server's URL for messages (password hidden), as `Sink.location`."""
        return None


class FalkorDBBackend(GraphBackend):
    """FalkorDB through the `falkordb` client; the graph is a Redis key named `graph_name`."""

    name = "falkordb"

    def __init__(
        self, url: str, graph_name: str = "unichunk", *, socket_timeout: float | None = 600.0
    ) -> None:
        self.url = url
        self.graph_name = graph_name
        # redis-py gives up on a reply after 5 s by default; a large batch statement can take longer.
        self._db = FalkorDB.from_url(url, socket_timeout=socket_timeout)
        self._graph = self._db.select_graph(graph_name)

    @property
    def location(self) -> str:
        return redacted_url(self.url)

    def run(self, query: str, params: Mapping[str, Any] | None = None, *, write: bool = True) -> list[dict]:
        graph = self._graph
        result = (
            graph.query(query, dict(params or {})) if write else graph.ro_query(query, dict(params or {}))
        )
        names = [column[1] for column in result.header]
        return [dict(zip(names, row, strict=True)) for row in result.result_set]

    def setup_schema(self) -> None:
        for label, prop in INDEXED:
            try:
                self._graph.query(f"CREATE INDEX FOR (n:{label}) ON (n.{prop})")
            except ResponseError as exc:
                if "already indexed" not in str(exc):
                    raise
        existing = {(c["label"], tuple(c["properties"])) for c in self._constraints()}
        for label, prop in UNIQUE:
            if (label, (prop,)) in existing:
                continue
            try:
                self._db.execute_command(
                    "GRAPH.CONSTRAINT",
                    "CREATE",
                    self.graph_name,
                    "UNIQUE",
                    "NODE",
                    label,
                    "PROPERTIES",
                    1,
                    prop,
                )
            except ResponseError as exc:  # created concurrently by another process
                if "already exists" not in str(exc).lower():
                    raise
        self._await_constraints()

    def _constraints(self) -> list[dict]:
        rows = self.run("CALL db.constraints() YIELD type, label, properties, status", write=False)
        return [r for r in rows if r["type"] == "UNIQUE"]

    def _await_constraints(self, timeout: float = 30.0) -> None:
        """Constraints are built asynchronously; a write racing the build could slip a duplicate in."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pending = [c for c in self._constraints() if c["status"] != "OPERATIONAL"]
            if not pending:
                return
            if any(c["status"] == "FAILED" for c in pending):
                raise RuntimeError(f"FalkorDB constraint creation failed: {pending}")
            time.sleep(0.05)
        raise RuntimeError("FalkorDB constraints still pending after 30 s")

    def clear(self) -> None:
        try:
            self._graph.delete()
        except ResponseError as exc:  # the graph does not exist yet
            if "empty key" not in str(exc):
                raise

    def close(self) -> None:
        self._db.connection.close()


class Neo4jBackend(GraphBackend):
    """Neo4j through the official driver: each statement is a managed transaction, retried on transient errors."""

    name = "neo4j"

    def __init__(
        self,
        uri: str,
        user: str = "neo4j",
        password: str | None = None,
        database: str | None = None,
        namespace: str | None = None,
    ) -> None:
        import neo4j  # here, not at the top: see the module docstring

        self.uri = uri
        self.database = database
        self.namespace = namespace  # the index generation: suffixes every node label (namespaced_labels)
        self._driver = neo4j.GraphDatabase.driver(
            uri, auth=(user, password) if password is not None else None
        )

    @property
    def location(self) -> str:
        return redacted_url(self.uri)

    def run(self, query: str, params: Mapping[str, Any] | None = None, *, write: bool = True) -> list[dict]:
        def work(tx: Any) -> list[dict]:
            return tx.run(query, dict(params or {})).data()

        query = namespaced_labels(query, self.namespace)
        with self._driver.session(database=self.database) as session:
            return session.execute_write(work) if write else session.execute_read(work)

    def setup_schema(self) -> None:
        statements = [
            f"CREATE CONSTRAINT {label.lower()}_{prop} IF NOT EXISTS FOR (n:{label}) REQUIRE n.{prop} IS UNIQUE"
            for label, prop in UNIQUE
        ]
        statements += [
            f"CREATE INDEX {label.lower()}_{prop}_index IF NOT EXISTS FOR (n:{label}) ON (n.{prop})"
            for label, prop in INDEXED
            if (label, prop) not in UNIQUE
        ]
        statements = [namespaced_labels(s, self.namespace) for s in statements]
        if self.namespace:  # constraint and index names are global: one set per generation
            statements = [
                s.replace(" IF NOT EXISTS", f"_{self.namespace} IF NOT EXISTS", 1) for s in statements
            ]
        with self._driver.session(database=self.database) as session:
            for statement in statements:
                session.run(statement).consume()

    def clear(self) -> None:
        self.run("MATCH (n) WHERE n:Chunk OR n:Entity OR n:Document DETACH DELETE n")

    def close(self) -> None:
        self._driver.close()


def open_backend(settings: SinkSettings) -> GraphBackend:
    """Neo4j if `neo4j_uri` is set, else FalkorDB at `falkordb_url`, else the embedded FalkorDB server."""
    if settings.neo4j_uri:
        password = settings.neo4j_password.get_secret_value() if settings.neo4j_password else None
        return Neo4jBackend(
            settings.neo4j_uri,
            settings.neo4j_user,
            password,
            settings.neo4j_database,
            namespace=settings.generation,
        )
    url = settings.falkordb_url
    if not url:
        url = ensure_server(settings.data_dir, idle_seconds=settings.server_idle_seconds)
    return FalkorDBBackend(url, settings.graph_key)
