"""The batch-end store's own rules, on a real local directory."""

from __future__ import annotations

from pyspark_kinesis.source.state.store import LocalStore


class ProbedMeanwhile(LocalStore):
    """A store whose first probe write lets another query's start-up probe of the same metadataPath
    run in between (two queries starting together)."""

    def __init__(self, root: str, other: LocalStore) -> None:
        super().__init__(root)
        self.other, self.interleaved = other, False

    def put_if_absent(self, key: str, data: bytes) -> bool:
        wrote = super().put_if_absent(key, data)
        if key.startswith("_probe/") and not self.interleaved:
            self.interleaved = True
            self.other.check_writable()
        return wrote


def test_two_queries_probing_one_metadata_path_at_once_both_pass(tmp_path):
    """The probe deleted the whole `_probe` folder, the other query's key included: that query's second
    create then succeeded, and it refused to start ("does not refuse a second create")."""
    ProbedMeanwhile(str(tmp_path), LocalStore(str(tmp_path))).check_writable()
    assert LocalStore(str(tmp_path)).list_records("_probe") == []  # each removed its own key


def test_records_and_folders_are_listed_apart(tmp_path):
    store = LocalStore(str(tmp_path))
    store.put_if_absent("q/a.json", b"1")
    store.put_if_absent("q/batch-1/task.json", b"2")
    assert (store.list_records("q"), store.list_folders("q")) == (["a.json"], ["batch-1"])
    store.delete("q/a.json")
    store.delete("q/a.json")  # gone already: no error
    assert store.list_records("q") == [] and store.list_records("nowhere") == []
