"""Access tokens: kept only as hashes in the records store (SQLite embedded, PostgreSQL in server mode),
resolved to the principal they name, refused once revoked; nothing else a caller sends ever authenticates."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from unichunk.chunking.access_labels import BadLabel
from unichunk.tokens import TokenError, Tokens


def _stored_bytes(records_settings) -> bytes:  # type: ignore[no-untyped-def]
    """Everything the token table holds, as text: what a thief of the database would read."""
    rows = Tokens(records_settings).store._rows("SELECT * FROM tokens")
    return repr(rows).encode()


def test_a_token_resolves_to_its_principal_and_only_its_hash_is_stored(records_settings):
    tokens = Tokens(records_settings)
    assert tokens.list() == [] and tokens.principal("uck_0123456789abcdef_" + "a" * 43) is None
    token, record = tokens.create(["HR", "eng", "hr"], name="alice")
    assert token.startswith(f"uck_{record.id}_")
    principal = tokens.principal(token)
    assert principal is not None
    assert (principal.name, principal.labels, principal.may_write, principal.admin, principal.token_id) == (
        "alice",
        ("eng", "hr"),
        False,
        False,
        record.id,
    )
    writer_token, writer = tokens.create(name="bot", may_write=True)
    assert tokens.principal(writer_token).may_write and writer.labels == ()
    admin_token, admin = tokens.create(admin=True)
    assert admin.name == admin.id and tokens.principal(admin_token).admin and admin.may_write

    stored = _stored_bytes(records_settings)
    for secret in (token, writer_token, admin_token):
        assert secret.encode() not in stored and secret.split("_", 2)[2].encode() not in stored
    assert hashlib.sha256(token.encode()).hexdigest().encode() in stored  # the hash, and nothing more
    assert {r.name for r in tokens.list()} == {"alice", "bot", admin.id}


def test_a_revoked_token_is_refused_at_once_by_id_or_name(records_settings):
    tokens = Tokens(records_settings)
    token, record = tokens.create(["eng"], name="ci")
    other, _ = tokens.create(["eng"])
    seen_by_another_process = Tokens(records_settings)  # a running service's own instance
    assert seen_by_another_process.principal(token) is not None
    revoked = tokens.revoke("ci")
    assert revoked.revoked and revoked.id == record.id
    assert seen_by_another_process.principal(token) is None
    assert tokens.principal(other) is not None
    assert tokens.revoke(record.id).revoked_at == revoked.revoked_at  # again: a no-op
    with pytest.raises(TokenError, match="no such token"):
        tokens.revoke("nobody")
    with pytest.raises(TokenError, match="exists already"):
        tokens.create(name="ci")  # a revoked name stays taken: `revoke NAME` names one token


def test_bad_names_and_labels_are_refused_before_anything_is_stored(records_settings):
    tokens = Tokens(records_settings)
    with pytest.raises(TokenError, match="bad token name"):
        tokens.create(name="has space")
    with pytest.raises(BadLabel):
        tokens.create(["not a label"])
    assert tokens.list() == []


def test_the_admin_token_is_an_admin_who_may_write(records_settings):
    tokens = Tokens(records_settings, admin_token="s3cret-admin")
    principal = tokens.principal("s3cret-admin")
    assert principal is not None and principal.admin and principal.may_write
    assert tokens.principal("s3cret-admi") is None and Tokens(records_settings).principal("") is None


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    guess=st.one_of(
        st.text(),
        st.text(alphabet="0123456789abcdef_-ukcABC", min_size=60, max_size=70).map(lambda s: "uck_" + s),
        st.from_regex(r"uck_[0-9a-f]{16}_[A-Za-z0-9_-]{43}", fullmatch=True),
    )
)
def test_no_guessed_string_authenticates(records_settings, guess):
    """Arbitrary strings, well-formed tokens with random secrets, the live token's id with another
    secret: none resolves to a principal, none raises."""
    tokens = Tokens(records_settings, admin_token="the-admin-token")
    token, record = _one_token(tokens)
    assert tokens.principal(guess) is None or guess == token
    forged = f"uck_{record.id}_{guess.encode('utf-8', 'surrogatepass').hex()[:43].ljust(43, 'A')}"
    assert forged == token or tokens.principal(forged) is None


_MADE: dict[str, tuple[str, object]] = {}


def _one_token(tokens: Tokens):  # type: ignore[no-untyped-def]
    """One live token per test's store, made by the first example (Hypothesis reuses the fixture)."""
    key = str(tokens.store.settings.data_dir) + str(tokens.store.settings.database_url)
    if key not in _MADE:
        _MADE[key] = tokens.create(["eng"])
    return _MADE[key]


def test_tokens_list_in_the_order_they_were_created_even_within_one_second(records_settings):
    """Created back to back (the same second, mostly): listed in creation order, not by their random IDs."""
    tokens = Tokens(records_settings)
    made = [tokens.create(name=f"t{n:02d}")[1].name for n in range(12)]
    assert [record.name for record in tokens.list()] == made
    tokens.revoke("t03")  # a revocation does not move it
    assert [record.name for record in tokens.list()] == made


# The token table as an earlier version made it: no creation counter.
_OLD_TABLE = """
CREATE TABLE IF NOT EXISTS tokens (
    id TEXT PRIMARY KEY, name TEXT NOT NULL UNIQUE, hash TEXT NOT NULL, labels TEXT NOT NULL DEFAULT '[]',
    may_write INTEGER NOT NULL DEFAULT 0, admin INTEGER NOT NULL DEFAULT 0, created_at TEXT NOT NULL,
    revoked_at TEXT
)"""


def test_an_earlier_versions_token_table_stays_readable_and_new_tokens_list_after_its_own(records_settings):
    from sqlalchemy import text

    from unichunk.sinks.database import open_database

    store = Tokens(records_settings).store
    old = open_database(records_settings, store._path)
    old.ensure([_OLD_TABLE])
    with old.write() as conn:
        for token_id, name in (("ffffffffffffffff", "first"), ("0000000000000000", "second")):
            conn.execute(
                text(
                    "INSERT INTO tokens (id, name, hash, created_at) "
                    "VALUES (:id, :name, 'x', '2026-01-01T00:00:00+00:00')"
                ),
                {"id": token_id, "name": name},
            )
    tokens = Tokens(records_settings)
    assert [r.name for r in tokens.list()] == ["second", "first"]  # read as it is (same second: by ID)
    made = [tokens.create(name=f"new{n}")[1].name for n in range(6)]
    assert [r.name for r in tokens.list()] == ["second", "first", *made]
    assert "created_seq" in old.columns("tokens")
