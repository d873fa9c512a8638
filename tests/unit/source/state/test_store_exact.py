"""The batch-end store pinned exactly (src/pyspark_kinesis/source/state/store.py): the start-up probe's
every outcome and message, both backends' keys, listings and deletes, and which backend a location
gets. The fsspec backend runs on fsspec's in-memory filesystem (a real fsspec filesystem with an
exclusive 'xb' open), so these run without S3; the S3 race itself is an integration test."""

from __future__ import annotations

import os
import uuid

import pytest

from pyspark_kinesis.errors import OptionError
from pyspark_kinesis.source.state import store as store_module
from pyspark_kinesis.source.state.store import FsspecStore, LocalStore, _one_line, open_store

CANNOT_WRITE_FIX = (
    "Point metadataPath at a directory this user can create and write, on durable storage "
    "(a local or mounted path, or s3:// with s3fs installed: pip install 'pyspark-kinesis[s3]')."
)


def memory_store(tmp_path) -> FsspecStore:
    """A fresh in-memory root per test (fsspec's memory filesystem is shared by the whole process)."""
    return FsspecStore(f"memory://store-{tmp_path.name}-{uuid.uuid4().hex}")


class Overwriting(LocalStore):
    """Storage without exclusive create: every write wins."""

    def put_if_absent(self, key: str, data: bytes) -> bool:
        super().put_if_absent(key, data) or self._overwrite(key, data)
        return True

    def _overwrite(self, key: str, data: bytes) -> bool:
        with open(self._path(key), "wb") as handle:
            handle.write(data)
        return True


class Refusing(LocalStore):
    """Storage that refuses every write with an error spread over several lines."""

    def __init__(self, root: str, exc: BaseException) -> None:
        super().__init__(root)
        self.exc = exc

    def put_if_absent(self, key: str, data: bytes) -> bool:
        raise self.exc


class AlreadyThere(LocalStore):
    """Storage where even a fresh key already holds a record (so nothing can prove it writes)."""

    def put_if_absent(self, key: str, data: bytes) -> bool:
        return False


class Recording(LocalStore):
    """Remembers each write and each delete, to pin the probe's keys."""

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self.writes: list[tuple[str, bytes, bool]] = []
        self.deleted: list[str] = []

    def put_if_absent(self, key: str, data: bytes) -> bool:
        wrote = super().put_if_absent(key, data)
        self.writes.append((key, data, wrote))
        return wrote

    def delete(self, key: str) -> None:
        self.deleted.append(key)
        super().delete(key)


# -- the start-up probe ---------------------------------------------------------------------------------


def test_the_probe_writes_one_key_twice_keeps_the_first_and_deletes_only_it(tmp_path):
    store = Recording(str(tmp_path))
    store.check_writable()
    (key, first, wrote), (again, second, wrote_again) = store.writes
    assert key == again and key.startswith("_probe/") and len(key) == len("_probe/") + 32
    assert (first, wrote, second, wrote_again) == (b"probe", True, b"second", False)
    assert store.deleted == [key] and store.get(key) is None


def test_a_store_without_exclusive_create_is_refused_with_what_to_use(tmp_path):
    with pytest.raises(OptionError) as info:
        Overwriting(str(tmp_path)).check_writable()
    assert info.value.option == "metadataPath"
    assert str(info.value) == (
        "Kinesis option 'metadataPath': its storage does not refuse a second create of the same record (no "
        "exclusive create: an S3-compatible service without conditional writes, or a filesystem that "
        "overwrites), so two attempts of a task could both record a batch's end. Use storage with exclusive "
        "create: a local or network filesystem path, or Amazon S3 (conditional writes) through s3fs."
    )


def test_a_store_that_overwrites_still_has_its_probe_key_removed(tmp_path):
    with pytest.raises(OptionError):
        Overwriting(str(tmp_path)).check_writable()
    assert LocalStore(str(tmp_path)).list_records("_probe") == []


@pytest.mark.parametrize(
    "exc, shown",
    [
        (OSError("disk\n  full"), "OSError: disk full"),
        (PermissionError("no"), "PermissionError: no"),
        (ValueError("bad\tpath"), "ValueError: bad path"),
        (NotImplementedError("no xb"), "NotImplementedError: no xb"),
    ],
)
def test_a_refused_write_names_the_error_on_one_line(tmp_path, exc, shown):
    with pytest.raises(OptionError) as info:
        Refusing(str(tmp_path), exc).check_writable()
    assert str(info.value) == (
        f"Kinesis option 'metadataPath': cannot write batch-end records there ({shown}). {CANNOT_WRITE_FIX}"
    )
    assert info.value.__cause__ is None and info.value.__suppress_context__


def test_an_error_the_probe_does_not_expect_is_not_hidden(tmp_path):
    with pytest.raises(KeyError):
        Refusing(str(tmp_path), KeyError("x")).check_writable()


def test_a_probe_key_that_already_holds_a_record_is_a_failure_to_write(tmp_path):
    with pytest.raises(OptionError) as info:
        AlreadyThere(str(tmp_path)).check_writable()
    assert str(info.value) == (
        "Kinesis option 'metadataPath': cannot write batch-end records there (OSError: a fresh probe key "
        f"already existed). {CANNOT_WRITE_FIX}"
    )


def test_an_unwritable_local_path_names_the_path_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(OptionError, match=r"cannot write batch-end records there \(NotADirectoryError: "):
        LocalStore(str(blocker / "sub")).check_writable()


def test_the_probe_passes_on_both_backends(tmp_path):
    LocalStore(str(tmp_path)).check_writable()
    memory = memory_store(tmp_path)
    memory.check_writable()
    assert memory.list_records("_probe") == []


# -- an error's text on one line -------------------------------------------------------------------------


def test_one_line_joins_whitespace_and_cuts_at_the_limit():
    assert _one_line(ValueError("  a \n b\t\tc  ")) == "a b c"
    assert _one_line(ValueError("x" * 300)) == "x" * 300
    assert _one_line(ValueError("x" * 301)) == "x" * 297 + "..."
    assert _one_line(ValueError("abcdefgh"), limit=8) == "abcdefgh"
    assert _one_line(ValueError("abcdefghi"), limit=8) == "abcde..."
    assert _one_line(ValueError("")) == ""


# -- which backend a location gets -------------------------------------------------------------------------


def test_a_plain_path_and_a_file_url_get_the_local_store_at_that_path(tmp_path):
    plain = open_store(str(tmp_path / "a"))
    url = open_store(f"file://{tmp_path}/b")
    relative = open_store("relative/dir")
    assert (type(plain), plain.root) == (LocalStore, str(tmp_path / "a"))
    assert (type(url), url.root) == (LocalStore, f"{tmp_path}/b")
    assert (type(relative), relative.root) == (LocalStore, os.path.abspath("relative/dir"))


def test_a_url_with_a_scheme_gets_fsspec_with_its_storage_options(tmp_path, monkeypatch):
    seen = {}

    class Spy(FsspecStore):
        def __init__(self, url, storage_options=None):
            seen.update(url=url, options=storage_options)
            super().__init__(url, storage_options)

    monkeypatch.setattr(store_module, "FsspecStore", Spy)
    opened = open_store(f"memory://open-{tmp_path.name}/meta", {"skip_instance_cache": True})
    assert isinstance(opened, Spy) and opened.root == f"/open-{tmp_path.name}/meta"
    assert seen == {"url": f"memory://open-{tmp_path.name}/meta", "options": {"skip_instance_cache": True}}


def test_a_plain_path_keeps_characters_a_url_would_split_off(tmp_path):
    """'#' and '?' start a URL's fragment and query; in a plain path they are part of a folder name."""
    opened = open_store(str(tmp_path / "meta#1?x"))
    assert opened.root == str(tmp_path / "meta#1?x")


def test_a_one_letter_scheme_is_a_url_off_windows():
    """Only Windows drive letters look like one-letter schemes."""
    assert os.name != "nt"
    assert type(open_store("c://x")) is FsspecStore


# -- the fsspec backend ------------------------------------------------------------------------------------


def test_fsspec_store_passes_storage_options_to_the_filesystem(tmp_path):
    store = FsspecStore(f"memory://opts-{tmp_path.name}", {"an_option": 3})
    assert store.fs.storage_options == {"an_option": 3}


def test_fsspec_store_on_a_filesystem_that_needs_folders_creates_the_records_folder(tmp_path):
    """fsspec's local filesystem, unlike object stores, cannot open a file in a missing folder."""
    store = FsspecStore(f"local://{tmp_path}/meta")
    assert store.put_if_absent("q/batch-1/task.json", b"x") is True
    assert (tmp_path / "meta" / "q" / "batch-1" / "task.json").read_bytes() == b"x"
    assert store.put_if_absent("q/batch-1/task.json", b"y") is False


def test_fsspec_listings_ask_for_details_and_take_names_with_a_trailing_slash(tmp_path):
    """s3fs lists names only unless asked for details, and some filesystems end folder names with '/'."""
    store = memory_store(tmp_path)
    store.put_if_absent("q/batch-1/task.json", b"x")
    store.put_if_absent("q/a.json", b"y")
    real = store.fs

    def ls(path, detail=False):
        entries = real.ls(path, detail=detail)
        if not detail:
            return entries
        return [{**e, "name": e["name"] + "/"} if e["type"] == "directory" else e for e in entries]

    store.fs = _FsWith(real, ls=ls)
    assert (store.list_folders("q"), store.list_records("q")) == (["batch-1"], ["a.json"])


def test_the_install_hint_names_the_scheme_alone(tmp_path):
    with pytest.raises(OptionError, match=r"filesystem for 'nosuchscheme://' \(s3://"):
        FsspecStore("nosuchscheme://bucket/a://b")


def test_fsspec_root_has_no_trailing_slash_and_keys_join_with_one(tmp_path):
    store = FsspecStore(f"memory://trail-{tmp_path.name}/meta/")
    assert store.root == f"/trail-{tmp_path.name}/meta"
    assert store._path("tok/batch-1/task.json") == f"/trail-{tmp_path.name}/meta/tok/batch-1/task.json"


def test_fsspec_store_keeps_the_first_record_and_lists_records_and_folders_apart(tmp_path):
    store = memory_store(tmp_path)
    assert store.put_if_absent("q/a.json", b"1") is True
    assert store.put_if_absent("q/a.json", b"again") is False
    assert store.put_if_absent("q/batch-2/task.json", b"2") is True
    assert store.put_if_absent("q/batch-1/task.json", b"3") is True
    assert store.put_if_absent("q/0.json", b"4") is True
    assert store.get("q/a.json") == b"1" and store.get("q/missing.json") is None
    assert store.list_records("q") == ["0.json", "a.json"]
    assert store.list_folders("q") == ["batch-1", "batch-2"]
    assert store.list_records("nowhere") == [] and store.list_folders("nowhere") == []


def test_fsspec_listings_drop_the_cached_listing_of_that_folder_first(tmp_path):
    """A cached listing would hide records other processes wrote since (s3fs caches listings)."""
    store = memory_store(tmp_path)
    store.put_if_absent("q/a.json", b"1")
    dropped: list[str] = []
    store.fs = _FsWith(store.fs, invalidate_cache=dropped.append)
    assert store.list_records("q") == ["a.json"] and store.list_folders("q/x") == []
    assert dropped == [store._path("q"), store._path("q/x")]


def test_fsspec_deletes_one_record_then_a_folder_and_missing_ones_quietly(tmp_path):
    store = memory_store(tmp_path)
    store.put_if_absent("q/batch-1/a.json", b"1")
    store.put_if_absent("q/batch-1/b.json", b"2")
    store.put_if_absent("q/batch-2/a.json", b"3")
    store.delete("q/batch-1/a.json")
    store.delete("q/batch-1/a.json")
    assert store.list_records("q/batch-1") == ["b.json"]
    store.delete_folder("q/batch-1")
    store.delete_folder("q/batch-1")
    store.delete_folder("nowhere")
    assert store.list_folders("q") == ["batch-2"] and store.get("q/batch-2/a.json") == b"3"


class _FsWith:
    """The real filesystem with some methods replaced (fsspec instances are cached and shared, so
    their methods are not patched in place)."""

    def __init__(self, fs, **replaced) -> None:
        self._fs = fs
        self.__dict__.update(replaced)

    def __getattr__(self, name):
        return getattr(self._fs, name)


def _refusing(tmp_path, exists_after: bool) -> FsspecStore:
    """s3fs maps some refused conditional writes to a plain OSError, not FileExistsError."""
    store = memory_store(tmp_path)
    real = store.fs

    def open_(path, mode="rb", **kwargs):
        if "x" in mode:
            if exists_after:
                real.pipe_file(path, b"the other writer's")
            raise OSError("PreconditionFailed")
        return real.open(path, mode, **kwargs)

    store.fs = _FsWith(real, open=open_)
    return store


def test_fsspec_a_refused_conditional_write_with_the_record_there_lost_the_race(tmp_path):
    store = _refusing(tmp_path, exists_after=True)
    assert store.put_if_absent("q/t.json", b"mine") is False
    assert store.get("q/t.json") == b"the other writer's"


def test_fsspec_a_failed_write_without_a_record_is_raised(tmp_path):
    store = _refusing(tmp_path, exists_after=False)
    with pytest.raises(OSError, match="PreconditionFailed"):
        store.put_if_absent("q/t.json", b"mine")


def test_fsspec_writes_create_the_record_folder(tmp_path):
    store = memory_store(tmp_path)
    assert store.put_if_absent("a/b/c/d.json", b"x") is True
    assert store.list_folders("a/b") == ["c"] and store.list_records("a/b/c") == ["d.json"]


def test_an_unknown_scheme_says_what_to_install(tmp_path):
    with pytest.raises(OptionError) as info:
        FsspecStore("nosuchscheme://bucket/meta")
    message = str(info.value)
    assert "nosuchscheme)" in message  # the filesystem's own words, not another object's
    assert message.startswith(
        "Kinesis option 'metadataPath': cannot open 'nosuchscheme://bucket/meta' (ValueError: "
    )
    assert message.endswith(
        ". Install and configure the filesystem for 'nosuchscheme://' (s3:// needs s3fs: pip install "
        "'pyspark-kinesis[s3]'; hdfs:// needs libhdfs and a Hadoop client), or use a path on a mounted "
        "filesystem. Check metadataStorageOptions if you set it."
    )
    assert info.value.__cause__ is None and info.value.__suppress_context__


# -- the local backend ------------------------------------------------------------------------------------


def test_local_keys_are_paths_under_the_root(tmp_path):
    store = LocalStore(str(tmp_path))
    assert store._path("tok/batch-1/task.json") == os.path.join(str(tmp_path), "tok", "batch-1", "task.json")
    store.put_if_absent("tok/batch-1/task.json", b"x")
    assert (tmp_path / "tok" / "batch-1" / "task.json").read_bytes() == b"x"


def test_local_listing_leaves_out_unfinished_temp_files(tmp_path):
    store = LocalStore(str(tmp_path))
    store.put_if_absent("q/a.json", b"1")
    (tmp_path / "q" / "a.json.0123.tmp").write_bytes(b"half")
    (tmp_path / "q" / "b.tmpx").write_bytes(b"2")
    assert store.list_records("q") == ["a.json", "b.tmpx"]
    assert os.listdir(tmp_path / "q") and store.list_records("q/a.json") == []


def test_local_delete_folder_removes_it_all_and_ignores_a_missing_one(tmp_path):
    store = LocalStore(str(tmp_path))
    store.put_if_absent("q/batch-1/a.json", b"1")
    store.put_if_absent("q/batch-1/sub/b.json", b"2")
    store.put_if_absent("q/batch-2/a.json", b"3")
    store.delete_folder("q/batch-1")
    store.delete_folder("q/batch-1")
    assert not (tmp_path / "q" / "batch-1").exists() and store.list_folders("q") == ["batch-2"]
