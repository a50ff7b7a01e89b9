"""spaCy in a process of its own, so that entity extraction runs beside the embedder instead of after it.

The compiled MiniLM package (`unichunk.sinks.vectors.aot_package`) holds Python's GIL while it runs, so
spaCy in a thread of the same process waits for it, and an ingest ran the two models nearly one after
the other. In a child process spaCy has an interpreter of its own: the graph sink's prepare sends the
texts there and waits on a pipe, which holds no GIL (figures: benchmarks/README.md, "Ingest against
LlamaIndex"; `SinkSettings.spacy_process` says where it is used).

The child is `python -m unichunk.sinks.graph.extraction_worker`, started in a session of its own: a
terminal's Ctrl-C reaches only the parent, which decides, and nothing of the parent's `__main__` is run
again (as multiprocessing's spawn would, in a user's script). It only computes: it is sent texts and sends
back packed extractions (`pack_extraction`), so killing it can lose no stored data. A stop asked of the
parent (`STOP`) kills it at once and the next batch starts a new one; so does a child that died (out of
memory), after one clear error for its batch. It ends by itself once its parent is gone, however the
parent ended.
"""

from __future__ import annotations

import os
import pickle
import select
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from typing import IO, Any

from unichunk.chunking.models import Chunk
from unichunk.sinks.graph.extraction import (
    EntityExtractor,
    Extraction,
    ExtractionError,
    SpacyExtractor,
    pack_extraction,
    unpack_extraction,
)
from unichunk.sinks.stop import STOP

POLL_SECONDS = 0.1  # how often a wait for the child looks at the stop flag
PARENT_POLL_SECONDS = 0.5  # how often the child looks whether its parent is still there


class ProcessExtractor(EntityExtractor):
    """`SpacyExtractor` run in a child process, with the same results and fingerprint (so the extraction
    cache and the graph do not change with where it runs)."""

    name = "spacy"
    composes = True
    reads_code = False

    def __init__(self, inner: SpacyExtractor) -> None:
        self.inner = inner
        self._lock = threading.Lock()  # one batch at a time through the pipe
        self._child: subprocess.Popen[bytes] | None = None

    @property
    def fingerprint(self) -> str:
        return self.inner.fingerprint

    def extract(self, chunks: Sequence[Chunk]) -> list[Extraction]:
        if not chunks:
            return []
        with self._lock:
            blobs = self._call([c.chunk_id for c in chunks], [c.content for c in chunks])
        return [unpack_extraction(blob, c.chunk_id) for blob, c in zip(blobs, chunks, strict=True)]

    def _call(self, chunk_ids: list[str], texts: list[str]) -> list[bytes]:
        child = self._started()
        assert child.stdin is not None and child.stdout is not None
        try:
            _send(child.stdin, (chunk_ids, texts))
            while not select.select([child.stdout], [], [], POLL_SECONDS)[0]:
                if STOP.requested:
                    self.close()  # the batch is abandoned: nothing the child holds is stored
                    STOP.check()
                if child.poll() is not None:
                    break
            status, value = pickle.load(child.stdout)
        except (EOFError, OSError, pickle.UnpicklingError) as exc:
            self.close()
            raise ExtractionError(
                f"the spaCy worker process ended (exit code {child.returncode}): {type(exc).__name__}"
            ) from exc
        if status != "ok":
            raise ExtractionError(value)
        return value

    def _started(self) -> subprocess.Popen[bytes]:
        if self._child is None or self._child.poll() is not None:
            self.close()
            child = subprocess.Popen(
                [sys.executable, "-m", __name__],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                start_new_session=True,  # the terminal's Ctrl-C is the parent's to handle
            )
            assert child.stdin is not None
            _send(child.stdin, self.inner)  # the extractor itself, with its settings
            self._child = child
        return self._child

    def close(self) -> None:
        """End the child (killed: it holds nothing to save); the next `extract` starts another."""
        child, self._child = self._child, None
        if child is None:
            return
        if child.poll() is None:
            child.kill()
        child.wait(5)
        for pipe in (child.stdin, child.stdout):
            if pipe is not None:
                pipe.close()


def _send(pipe: IO[bytes], message: Any) -> None:
    pickle.dump(message, pipe, protocol=pickle.HIGHEST_PROTOCOL)
    pipe.flush()


def _exit_with(parent: int) -> None:
    """End the child once its parent is gone (killed mid-batch, or a second Ctrl-C's immediate exit),
    rather than finish a batch nobody will read."""
    while os.getppid() == parent:
        time.sleep(PARENT_POLL_SECONDS)
    os._exit(0)


def serve() -> None:
    """The child: extract what the parent sends on stdin, replying on stdout, until stdin closes."""
    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # whatever a library prints goes to stderr, never into the replies
    requests = sys.stdin.buffer
    threading.Thread(target=_exit_with, args=(os.getppid(),), name="parent-watch", daemon=True).start()
    extractor: SpacyExtractor = pickle.load(requests)
    while True:
        try:
            chunk_ids, texts = pickle.load(requests)
        except EOFError:  # the parent closed its end
            return
        try:
            made = extractor.extract_texts(chunk_ids, texts)
            reply: tuple[str, Any] = ("ok", [pack_extraction(x) for x in made])
        except Exception as exc:  # the parent raises it for this batch; the child goes on
            reply = ("error", f"{type(exc).__name__}: {exc}")
        try:
            _send(replies, reply)
        except OSError:  # the parent is gone
            return


if __name__ == "__main__":
    serve()
