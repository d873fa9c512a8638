"""The connector's botocore data loader (aws/model_loader.py) against botocore's own, on the models
botocore ships and on models in an extra search path: the same data, the same services, botocore's
error for an unknown one, and a client made without listing every service directory."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import botocore.session
import pytest
from botocore.exceptions import UnknownServiceError
from botocore.loaders import Loader

from pyspark_kinesis.aws import client
from pyspark_kinesis.aws.model_loader import ConnectorLoader, create_loader


@pytest.mark.parametrize(
    ("service", "type_name"),
    [
        ("kinesis", "service-2"),
        ("kinesis", "endpoint-rule-set-1"),
        ("glue", "service-2"),
        ("sts", "service-2"),
    ],
)
def test_service_models_load_as_botocore_loads_them(service: str, type_name: str) -> None:
    assert ConnectorLoader().load_service_model(service, type_name) == Loader().load_service_model(
        service, type_name
    )


@pytest.mark.parametrize("name", ["endpoints", "partitions", "_retry", "sdk-default-configuration"])
def test_data_files_load_as_botocore_loads_them(name: str) -> None:
    assert ConnectorLoader().load_data(name) == Loader().load_data(name)


def _model_dir(root: Path, service: str, *, zipped: bool) -> None:
    """A copy of Kinesis's model as another service's, in an extra search path."""
    model = Loader().load_service_model("kinesis", "service-2")
    folder = root / service / "2020-01-01"
    folder.mkdir(parents=True)
    text = json.dumps(model).encode()
    if zipped:
        (folder / "service-2.json.gz").write_bytes(gzip.compress(text))
    else:
        (folder / "service-2.json").write_bytes(text)


def test_the_list_of_services_is_botocores_with_the_extra_search_paths(tmp_path: Path) -> None:
    _model_dir(tmp_path, "plain-model", zipped=False)
    _model_dir(tmp_path, "zipped-model", zipped=True)
    ours = ConnectorLoader([str(tmp_path)]).list_available_services("service-2")
    theirs = Loader(extra_search_paths=[str(tmp_path)]).list_available_services("service-2")
    assert "plain-model" in ours and "zipped-model" in ours and "kinesis" in ours
    assert "no-such-service" not in ours and 7 not in ours
    assert list(ours) == theirs and len(ours) == len(theirs) and ours[0] == theirs[0]
    loaded = ConnectorLoader([str(tmp_path)]).load_service_model("zipped-model", "service-2")
    assert loaded["metadata"]["serviceId"] == "Kinesis"


def _session(loader: Loader) -> botocore.session.Session:
    session = botocore.session.Session()
    session.register_component("data_loader", loader)
    return session


def test_a_client_is_made_without_listing_every_service_directory(monkeypatch: pytest.MonkeyPatch) -> None:
    """botocore's loader lists every service directory it ships (about 440) for each model type a
    client loads; the connector's looks in the one service's directory."""
    listed: list[str] = []
    real = os.listdir

    def counting(path: str = ".") -> list[str]:
        listed.append(str(path))
        return real(path)

    session = _session(ConnectorLoader())
    monkeypatch.setattr(os, "listdir", counting)
    session.create_client(
        "kinesis", region_name="us-east-1", aws_access_key_id="a", aws_secret_access_key="b"
    )
    assert listed, "the loader no longer lists any directory: this test would not see a full listing"
    assert len(listed) <= 8, f"{len(listed)} directories listed to make one client"


def test_an_unknown_service_is_botocores_error_naming_the_known_ones() -> None:
    with pytest.raises(UnknownServiceError) as caught:
        _session(ConnectorLoader()).create_client("no-such-service", region_name="us-east-1")
    assert "no-such-service" in str(caught.value) and "kinesis" in str(caught.value)


def test_the_connectors_sessions_use_it_with_the_sessions_data_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _model_dir(tmp_path, "extra-model", zipped=False)
    monkeypatch.setenv("AWS_DATA_PATH", str(tmp_path))
    monkeypatch.setattr(client, "_loader", None)
    loader = client._new_session().get_component("data_loader")
    assert isinstance(loader, ConnectorLoader)
    assert loader.search_paths[0] == str(tmp_path)
    assert "extra-model" in loader.list_available_services("service-2")
    assert create_loader(None).search_paths == Loader().search_paths
