"""Bodies in memory the process reuses (aws/body_heap.py), in a fresh interpreter each: two 13 MB
blocks (two GetRecords bodies of 10 MB of payload) made, written and freed again and again take no
page faults once glibc's thresholds are fixed; left to glibc, the freed top of the heap goes back to
the kernel and every round faults its pages in afresh. Off with PYSPARK_KINESIS_MALLOC_TUNING=0 or
with stock botocore; an executor's worker sets it at a task's start (process_tuning)."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc's malloc only"
)

PROBE = r"""
import json, resource, sys
from pyspark_kinesis.aws.body_heap import keep_body_memory
if sys.argv[1] == "worker":
    from pyspark_kinesis.aws.process_tuning import prepare_worker_process
    prepare_worker_process()  # (a task's start in an executor's Python worker)
    from pyspark_kinesis.aws import body_heap
    kept = body_heap._done  # what preparing the worker did, nothing asked here
elif sys.argv[1] == "set":
    kept = keep_body_memory()
else:
    kept = None
SIZE = 13 << 20
def bodies():
    first = bytearray(SIZE)
    first[::4096] = b"x" * len(range(0, SIZE, 4096))
    second = bytearray(SIZE)
    second[::4096] = b"x" * len(range(0, SIZE, 4096))
bodies()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(10):
    bodies()
print(json.dumps({"kept": kept, "faults": resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before}))
"""

PAGES_PER_ROUND = 2 * (13 << 20) // 4096


def probe(how: str, **env: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, how],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        env={k: v for k, v in os.environ.items() if k != "PYSPARK_KINESIS_MALLOC_TUNING"} | env,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_left_to_glibc_every_round_faults_its_pages_in_again() -> None:
    """The pattern the tests below rely on: without the thresholds it faults (else they prove nothing)."""
    assert probe("untouched")["faults"] > 5 * PAGES_PER_ROUND


def test_with_the_thresholds_fixed_the_bodies_reuse_their_memory() -> None:
    out = probe("set")
    assert out["kept"] is True
    assert out["faults"] < PAGES_PER_ROUND // 10, out


def test_a_worker_prepared_for_a_task_fixes_them() -> None:
    out = probe("worker")
    assert out["kept"] is True and out["faults"] < PAGES_PER_ROUND // 10, out


def test_a_worker_on_stock_botocore_keeps_glibcs_own() -> None:
    """Stock botocore reads bodies in 64 KB pieces: no whole bodies to keep memory for."""
    out = probe("worker", PYSPARK_KINESIS_STOCK_BOTOCORE="1")
    assert out["kept"] is None, out


def test_turned_off_glibc_keeps_its_own() -> None:
    out = probe("set", PYSPARK_KINESIS_MALLOC_TUNING="0")
    assert out["kept"] is False and out["faults"] > 5 * PAGES_PER_ROUND, out
