"""Every `PYSPARK_KINESIS_*` environment switch, declared once: its key, default and what it does.

Why one place: the connector changes how the user's processes run in a few ways (the garbage
collector's frozen generation, botocore's data loader, body reads and the sink's PutRecords encoding),
each worth having an off switch for when it misbehaves on someone's platform, and a few things can
only be set per process (the log level, the fan-out relay's address). Read in five files at import,
they were found by grepping; declared here, docs/operations.md's table is generated from them (a test
compares it) and a switch cannot be read under a name nobody documented.

Switches are environment variables, not source options, because they act on a process before any
query's options reach it (at import, or before botocore loads); executors get them through
`spark.executorEnv.<KEY>`. Only the standard library here: every layer reads it, the fan-out agent
and the CLI included.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Switch:
    key: str
    default: str
    doc: str

    def value(self) -> str:
        """The switch's value in this process's environment (stripped), or its default."""
        return os.environ.get(self.key, self.default).strip()

    def on(self) -> bool:
        """For an on/off switch: anything but "0" is on; set but empty is its default."""
        return (self.value() or self.default) != "0"


GC_FREEZE = Switch(
    "PYSPARK_KINESIS_GC_FREEZE",
    "1",
    "0 turns off `gc.freeze()` in the planner process (before botocore loads) and in executor workers "
    "(after each new client), which keeps PySpark's and botocore's long-lived objects out of the full "
    "collections PySpark's daemon runs after every task.",
)
STOCK_BOTOCORE = Switch(
    "PYSPARK_KINESIS_STOCK_BOTOCORE",
    "0",
    "1 uses botocore's own data loader, its own reading of response bodies (in 64 KB pieces) and its own "
    "validation, encoding and parsing of the sink's PutRecords calls instead of the connector's faster "
    "ones; GetRecords bodies still go to the connector's decoder.",
)
LOG_LEVEL = Switch(
    "PYSPARK_KINESIS_LOG_LEVEL",
    "",
    "INFO, DEBUG...: the connector's log lines at that level go to the process's stderr (Spark keeps it "
    "in its logs); unset, only what the process's own logging configuration shows.",
)
AGENT_HOST = Switch(
    "PYSPARK_KINESIS_AGENT_HOST",
    "",
    "The address an executor's fan-out agent listens on for other executors' reads (default: "
    "SPARK_LOCAL_IP, else the host name resolved); a wildcard turns the relay off.",
)
NPM_DIR = Switch(
    "PYSPARK_KINESIS_NPM_DIR",
    "",
    "Where `pyspark-kinesis local` installs the local Kinesis servers (default: "
    "~/.cache/pyspark-kinesis/npm).",
)

SWITCHES = (GC_FREEZE, STOCK_BOTOCORE, LOG_LEVEL, AGENT_HOST, NPM_DIR)


def markdown_table() -> str:
    """docs/operations.md's table of switches (a test compares it with the page)."""
    rows = [f"| `{s.key}` | {f'`{s.default}`' if s.default else '(unset)'} | {s.doc} |" for s in SWITCHES]
    return "\n".join(["| switch | default | what it does |", "|---|---|---|", *rows]) + "\n"
