"""Where each record of the batch-end log lies under metadataPath (see `batch_log` for what each is
for): one folder per query, named by its token, and one folder per batch in it. Names only: reading
and writing them is `batch_log`'s and `liveness`'s."""

from __future__ import annotations


def batch_folder(token: str, batch: int) -> str:
    return f"{token}/batch-{batch:012d}"


def task_name(task: int) -> str:
    return f"task-{task:05d}.json"


def task_key(token: str, batch: int, task: int) -> str:
    return f"{batch_folder(token, batch)}/{task_name(task)}"


def loss_key(token: str, batch: int, task: int) -> str:
    return f"{batch_folder(token, batch)}/loss-task-{task:05d}.json"


def planned_key(token: str, batch: int) -> str:
    return f"{batch_folder(token, batch)}/planned.json"


READ_NAME = "read.json"
LOGGED_NAME = "logged.json"  # (first batch only) Spark logged it: see `liveness.LiveRecords.mark_logged`


def read_key(token: str, batch: int) -> str:
    return f"{batch_folder(token, batch)}/{READ_NAME}"


QUIET_PREFIX = "quiet-"


def quiet_key(token: str, batch: int, at_ms: int) -> str:
    return f"{batch_folder(token, batch)}/{QUIET_PREFIX}{at_ms:015d}.json"


def source_key(token: str) -> str:
    return f"{token}/source.json"
