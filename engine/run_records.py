"""Which process runs each in-process flow run of a data dir, so a run whose process was killed (SIGKILL,
the OOM killer, a closed laptop) is marked Crashed instead of showing Running in the Prefect UI for good.

A flow run writes `<data_dir>/runs/<flow run id>.json` (its process, `unichunk.index.process_identity`)
when it starts and removes it when it ends, however it ends short of SIGKILL. `mark_crashed` (called by the
next run and by `unichunk status`, through the application layer) looks at the records left: a run whose
process is gone and whose Prefect state is not final is set Crashed (Prefect's public client,
`set_flow_run_state`); its record goes. A record of a live process, or one the Prefect API cannot be asked
about now, stays for next time. Served runs are a worker's; Prefect's runner marks those itself.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import asdict
from pathlib import Path
from uuid import UUID

from unichunk.index.process_identity import ProcessIdentity

RUNS_FOLDER = "runs"


def records_dir(data_dir: Path) -> Path:
    return Path(data_dir) / RUNS_FOLDER


@contextmanager
def recording_flow_run(data_dir: Path, *, create: bool = True) -> Iterator[None]:
    """For a flow's body: this flow run's process recorded under the data dir, the record removed at the
    end. Without `create` (a dry run, which creates no data dir) nothing is recorded in a data dir that does
    not exist yet."""
    from prefect.runtime import flow_run

    run_id = flow_run.get_id()
    if not run_id or not (create or Path(data_dir).is_dir()):
        yield
        return
    folder = records_dir(data_dir)
    path = folder / f"{run_id}.json"
    record: Path | None = None
    for _ in range(2):  # twice: another run's end may remove the empty folder between mkdir and write
        try:
            folder.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(asdict(ProcessIdentity.current())))
            record = path
            break
        except OSError:  # a read-only data dir still runs: only the crash marking is lost
            continue
    try:
        yield
    finally:
        if record is not None:
            record.unlink(missing_ok=True)
            with suppress(OSError):  # an empty folder goes too: a server-mode data dir keeps nothing
                folder.rmdir()


def orphaned(data_dir: Path) -> list[tuple[Path, ProcessIdentity]]:
    """The records of flow runs whose process is gone (cheap: no Prefect, no network)."""
    folder = records_dir(data_dir)
    if not folder.is_dir():
        return []
    gone: list[tuple[Path, ProcessIdentity]] = []
    for path in sorted(folder.glob("*.json")):
        try:
            identity = ProcessIdentity(**json.loads(path.read_text()))
        except (OSError, ValueError, TypeError):
            path.unlink(missing_ok=True)  # unreadable: nothing can be told from it
            continue
        if identity.is_gone():
            gone.append((path, identity))
    return gone


def mark_crashed(data_dir: Path) -> list[str]:
    """Mark Crashed every flow run of this data dir whose process is gone but which Prefect (the API this
    thread's settings name) still holds for not finished; returns their IDs. Records whose process is gone
    are removed once Prefect has answered (a run that ended in a final state anyway needs nothing)."""
    gone = orphaned(data_dir)
    if not gone:
        return []
    from prefect import get_client
    from prefect.exceptions import ObjectNotFound
    from prefect.states import Crashed

    marked: list[str] = []
    with get_client(sync_client=True) as client:
        for path, identity in gone:
            run_id = path.stem
            try:
                found = client.read_flow_run(UUID(run_id))
            except (ValueError, ObjectNotFound):  # not a run ID, or a run this API does not know
                path.unlink(missing_ok=True)
                continue
            except Exception:  # the API cannot answer now: asked again next time
                continue
            if found.state is not None and not found.state.is_final():
                message = (
                    f"the process running it (pid {identity.pid}) ended without finishing the run "
                    "(killed); marked by a later unichunk command"
                )
                with suppress(Exception):
                    client.set_flow_run_state(UUID(run_id), Crashed(message=message), force=True)
                    marked.append(run_id)
            path.unlink(missing_ok=True)
    return marked
