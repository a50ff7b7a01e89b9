"""The checks a webhook must pass before it may start anything: signature, freshness, replay, safe paths.

Two signature schemes are accepted, chosen by the headers a delivery carries:
- ours: `X-Unichunk-Signature: sha256=<hex HMAC of "{timestamp}.{body}">`, `X-Unichunk-Timestamp`, and an
  optional `X-Unichunk-Delivery` id;
- Standard Webhooks (standardwebhooks.com), so senders can use its SDKs: `webhook-id`,
  `webhook-timestamp`, `webhook-signature: v1,<base64 HMAC of "{id}.{timestamp}.{body}">`. Its key is
  UNICHUNK_WEBHOOK_SECRET itself when that is written `whsec_<base64>` (the SDKs' format: decoded, as
  they decode it), else the secret's UTF-8 bytes (a sender passes `whsec_` + base64 of our secret).
Both share the timestamp tolerance and the replay cache (the webhook-id is the delivery id).
Each source may have its own secret (UNICHUNK_WEBHOOK_SECRETS): `authenticate_source` says which source's
secret signed a delivery, and the receiver lets it touch that source only.

Kept apart from the HTTP layer so each check is a plain function that tests can call directly, and so
the receiver reads as the order of the checks. Nothing here talks to Prefect or to any store; the replay
cache's table is `unichunk.replay_cache`'s.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import stat
import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import NamedTuple

from standardwebhooks import Webhook

from unichunk.errors import UnichunkError
from unichunk.settings import SOURCE_NAME_PATTERN

SIGNATURE_PREFIX = "sha256="
# A fixed namespace: the same delivery id maps to the same Prefect event id in every receiver replica.
EVENT_NAMESPACE = uuid.UUID("8d0f6a52-5a0e-4a53-9f5e-3c1c1b7f6e21")

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_DELIVERY_ID = re.compile(r"^[A-Za-z0-9._:\-]{1,128}$")
_DOCUMENT_ID = re.compile(r"^[A-Za-z0-9_:\-][A-Za-z0-9._:\-]{0,127}$")
_SOURCE_SYSTEM = re.compile(SOURCE_NAME_PATTERN)


class WebhookRejected(UnichunkError):
    """A check failed; `status` is the HTTP answer and `reason` the metrics label."""

    def __init__(self, status: int, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.reason = reason
        self.detail = detail


def sign(secret: str, timestamp: str | int, body: bytes) -> str:
    """The `X-Unichunk-Signature` value a sender computes: HMAC-SHA256 over `"{timestamp}.{body}"`."""
    message = str(timestamp).encode() + b"." + body
    return SIGNATURE_PREFIX + hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def verify_signature(
    secret: str, signature: str | None, timestamp: str | None, body: bytes, *, tolerance: float, now: float
) -> tuple[int, str]:
    """Check the HMAC of the raw body and the timestamp's age; return (timestamp, signature hex).

    The timestamp is inside the signed message, so an attacker cannot refresh an old capture, and the
    comparison is constant-time so the signature cannot be guessed byte by byte.
    """
    if not secret:
        raise WebhookRejected(401, "no_secret", "the receiver has no shared secret configured")
    if not signature or not timestamp:
        raise WebhookRejected(
            401, "missing_signature", "X-Unichunk-Signature and X-Unichunk-Timestamp required"
        )
    if not timestamp.isascii() or not timestamp.isdigit() or len(timestamp) > 12:
        raise WebhookRejected(401, "bad_timestamp", "X-Unichunk-Timestamp must be unix seconds")
    if not signature.startswith(SIGNATURE_PREFIX):
        raise WebhookRejected(401, "bad_signature", "signature must be 'sha256=<hex>'")
    expected = sign(secret, timestamp, body)
    if not hmac.compare_digest(expected.encode(), signature.strip().lower().encode()):
        raise WebhookRejected(401, "bad_signature", "signature does not match the body")
    ts = int(timestamp)
    if abs(now - ts) > tolerance:
        raise WebhookRejected(401, "stale_timestamp", f"timestamp is more than {tolerance:.0f} s from now")
    return ts, expected[len(SIGNATURE_PREFIX) :]


def check_delivery_id(delivery: str | None, header: str = "X-Unichunk-Delivery") -> str | None:
    """A delivery id is optional but, when sent, must be a short token (it becomes a cache key)."""
    if delivery is None:
        return None
    if not _DELIVERY_ID.match(delivery):
        raise WebhookRejected(422, "bad_delivery_id", f"{header} must match [A-Za-z0-9._:-]{{1,128}}")
    return delivery


class Authenticated(NamedTuple):
    """What a verified delivery leaves for the replay check and the event id."""

    timestamp: int
    signature_hex: str
    delivery: str | None


def authenticate(
    secret: str, headers: Mapping[str, str], body: bytes, *, tolerance: float, now: float
) -> Authenticated:
    """Verify a delivery by whichever scheme its headers use (ours first when both are sent).

    `headers` must look names up case-insensitively (Starlette's do). Every failure is a `WebhookRejected`
    (401 or 422), whatever the header values: they come from the network.
    """
    if headers.get("x-unichunk-signature") is None and headers.get("webhook-signature") is not None:
        return verify_standard_webhook(
            secret,
            headers.get("webhook-id"),
            headers.get("webhook-timestamp"),
            headers.get("webhook-signature"),
            body,
            tolerance=tolerance,
            now=now,
        )
    timestamp, signature_hex = verify_signature(
        secret,
        headers.get("x-unichunk-signature"),
        headers.get("x-unichunk-timestamp"),
        body,
        tolerance=tolerance,
        now=now,
    )
    return Authenticated(timestamp, signature_hex, check_delivery_id(headers.get("x-unichunk-delivery")))


def authenticate_source(
    secrets: Sequence[tuple[str | None, str]],
    headers: Mapping[str, str],
    body: bytes,
    *,
    tolerance: float,
    now: float,
) -> tuple[str | None, Authenticated]:
    """Verify a delivery against each configured secret (`secrets`: (source name, its secret) pairs, a
    None source for a secret that signs for any source); the source whose secret signed it comes back with it, the only
    source the delivery may touch. Each comparison is constant-time; only a signature mismatch moves on
    to the next secret (a missing header or a stale timestamp is refused at once, whoever signed)."""
    refusal = WebhookRejected(401, "no_secret", "the receiver has no shared secret configured")
    for source, secret in secrets:
        try:
            return source, authenticate(secret, headers, body, tolerance=tolerance, now=now)
        except WebhookRejected as exc:
            if exc.reason != "bad_signature":
                raise
            refusal = exc
    raise refusal


def standard_webhook_key(secret: str) -> bytes:
    """The HMAC key Standard Webhooks senders sign with, from UNICHUNK_WEBHOOK_SECRET (see the docstring)."""
    if secret.startswith("whsec_"):
        encoded = secret.removeprefix("whsec_")
        try:
            return base64.b64decode(encoded + "=" * (-len(encoded) % 4), validate=True)
        except (binascii.Error, ValueError):
            raise WebhookRejected(
                401, "no_secret", "UNICHUNK_WEBHOOK_SECRET starts with whsec_ but the rest is not base64"
            ) from None
    return secret.encode()


def verify_standard_webhook(
    secret: str,
    msg_id: str | None,
    timestamp: str | None,
    signature: str | None,
    body: bytes,
    *,
    tolerance: float,
    now: float,
) -> Authenticated:
    """Check a Standard Webhooks signature with the SDK's own `Webhook.sign`, against our clock and tolerance.

    Not `Webhook.verify`: it reads the wall clock with a fixed 5-minute tolerance and raises bare
    ValueErrors on some malformed headers; the headers are parsed here and only the signing is the SDK's.
    """
    if not secret:
        raise WebhookRejected(401, "no_secret", "the receiver has no shared secret configured")
    if not msg_id or not timestamp or not signature:
        raise WebhookRejected(
            401, "missing_signature", "webhook-id, webhook-timestamp and webhook-signature required"
        )
    delivery = check_delivery_id(msg_id, "webhook-id")
    if not timestamp.isascii() or not timestamp.isdigit() or len(timestamp) > 12:
        raise WebhookRejected(401, "bad_timestamp", "webhook-timestamp must be unix seconds")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise WebhookRejected(401, "bad_signature", "a Standard Webhooks body must be UTF-8") from None
    ts = int(timestamp)
    if abs(now - ts) > tolerance:  # first: a far-off timestamp is no datetime at all (year > 9999)
        raise WebhookRejected(401, "stale_timestamp", f"timestamp is more than {tolerance:.0f} s from now")
    signed = Webhook(standard_webhook_key(secret)).sign(msg_id, datetime.fromtimestamp(ts, UTC), text)
    expected = signed.partition(",")[2].encode()
    offered = [part.partition(",") for part in signature.split()]
    if not any(
        version == "v1" and hmac.compare_digest(expected, value.encode("utf-8", "replace"))
        for version, _, value in offered
    ):
        raise WebhookRejected(401, "bad_signature", "no webhook-signature v1 entry matches the body")
    return Authenticated(ts, base64.b64decode(expected).hex(), delivery)


def event_id_for(delivery: str | None, signature_hex: str) -> uuid.UUID:
    """Deterministic Prefect event id: a retried delivery yields the same id, which Prefect dedups."""
    return uuid.uuid5(EVENT_NAMESPACE, f"delivery:{delivery}" if delivery else f"signature:{signature_hex}")


def _reject_unsafe_text(field: str, value: str) -> None:
    if _CONTROL.search(value):
        raise WebhookRejected(422, "unsafe_path", f"{field} contains NUL or control characters")


def _has_dotdot(value: str) -> bool:
    return ".." in PurePosixPath(value.replace("\\", "/")).parts


def check_document_id(value: str) -> str:
    """Document ids become resource ids and file names downstream: a strict token, never a path."""
    _reject_unsafe_text("document_id", value)
    if not _DOCUMENT_ID.match(value) or ".." in value:
        raise WebhookRejected(422, "unsafe_path", "document_id must be a token like doc_0123abcd...")
    return value


def check_source_system(value: str) -> str:
    _reject_unsafe_text("source_system", value)
    if not _SOURCE_SYSTEM.match(value):
        raise WebhookRejected(422, "unsafe_path", "source_system must match [A-Za-z0-9][A-Za-z0-9._-]{0,63}")
    return value


def check_source_id(value: str) -> str:
    """Source ids are often relative paths ("docs/a.md"): allowed, but never absolute nor climbing up."""
    _reject_unsafe_text("source_id", value)
    if not value or len(value) > 1024:
        raise WebhookRejected(422, "unsafe_path", "source_id must be 1-1024 characters")
    if _has_dotdot(value) or _is_absolute(value):
        raise WebhookRejected(422, "unsafe_path", "source_id must be relative and must not contain '..'")
    return value


def _is_absolute(value: str) -> bool:
    return (
        PurePosixPath(value).is_absolute() or PureWindowsPath(value).is_absolute() or value.startswith("\\")
    )


def resolve_source_path(value: str, root: Path | None) -> Path:
    """Resolve `value` (relative to `root`, or absolute) and require it to stay inside `root`.

    Resolving follows symlinks, so a link pointing out of the root is refused like a literal '..'.
    Without a configured root no path is accepted: the safe default for a receiver on a network.
    """
    _reject_unsafe_text("path", value)
    if not value or len(value) > 4096:
        raise WebhookRejected(422, "unsafe_path", "path must be 1-4096 characters")
    if _has_dotdot(value):
        raise WebhookRejected(422, "unsafe_path", "path must not contain '..'")
    if root is None:
        raise WebhookRejected(422, "unsafe_path", "no UNICHUNK_SOURCE_ROOT configured: paths are refused")
    base = root.resolve()
    candidate = Path(value)
    resolved = (candidate if candidate.is_absolute() else base / candidate).resolve()
    if not resolved.is_relative_to(base):
        raise WebhookRejected(422, "unsafe_path", "path is outside the allowed source root")
    return resolved


def check_regular_file(path: Path) -> None:
    """An `updated` event must name a file that can be ingested now: a regular file (a symlink to one is
    fine, it was resolved inside the root), not a directory, a FIFO, a device or nothing."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise WebhookRejected(422, "not_a_file", f"no such file in the source root: {path.name}") from None
    except OSError as exc:
        raise WebhookRejected(422, "not_a_file", f"cannot read {path.name}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(mode):
        kind = "a directory" if stat.S_ISDIR(mode) else "not a regular file"
        raise WebhookRejected(422, "not_a_file", f"{path.name or path} is {kind}")


def replay_keys(
    signature_hex: str, delivery: str | None, timestamp: int, *, tolerance: float, now: float
) -> dict[str, float]:
    """Keys to remember and until when: a signature can only be replayed while its timestamp is fresh."""
    keys = {f"sig:{signature_hex}": max(timestamp, now) + tolerance}
    if delivery:
        keys[f"dlv:{delivery}"] = now + tolerance
    return keys
