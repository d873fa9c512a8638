"""One running query per metadataPath: the driver of the query that holds it renews a `live` record,
and a query with another token that finds a fresh one refuses to start (two queries would share the
default fan-out consumer, named after metadataPath, and each other's records). A live record names its
process: one on this host whose process is gone (a driver killed and restarted here) does not hold
metadataPath, and a new query collects the folders such dead queries left before Spark logged any of
their batches.
"""

from __future__ import annotations

import time

import orjson

from ...errors import CheckpointMismatchError
from .layout import LOGGED_NAME, batch_folder, source_key
from .processes import process_gone, this_process
from .store import BatchEndStore

LIVE_EVERY_S = 20.0  # a running query's driver renews its `live` record this often...
LIVE_FOR_S = 90.0  # ...and one not renewed for this long belongs to a query that is gone


class LiveRecords:
    """The `live` records of the queries under one metadataPath (a part of `batch_log.BatchEndLog`)."""

    store: BatchEndStore
    location: str  # metadataPath as the user gave it, for messages

    def beat(self, token: str) -> str:
        """Renew the running query's `live` record (and drop its older ones); returns its path. It names
        this process, so that a query on this host can tell a driver that was killed (`_ended`)."""
        now = int(time.time() * 1000)
        folder = f"{token}/live"
        self.store.put_if_absent(f"{folder}/{now:015d}.json", orjson.dumps(this_process()))
        for name in self.store.list_records(folder):
            if name.endswith(".json") and name[:-5].isdigit() and int(name[:-5]) < now:
                self.store.delete(f"{folder}/{name}")
        return f"{folder}/{now:015d}.json"

    def claim(self, token: str) -> None:
        """Run as the query with `token`, alone on metadataPath: beat first, so that of two queries
        claiming at once at least one sees the other; a refused claim withdraws its beat (left there,
        it would make the query holding metadataPath look shared for `LIVE_FOR_S` seconds, and
        refuse that query's own restart)."""
        beat = self.beat(token)
        try:
            self.check_alone(token)
        except CheckpointMismatchError:
            self.store.delete(beat)
            raise

    def check_alone(self, token: str) -> None:
        """Fail clearly if a query with another token ran under this metadataPath in the last
        `LIVE_FOR_S` seconds."""
        now = int(time.time() * 1000)
        for other in self.store.list_folders(""):
            if other == token or other.startswith("_"):
                continue
            last = self._last_beat(other)
            if now - last < LIVE_FOR_S * 1000 and not self._ended(other, last):
                raise CheckpointMismatchError(
                    f"metadataPath '{self.location}' is in use by another running query (token {other}, "
                    f"last seen {max(0, now - last) // 1000} s ago). Give every query its own metadataPath "
                    "(they would share the same enhanced fan-out consumer and records folder). If that "
                    f"query has stopped, start again after {int(LIVE_FOR_S)} s (at once on the host it ran on)."
                )

    def _last_beat(self, token: str) -> int:
        """When the query with `token` last renewed its live record (0: never, or long gone)."""
        beats = [n[:-5] for n in self.store.list_records(f"{token}/live") if n[:-5].isdigit()]
        return max((int(b) for b in beats), default=0)

    def _ended(self, token: str, beat: int) -> bool:
        """Whether the process that wrote that live record is known to be gone: it ran on this host and
        no such process runs now (a driver killed here and restarted)."""
        raw = self.store.get(f"{token}/live/{beat:015d}.json")
        info = orjson.loads(raw) if raw else {}
        return bool(info) and process_gone(info)

    def mark_logged(self, token: str) -> None:
        """Spark logged the query's first batch (it asks for that batch's tasks only after logging it):
        a checkpoint names the query now, and its folder is never collected as abandoned, whatever
        its tasks recorded. Before, a query that stopped between Spark's log of its first batch and the
        first task's record lost its folder to the next query started on the same metadataPath."""
        self.store.put_if_absent(f"{batch_folder(token, 0)}/{LOGGED_NAME}", b"{}")

    def collect_abandoned(self, token: str) -> list[str]:
        """Delete what queries left that no checkpoint can name: a query whose driver is gone (no fresh
        live record, or its process gone from this host) before Spark logged its first batch (killed
        after its first planning: its restart began a new query; no task recorded an end, and the
        driver never handed out the batch's tasks, `mark_logged`). Returns their tokens."""
        now, gone = int(time.time() * 1000), []
        for other in self.store.list_folders(""):
            if other == token or other.startswith("_") or not self.store.get(source_key(other)):
                continue
            last = self._last_beat(other)
            if now - last < LIVE_FOR_S * 1000 and not self._ended(other, last):
                continue
            batches = [n for n in self.store.list_folders(other) if n.startswith("batch-")]
            if batches and (batches != [batch_folder(other, 0).split("/")[1]] or self._named(other)):
                continue
            self.store.delete_folder(other)
            gone.append(other)
        return gone

    def _named(self, token: str) -> bool:
        """A checkpoint names the query: its first batch was logged, or a task of it recorded an end."""
        names = self.store.list_records(batch_folder(token, 0))
        return LOGGED_NAME in names or any(n.startswith("task-") for n in names)
