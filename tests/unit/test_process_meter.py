"""The benchmarks' CPU meter counts processes that live and end between its two readings: a tree whose
root starts short-lived children that burn CPU and end (as PySpark's short-lived workers do) is
measured at the CPU the children themselves report, not at what a sampler happened to see."""

from __future__ import annotations

import subprocess
import sys
import time

import psutil
from benchmarks.process_cpu import ProcessMeter

CHILD = """
import time
end = time.process_time() + 0.15
while time.process_time() < end:
    pass
print(time.process_time())
"""
ROOT = f"""
import subprocess, sys
sys.stdin.readline()
total = 0.0
for _ in range(8):
    total += float(subprocess.run([sys.executable, "-c", {CHILD!r}], capture_output=True, text=True).stdout)
print(total, flush=True)
sys.stdin.readline()
"""


def test_processes_that_start_and_end_between_readings_are_counted():
    root = subprocess.Popen(
        [sys.executable, "-c", ROOT], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        time.sleep(0.5)  # the root's own start-up stays outside the measurement
        with ProcessMeter(psutil.Process(root.pid)) as meter:
            root.stdin.write("go\n")
            root.stdin.flush()
            reported = float(root.stdout.readline())  # the children's own CPU, as each measured it
        total = meter.usage.total
        assert reported >= 8 * 0.15
        # Each child's start-up (the interpreter) adds to what it measured of itself; nothing is missed.
        assert reported <= total <= reported + 8 * 0.25, (reported, total)
    finally:
        root.stdin.write("done\n")
        root.stdin.flush()
        root.wait(timeout=30)
