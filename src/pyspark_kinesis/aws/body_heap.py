"""Response bodies in memory the process reuses, not in fresh pages: glibc's malloc thresholds, fixed.

A GetRecords body is read whole (whole_body.py): up to about 13 MB of JSON for 10 MB of payload, and
the task's Arrow columns keep slices of it until Spark has taken the batch. glibc's malloc serves an
allocation above its mmap threshold with fresh pages from the kernel, and it returns the top of its
heap to the kernel when more than its trim threshold is free there. Both thresholds move on their own
(the mmap threshold rises to the largest mapped block freed, up to 32 MiB; the trim threshold is twice
it), so whether the next body reuses the last one's memory or faults in and zeroes new pages depends on
what else the process allocated, and where. On the 1,000 MB CPU run (docs/performance.md,
`bench-cpu-memory-1000mb`) the two layouts were a third apart in the executors' reading CPU: one of
them took a minor page fault for every 4 KB of every body, some 80,000 per 200 MB read, with the
kernel's time to match.

So a process whose clients read bodies whole fixes them: blocks up to 32 MiB (the largest glibc
takes, above any body) come from the heap, and up to 128 MiB free at the top of the heap (more than a
shard's read holds at its default byte limit) stay for the next batch instead of being returned. The
price is memory the process keeps between batches, at most what a batch used. Linux with glibc only
(elsewhere, nothing changes); once per process. PYSPARK_KINESIS_MALLOC_TUNING=0 in a process's
environment (spark.executorEnv.*) leaves glibc's thresholds alone.
"""

from __future__ import annotations

import ctypes
import os
import threading

from ..switches import MALLOC_TUNING

# mallopt(3) parameters (malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_B = 32 << 20  # glibc's largest accepted value (DEFAULT_MMAP_THRESHOLD_MAX on 64-bit)
TRIM_THRESHOLD_B = 128 << 20

TUNING = MALLOC_TUNING.on()
_lock = threading.Lock()
_done: bool | None = None  # None: not tried yet; then whether glibc took both thresholds


def keep_body_memory() -> bool:
    """Fix glibc's thresholds for this process, once; whether they are set (False where the C library
    is not glibc, where glibc refused them, or when turned off)."""
    global _done
    with _lock:
        if _done is None:
            _done = TUNING and _set_thresholds()
        return _done


def _set_thresholds() -> bool:
    # (no `platform.libc_ver` or `ctypes.util.find_library`: the one reads the interpreter's binary, the
    # other runs `ldconfig -p`; every client's process pays this once, the planner's too)
    try:
        version = os.confstr("CS_GNU_LIBC_VERSION")  # "glibc 2.36" where the C library is glibc
    except (AttributeError, ValueError, OSError):
        return False
    if not version or not version.startswith("glibc"):
        return False
    mallopt = getattr(ctypes.CDLL(None), "mallopt", None)  # the process's own symbols: its libc's
    if mallopt is None:
        return False
    mapped = mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_B)  # (1 when taken, 0 when refused)
    return bool(mapped) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_B))
