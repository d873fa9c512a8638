"""Shared fixtures: real local Kinesis servers on loopback and a real SparkSession.

Dummy credentials are set before anything imports boto3 (both local servers reject unsigned calls),
and the instance metadata probe is off, so nothing ever leaves 127.0.0.1.
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("AWS_ACCESS_KEY_ID", "000000000000")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "local-test-secret")
os.environ["AWS_EC2_METADATA_DISABLED"] = "true"
os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"  # Spark itself stays on loopback too
os.environ.setdefault("AWS_REGION", "us-east-1")
os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable

import pytest

from pyspark_kinesis.cli.local_kinesis import LocalKinesis


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--suite",
        choices=("default", "slow", "all"),
        default="default",
        help="default: every test but those marked slow (the README's test command, 15-37 min on 2 cores); "
        "slow: only those (driver and executor kills, the standalone cluster, the chaos smoke run); all: both. "
        "A test named by its file::name id runs whatever the suite",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The slow tests (a minute or more each) are their own run, so the default one stays short. CI
    runs the default suite, a `slow` job of the slow tests that fit its budget, and in its version jobs
    a few slow tests by name (docs/testing.md#ci)."""
    suite = config.getoption("--suite")
    if suite == "all":
        return
    named = tuple(arg for arg in config.args if "::" in arg)  # a test named on the command line runs
    keep, drop = [], []
    for item in items:
        slow = item.get_closest_marker("slow") is not None
        wanted = slow == (suite == "slow") or (named and item.nodeid.startswith(named))
        (keep if wanted else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.fixture(scope="session")
def kinesis_local():
    with LocalKinesis("kinesis-local") as server:
        yield server


@pytest.fixture(scope="session")
def kinesalite():
    with LocalKinesis("kinesalite") as server:
        yield server


@pytest.fixture(scope="session", params=["kinesis-local", "kinesalite"])
def any_kinesis(request):
    """Both implementations, for the core read tests."""
    return request.getfixturevalue(request.param.replace("-", "_"))


@pytest.fixture(scope="session")
def spark():
    from pyspark.sql import SparkSession

    import pyspark_kinesis

    session = (
        SparkSession.builder.master("local[2]")
        .appName("pyspark-kinesis-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    pyspark_kinesis.register(session)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def local_sts():
    from tests.localsts import LocalSts

    with LocalSts() as server:
        yield server


@pytest.fixture(scope="session")
def local_s3():
    """moto's server on 127.0.0.1 as an S3 endpoint (it honours conditional writes, If-None-Match)."""
    from tests.localsts import LocalSts

    with LocalSts() as server:
        yield server
