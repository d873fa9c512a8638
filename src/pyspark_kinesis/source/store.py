"""The durable batch-end store: where tasks record where each shard stopped in a batch.

The reader is not told the query's checkpoint location, so these records live under the user's
`metadataPath`. Two properties carry exactly-once: a record is written *atomically* (a reader never
sees half of one) and *exclusively* (the first task attempt to record a batch's end wins, and every
other attempt, retry or speculative copy, adopts the winner's end). The interface is a handful of methods so
that other backends (S3 conditional writes, HDFS) fit behind it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from abc import ABC, abstractmethod
from urllib.parse import urlparse

import fsspec

from ..errors import OptionError


class BatchEndStore(ABC):
    """Keys are relative '/'-separated paths such as '<token>/batch-000000000003/task-00001.json'."""

    @abstractmethod
    def put_if_absent(self, key: str, data: bytes) -> bool:
        """Write `data` at `key` atomically unless a record is there; True when this call wrote it."""

    @abstractmethod
    def get(self, key: str) -> bytes | None:
        """The record at `key`, or None."""

    @abstractmethod
    def delete_folder(self, prefix: str) -> None:
        """Remove a folder of records (garbage collection of batches no restart can need)."""

    @abstractmethod
    def list_folders(self, prefix: str) -> list[str]:
        """Names of sub-folders directly under `prefix`, sorted (batch folders, for garbage collection)."""

    def check_writable(self) -> None:
        """Prove at query start that records can be written here, so the first batch cannot fail on it."""
        key = f"_probe/{uuid.uuid4().hex}"
        try:
            if not self.put_if_absent(key, b"probe"):
                raise OSError("a fresh probe key already existed")
            self.delete_folder("_probe")
        except OSError as exc:
            raise OptionError(
                "metadataPath",
                f"cannot write batch-end records there ({exc.__class__.__name__}: {exc})",
                "Point metadataPath at a directory this user can create and write, on durable storage.",
            ) from None


class LocalStore(BatchEndStore):
    """A local (or mounted network) filesystem. Atomic + exclusive through link(2) of a complete temp file."""

    def __init__(self, root: str) -> None:
        self.root = os.path.abspath(root)

    def _path(self, key: str) -> str:
        return os.path.join(self.root, *key.split("/"))

    def put_if_absent(self, key: str, data: bytes) -> bool:
        path = self._path(key)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{uuid.uuid4().hex}.tmp"
        with open(tmp, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        try:
            os.link(tmp, path)  # fails if `path` exists: the first writer wins
            return True
        except FileExistsError:
            return False
        finally:
            os.unlink(tmp)

    def get(self, key: str) -> bytes | None:
        try:
            with open(self._path(key), "rb") as handle:
                return handle.read()
        except FileNotFoundError:
            return None

    def list_folders(self, prefix: str) -> list[str]:
        folder = self._path(prefix)
        try:
            return sorted(n for n in os.listdir(folder) if os.path.isdir(os.path.join(folder, n)))
        except FileNotFoundError:
            return []

    def delete_folder(self, prefix: str) -> None:
        shutil.rmtree(self._path(prefix), ignore_errors=True)


class FsspecStore(BatchEndStore):
    """Any fsspec filesystem whose 'xb' open is exclusive and whose objects appear whole on close
    (object stores such as S3 with conditional writes). Chosen for URLs with a scheme."""

    def __init__(self, url: str) -> None:
        self.fs, self.root = fsspec.core.url_to_fs(url)
        self.root = self.root.rstrip("/")

    def _path(self, key: str) -> str:
        return f"{self.root}/{key}"

    def put_if_absent(self, key: str, data: bytes) -> bool:
        path = self._path(key)
        self.fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
        try:
            with self.fs.open(path, "xb") as handle:
                handle.write(data)
            return True
        except FileExistsError:
            return False

    def get(self, key: str) -> bytes | None:
        try:
            return self.fs.cat_file(self._path(key))
        except FileNotFoundError:
            return None

    def list_folders(self, prefix: str) -> list[str]:
        try:
            entries = self.fs.ls(self._path(prefix), detail=True)
        except FileNotFoundError:
            return []
        return sorted(e["name"].rstrip("/").rsplit("/", 1)[-1] for e in entries if e["type"] == "directory")

    def delete_folder(self, prefix: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm(self._path(prefix), recursive=True)


def open_store(location: str) -> BatchEndStore:
    """A plain path or file:// URL gets the link(2)-based store; other schemes go through fsspec."""
    parsed = urlparse(location)
    if parsed.scheme in ("", "file") or (len(parsed.scheme) == 1 and os.name == "nt"):
        return LocalStore(parsed.path if parsed.scheme == "file" else location)
    return FsspecStore(location)
