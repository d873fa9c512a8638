"""botocore's data loader, made cheap for a process that is started afresh for every query.

Spark starts a new Python process for every streaming query's planner, and its first botocore client
is a fixed cost of each query. Two parts of that cost are botocore's data loader, not the client:
- it decodes its JSON files (endpoints.json alone is 1.2 MB) with the standard library and an
  `OrderedDict` for every object, several times slower than orjson (dicts keep their order; botocore's
  models ask nothing more of them);
- to make one client it lists every service directory botocore ships (about 440, for each model type
  it loads, some 900 directory listings in all), only to ask whether the one service it wants is
  among them.
`ConnectorLoader` keeps botocore's `Loader` and its search paths (AWS_DATA_PATH, ~/.aws/models, the
models botocore ships) and changes only these two: files are decoded by orjson, and the list of
services with a model answers `name in ...` by looking in that service's own directory; it lists every
service only when asked for more (iterated, counted, indexed: botocore's error for an unknown service
names them all). Together about 0.02 CPU-s of every query's start: `bash scripts/bench.sh planner`
(docs/performance.md, `bench-planner`).
"""

from __future__ import annotations

import gzip
import os
from collections.abc import Iterator, Sequence
from typing import Any, overload

import orjson
from botocore.exceptions import DataNotFoundError
from botocore.loaders import JSONFileLoader, Loader

# What botocore reads, in its order: a model file may be plain or gzipped.
_EXTENSIONS = (".json", ".json.gz")


def _read(path: str) -> bytes:
    if path.endswith(".gz"):
        with gzip.open(path, "rb") as zipped:
            return zipped.read()
    with open(path, "rb") as plain:
        return plain.read()


class OrjsonFileLoader(JSONFileLoader):
    """botocore's JSON file loader with orjson's decoder (botocore's `exists` looks for the same files)."""

    def load_file(self, file_path: str) -> Any:
        for ext in _EXTENSIONS:
            full = file_path + ext
            if os.path.isfile(full):
                return orjson.loads(_read(full))
        return None


class _ServiceNames(Sequence[str]):
    """The services with a model of one type: whether it holds a name is answered from that service's
    directory; anything else lists them all, once, as botocore's loader does."""

    def __init__(self, loader: ConnectorLoader, type_name: str) -> None:
        self._loader = loader
        self._type_name = type_name
        self._all: list[str] | None = None

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str):
            return False
        try:
            return bool(self._loader.list_api_versions(name, self._type_name))
        except DataNotFoundError:
            return False

    def _names(self) -> list[str]:
        if self._all is None:
            self._all = Loader.list_available_services(self._loader, self._type_name)
        return self._all

    def __iter__(self) -> Iterator[str]:
        return iter(self._names())

    def __len__(self) -> int:
        return len(self._names())

    @overload
    def __getitem__(self, index: int) -> str: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[str]: ...
    def __getitem__(self, index: int | slice) -> str | Sequence[str]:
        return self._names()[index]

    def __repr__(self) -> str:
        return repr(self._names())


class ConnectorLoader(Loader):
    """botocore's `Loader` with orjson's decoder and a list of services that does not list them all to
    find one."""

    def __init__(self, extra_search_paths: list[str] | None = None) -> None:
        super().__init__(extra_search_paths=extra_search_paths, file_loader=OrjsonFileLoader())
        self._service_names: dict[str, _ServiceNames] = {}

    def list_available_services(self, type_name: str) -> Sequence[str]:
        names = self._service_names.get(type_name)
        if names is None:
            names = self._service_names[type_name] = _ServiceNames(self, type_name)
        return names


def create_loader(search_path_string: str | None) -> ConnectorLoader:
    """`botocore.loaders.create_loader` for `ConnectorLoader`: the session's `data_path` (AWS_DATA_PATH)
    comes first, as botocore's own loader has it."""
    if search_path_string is None:
        return ConnectorLoader()
    return ConnectorLoader(
        [os.path.expanduser(os.path.expandvars(path)) for path in search_path_string.split(os.pathsep)]
    )
