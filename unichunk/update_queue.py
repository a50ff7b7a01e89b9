"""The webhook update queue, for the receiver: the application layer's door to `unichunk.index.update_queue`.

The receiver (`unichunk.deployments.service.webhook`) records each accepted `updated` webhook here before it
fires the event, so the run that next takes the store lock applies it with every other update waiting
(`unichunk.engine.queued_updates`); it never touches the records' database itself.
"""

from __future__ import annotations

from unichunk.index.update_queue import UpdateQueue
from unichunk.settings import SinkSettings


def open_update_queue(records: SinkSettings) -> UpdateQueue:
    """The queue of the data dir these settings name (`webhook/updates.db` under it, or the server-mode
    database's `unichunk` schema)."""
    return UpdateQueue.of(records)
