"""Access tokens from Python and for every door: create, list, revoke, and resolve a bearer token to the
`Principal` a request runs as.

The storage is `unichunk.index.tokens` (hashes only, in the records store: SQLite in the data dir, or
PostgreSQL in server mode). `Tokens.principal` is what the doors call per request: the service's own admin
token (`UNICHUNK_API_TOKEN`) first, then a stored token looked up afresh, so a revoked token is refused by
the very next request of a running service. Anything else resolves to None, which a door answers 401.
"""

from __future__ import annotations

import hmac
from collections.abc import Sequence
from pathlib import Path

from unichunk.access import AccessDenied, Principal
from unichunk.index.errors import TokenError
from unichunk.index.tokens import TOKEN_PREFIX, TokenRecord, TokenStore
from unichunk.sinks.config import SinkSettings

__all__ = [
    "ADMIN_TOKEN_NAME",
    "TOKEN_PREFIX",
    "TokenError",
    "TokenRecord",
    "Tokens",
    "principal_of",
]

# The principal of the service's configured admin token (UNICHUNK_API_TOKEN): it has no stored record.
ADMIN_TOKEN_NAME = "api-token"


def principal_of(record: TokenRecord) -> Principal:
    """The principal a stored token names (its id travels for audit lines, never its secret)."""
    return Principal(
        name=record.name,
        labels=record.labels,
        may_write=record.may_write,
        admin=record.admin,
        token_id=record.id,
    )


class Tokens:
    """The tokens of one data dir (`settings`, default: `UNICHUNK_*`; or `data_dir`), and the service's
    admin token when one is configured (`admin_token`)."""

    def __init__(
        self,
        settings: SinkSettings | None = None,
        *,
        data_dir: str | Path | None = None,
        admin_token: str | None = None,
    ) -> None:
        base = settings or SinkSettings()
        if data_dir is not None:
            base = base.model_copy(update={"data_dir": Path(data_dir).expanduser().resolve()})
        self.store = TokenStore(base)
        self._admin = (admin_token or "").encode("utf-8", "surrogatepass")

    def create(
        self,
        labels: Sequence[str] = (),
        *,
        name: str | None = None,
        may_write: bool = False,
        admin: bool = False,
    ) -> tuple[str, TokenRecord]:
        """A new token (the only time it is ever shown) and its record. `labels`: what it may read;
        `may_write`: ingest, delete, rebuild; `admin`: everything, status and verify included."""
        return self.store.create(labels, name=name, may_write=may_write, admin=admin)

    def list(self) -> list[TokenRecord]:
        """Every token, revoked ones too (never a token or its hash)."""
        return self.store.all()

    def revoke(self, id_or_name: str) -> TokenRecord:
        """Revoke a token by id or name; a running service refuses it from its next request."""
        return self.store.revoke(id_or_name)

    def required(self) -> bool:
        """Whether callers must show a token: an admin token is configured, or a token was ever created,
        revoked ones included (until then a loopback-only service is open, its caller the owner; once
        tokens closed it, revoking them all does not open it again)."""
        return bool(self._admin) or self.store.any_made()

    def principal(self, token: str) -> Principal | None:
        """Who `token` is: the admin token's principal, a live stored token's, or None (refuse: 401)."""
        given = token.encode("utf-8", "surrogatepass")
        if self._admin and hmac.compare_digest(given, self._admin):
            return Principal(name=ADMIN_TOKEN_NAME, may_write=True, admin=True)
        record = self.store.resolve(token)
        return principal_of(record) if record is not None else None

    @classmethod
    def caller(
        cls, settings: SinkSettings, principal: Principal | None = None, token: str | None = None
    ) -> Principal | None:
        """Whom an adapter's or a library caller's Pipeline should run as: `principal` as given, else the
        principal `token` names in `settings`' data dir (`AccessDenied` when it names nobody: not a
        ValueError, which pydantic models would wrap, quoting their input, the token, in the error), else
        None (the Pipeline's own, the owner)."""
        if principal is not None and token is not None:
            raise TypeError("give a principal or a token, not both")
        if token is None:
            return principal
        found = cls(settings).principal(token)
        if found is None:
            raise AccessDenied("the token is unknown or revoked (`unichunk tokens list` shows the live ones)")
        return found

    @staticmethod
    def token_id(token: str) -> str | None:
        """The public id inside a well-formed token (for audit lines), else None."""
        return TokenStore.token_id(token)
