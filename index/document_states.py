"""The states a document's record goes through, named once: cheap to import, so the CLI's options and the
HTTP API's parameters can list them without loading the records' database layer.

`pending` (listed), `processing` (chunked, its batch being written), `processed` (every store holds its
chunks), `failed` (its error recorded; the chunks of its last success, if any, stay stored)."""

from __future__ import annotations

from typing import Literal

State = Literal["pending", "processing", "processed", "failed"]
STATES: tuple[State, ...] = ("pending", "processing", "processed", "failed")
