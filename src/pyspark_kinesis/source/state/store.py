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
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlparse

from ...errors import OptionError


class BatchEndStore(ABC):
    """Keys are relative '/'-separated paths such as '<token>/batch-000000000003/task-00001.json'."""

    @abstractmethod
    def put_if_absent(self, key: str, data: bytes) -> bool:
        """Write `data` at `key` atomically unless a record is there; True when this call wrote it."""

    @abstractmethod
    def get(self, key: str) -> bytes | None:
        """The record at `key`, or None."""

    @abstractmethod
    def delete(self, key: str) -> None:
        """Remove one record, if it is there."""

    @abstractmethod
    def delete_folder(self, prefix: str) -> None:
        """Remove a folder of records (garbage collection of batches no restart can need)."""

    @abstractmethod
    def list_folders(self, prefix: str) -> list[str]:
        """Names of sub-folders directly under `prefix`, sorted (batch folders, for garbage collection)."""

    @abstractmethod
    def list_records(self, prefix: str) -> list[str]:
        """Names of the records (not folders) directly under `prefix`, sorted."""

    def check_writable(self) -> None:
        """Prove at query start that records can be written here, and that the first-writer-wins create
        really is exclusive: a second create of the probe key must be refused. A store that ignores
        exclusive create (an S3-compatible service without conditional writes, a filesystem that
        overwrites) would let two task attempts both "win" and break exactly-once silently."""
        key = f"_probe/{uuid.uuid4().hex}"
        try:
            if not self.put_if_absent(key, b"probe"):
                raise OSError("a fresh probe key already existed")
            exclusive = not self.put_if_absent(key, b"second")
            self.delete(key)  # only its own: another query may be probing the same metadataPath now
        except (OSError, ValueError, NotImplementedError) as exc:
            raise OptionError(
                "metadataPath",
                f"cannot write batch-end records there ({exc.__class__.__name__}: {_one_line(exc)})",
                "Point metadataPath at a directory this user can create and write, on durable storage "
                "(a local or mounted path, or s3:// with s3fs installed: pip install 'pyspark-kinesis[s3]').",
            ) from None
        if not exclusive:
            raise OptionError(
                "metadataPath",
                "its storage does not refuse a second create of the same record (no exclusive create: an "
                "S3-compatible service without conditional writes, or a filesystem that overwrites), so two "
                "attempts of a task could both record a batch's end",
                "Use storage with exclusive create: a local or network filesystem path, or Amazon S3 "
                "(conditional writes) through s3fs.",
            )


def _one_line(exc: BaseException, limit: int = 300) -> str:
    """An underlying error's text on one line, cut to `limit` characters (some span dozens of lines)."""
    text = " ".join(str(exc).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


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
        return self._list(prefix, folders=True)

    def list_records(self, prefix: str) -> list[str]:
        return [n for n in self._list(prefix, folders=False) if not n.endswith(".tmp")]

    def _list(self, prefix: str, *, folders: bool) -> list[str]:
        folder = self._path(prefix)
        try:
            return sorted(n for n in os.listdir(folder) if os.path.isdir(os.path.join(folder, n)) == folders)
        except (FileNotFoundError, NotADirectoryError):
            return []

    def delete(self, key: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._path(key))

    def delete_folder(self, prefix: str) -> None:
        shutil.rmtree(self._path(prefix), ignore_errors=True)


class FsspecStore(BatchEndStore):
    """Any fsspec filesystem whose 'xb' open is exclusive and whose objects appear whole on close
    (object stores such as S3 with conditional writes: s3fs sends If-None-Match). Chosen for URLs with a
    scheme; `storage_options` go to the filesystem (endpoint, profile, region...)."""

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None = None) -> None:
        try:
            import fsspec  # here, not at the top: its import scans every installed package's entry points

            self.fs, self.root = fsspec.core.url_to_fs(url, **dict(storage_options or {}))
        except (ImportError, ValueError, OSError, TypeError, RuntimeError) as exc:
            scheme = url.split("://", 1)[0]
            raise OptionError(
                "metadataPath",
                f"cannot open '{url}' ({exc.__class__.__name__}: {_one_line(exc)})",
                f"Install and configure the filesystem for '{scheme}://' (s3:// needs s3fs: pip install "
                "'pyspark-kinesis[s3]'; hdfs:// needs libhdfs and a Hadoop client), or use a path on a "
                "mounted filesystem. Check metadataStorageOptions if you set it.",
            ) from None
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
        except OSError:
            # A refused conditional write does not always come back as FileExistsError (s3fs maps a
            # PreconditionFailed without its condition, or a ConditionalRequestConflict, to OSError):
            # if the record is there now, another writer won.
            if self.fs.exists(path):
                return False
            raise

    def get(self, key: str) -> bytes | None:
        try:
            return self.fs.cat_file(self._path(key))
        except FileNotFoundError:
            return None

    def list_folders(self, prefix: str) -> list[str]:
        return self._list(prefix, "directory")

    def list_records(self, prefix: str) -> list[str]:
        return self._list(prefix, "file")

    def _list(self, prefix: str, kind: str) -> list[str]:
        try:
            # Fresh listings: a cached one would hide records other processes wrote since.
            self.fs.invalidate_cache(self._path(prefix))
            entries = self.fs.ls(self._path(prefix), detail=True)
        except FileNotFoundError:
            return []
        return sorted(e["name"].rstrip("/").rsplit("/", 1)[-1] for e in entries if e["type"] == kind)

    def delete(self, key: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm_file(self._path(key))

    def delete_folder(self, prefix: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm(self._path(prefix), recursive=True)


def open_store(location: str, storage_options: Mapping[str, Any] | None = None) -> BatchEndStore:
    """A plain path or file:// URL gets the link(2)-based store; other schemes go through fsspec."""
    parsed = urlparse(location)
    if parsed.scheme in ("", "file") or (len(parsed.scheme) == 1 and os.name == "nt"):
        return LocalStore(parsed.path if parsed.scheme == "file" else location)
    return FsspecStore(location, storage_options)
