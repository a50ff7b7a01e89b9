"""The access tokens of a data dir, kept as hashes only: who they name, what they may read and write.

A token is `uck_<id>_<secret>`: the public `id` finds its row, the SHA-256 of the whole token is all that
is stored (a 256-bit random secret needs no slow hash: nobody can guess it, so a stolen table reveals no
token), and the hashes are compared in constant time (`hmac.compare_digest`). One SQLite file under the
data dir, beside the source registry, or the table `tokens` of the `unichunk` schema in server mode
(`unichunk.sinks.database`), so every service replica and worker sees a revocation at its next look-up.
Names are unique, so `revoke NAME` names one token; a revoked token keeps its row (and its name) for audit.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.exc import IntegrityError

from unichunk.chunking.access_labels import normalise_labels
from unichunk.index.errors import TokenError
from unichunk.sinks.config import SinkSettings
from unichunk.sinks.database import Database, open_database

TOKEN_PREFIX = "uck_"
_ID_BYTES = 8  # 16 hex characters: unique enough to find a row, and public (never a secret)
_SECRET_BYTES = 32  # 256 bits from `secrets`
_TOKEN = re.compile(r"uck_([0-9a-f]{16})_([A-Za-z0-9_-]{43})")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:@-]{0,63}")

_SCHEMA = [
    """
CREATE TABLE IF NOT EXISTS tokens (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    hash TEXT NOT NULL,
    labels TEXT NOT NULL DEFAULT '[]',
    may_write INTEGER NOT NULL DEFAULT 0,
    admin INTEGER NOT NULL DEFAULT 0,
    created_at TEXT NOT NULL,
    revoked_at TEXT,
    created_seq BIGINT
)"""
]
_COLUMNS = "id, name, hash, labels, may_write, admin, created_at, revoked_at"
# Creation order, exactly: the store's own counter, taken under a lock in the insert's transaction (the
# timestamps have whole seconds and each writer's clock). Nullable: rows of a table made before it have none,
# and were all created before any row that has one (the column is added before the first new insert).
_SEQUENCE = {"created_seq": "BIGINT"}
_OLDEST_FIRST = "ORDER BY CASE WHEN created_seq IS NULL THEN 0 ELSE 1 END, created_seq, created_at, id"


@dataclass(frozen=True)
class TokenRecord:
    """One token as stored, without its secret: what `list` shows and a look-up resolves to."""

    id: str
    name: str
    labels: tuple[str, ...]
    may_write: bool
    admin: bool
    created_at: str
    revoked_at: str | None = None

    @property
    def revoked(self) -> bool:
        return self.revoked_at is not None


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


class TokenStore:
    """The tokens of a data dir (see the module docstring for where). Reading a store that does not exist
    yet creates nothing and finds no token."""

    def __init__(self, settings: SinkSettings) -> None:
        self.settings = settings
        self._path = settings.data_dir / "tokens.sqlite3"
        self._reader = open_database(settings, self._path, readonly=True)

    def _writer(self) -> Database:
        writer = open_database(self.settings, self._path)
        writer.ensure(_SCHEMA)
        writer.add_missing_columns("tokens", _SEQUENCE)  # a table an earlier version made
        return writer

    def create(
        self,
        labels: Sequence[str] = (),
        *,
        name: str | None = None,
        may_write: bool = False,
        admin: bool = False,
    ) -> tuple[str, TokenRecord]:
        """A new token and its record; the token string exists only in the return value."""
        token_id = secrets.token_hex(_ID_BYTES)
        token = f"{TOKEN_PREFIX}{token_id}_{secrets.token_urlsafe(_SECRET_BYTES)}"
        name = token_id if name is None else name
        if not _NAME.fullmatch(name):
            raise TokenError(
                f"bad token name {name!r}: 1-64 characters of letters, digits, '_', '.', ':', '@' or '-'"
            )
        record = TokenRecord(
            token_id,
            name,
            normalise_labels(labels),
            may_write or admin,
            admin,
            datetime.now(UTC).isoformat(timespec="seconds"),
        )
        try:
            with self._writer().write(lock="tokens.created_seq") as conn:
                conn.execute(
                    text(
                        f"INSERT INTO tokens ({_COLUMNS}, created_seq) VALUES "
                        "(:id, :name, :hash, :labels, :may_write, :admin, :created_at, NULL, "
                        "(SELECT COALESCE(MAX(created_seq), 0) + 1 FROM tokens))"
                    ),
                    {
                        "id": record.id,
                        "name": record.name,
                        "hash": token_hash(token),
                        "labels": json.dumps(list(record.labels)),
                        "may_write": int(record.may_write),
                        "admin": int(record.admin),
                        "created_at": record.created_at,
                    },
                )
        except IntegrityError as exc:
            raise TokenError(
                f"a token named {name!r} exists already (names stay taken once revoked)"
            ) from exc
        return token, record

    def all(self) -> list[TokenRecord]:
        """Every token, revoked ones too, in the order they were created (a table no writer has upgraded
        yet is read as it is: by creation second, then id)."""
        order = (
            _OLDEST_FIRST if "created_seq" in self._reader.columns("tokens") else "ORDER BY created_at, id"
        )
        return [_record(row) for row in self._rows(f"SELECT {_COLUMNS} FROM tokens {order}")]

    def revoke(self, id_or_name: str) -> TokenRecord:
        """Revoke the token with this id or name (again: a no-op); `TokenError` when there is none."""
        if "\x00" in id_or_name:  # no id or name has one (and PostgreSQL TEXT cannot hold it)
            raise TokenError(f"no such token: {id_or_name!r}")
        now = datetime.now(UTC).isoformat(timespec="seconds")
        with self._writer().write() as conn:
            row = conn.execute(
                text(f"SELECT {_COLUMNS} FROM tokens WHERE id = :key OR name = :key"), {"key": id_or_name}
            ).first()
            if row is None:
                raise TokenError(f"no such token: {id_or_name} (`unichunk tokens list` lists them)")
            conn.execute(
                text("UPDATE tokens SET revoked_at = :now WHERE id = :id AND revoked_at IS NULL"),
                {"now": now, "id": row[0]},
            )
        return next(record for record in self.all() if record.id == row[0])

    def any_made(self) -> bool:
        """Whether any token was ever created (revoked ones count: revoking the last token must not open
        an API that tokens closed)."""
        return bool(self._rows("SELECT id FROM tokens LIMIT 1"))

    def resolve(self, token: str) -> TokenRecord | None:
        """The live token `token` is, or None (malformed, unknown, wrong secret, revoked): one indexed
        look-up by id and a constant-time comparison of hashes, on every call, so a revocation holds at once."""
        match = _TOKEN.fullmatch(token)
        if match is None:
            return None
        rows = self._rows(f"SELECT {_COLUMNS} FROM tokens WHERE id = :id", {"id": match.group(1)})
        if not rows:
            return None
        row = rows[0]
        if not hmac.compare_digest(row[2], token_hash(token)) or row[7] is not None:
            return None
        return _record(row)

    @staticmethod
    def token_id(token: str) -> str | None:
        """The public id a well-formed token names (for logs: never the token), else None."""
        match = _TOKEN.fullmatch(token)
        return match.group(1) if match else None

    def _rows(self, sql: str, params: dict[str, Any] | None = None) -> list[Any]:
        try:
            with self._reader.read() as conn:
                return list(conn.execute(text(sql), params or {}).all())
        except Exception as exc:
            if self._reader.missing(exc):
                return []
            raise


def _record(row: Any) -> TokenRecord:
    token_id, name, _hash, labels, may_write, admin, created_at, revoked_at = row
    return TokenRecord(
        token_id, name, tuple(json.loads(labels)), bool(may_write), bool(admin), created_at, revoked_at
    )
