"""The durable store under metadataPath, in memory, as the connector's `BatchEndStore`: first writer wins,
atomically. The simulation can kill the writing process right after a write (`crash_after`), and reads
every task record written, for the losses the query said (failOnDataLoss=false)."""

from __future__ import annotations

from collections.abc import Callable

import orjson

from pyspark_kinesis.source.state.offsets import TaskEnd
from pyspark_kinesis.source.state.store import BatchEndStore


class SimCrash(BaseException):
    """The process that was running (an executor, the driver) dies here: nothing it did not make durable
    survives. A BaseException: the connector's handlers of its own failures must not catch it."""


class SimStore(BatchEndStore):
    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}
        self.crash_after: Callable[[str], bool] | None = None  # a write of this key kills the writer
        self.on_task_record: Callable[[TaskEnd], None] | None = None
        self.on_loss_note: Callable[[dict], None] | None = None

    def put_if_absent(self, key: str, data: bytes) -> bool:
        if key in self.data:
            return False
        self.data[key] = data
        name = key.rsplit("/", 1)[-1]
        if name.startswith("task-") and self.on_task_record is not None:
            self.on_task_record(TaskEnd.from_json(orjson.loads(data)))
        if name.startswith("loss-task-") and self.on_loss_note is not None:
            self.on_loss_note(orjson.loads(data))
        if self.crash_after is not None and self.crash_after(key):
            raise SimCrash(f"killed right after writing {key}")
        return True

    def get(self, key: str) -> bytes | None:
        return self.data.get(key)

    def delete(self, key: str) -> None:
        self.data.pop(key, None)

    def delete_folder(self, prefix: str) -> None:
        for key in [k for k in self.data if k.startswith(prefix + "/")]:
            del self.data[key]

    def _under(self, prefix: str) -> list[str]:
        lead = f"{prefix}/" if prefix else ""
        return [k[len(lead) :] for k in self.data if k.startswith(lead)]

    def list_folders(self, prefix: str) -> list[str]:
        return sorted({rest.split("/")[0] for rest in self._under(prefix) if "/" in rest})

    def list_records(self, prefix: str) -> list[str]:
        return sorted(rest for rest in self._under(prefix) if "/" not in rest)
