"""A JVM data source named "kinesis", as Databricks Runtime ships one: for the tests of what the
format's name becomes beside it (classic and Spark Connect sessions)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from tests.helpers import client, missing_tool, new_stream, put
from tests.support.cluster import spark_home

# The session in its own process that registers the format and reads and writes under its name
# (classic, with the JVM source's jar, or remote: a Spark Connect server).
APP = Path(__file__).resolve().parents[1] / "integration" / "format_names_app.py"

SOURCE = """package test.fake;

import org.apache.spark.sql.sources.DataSourceRegister;

/** A JVM data source that takes the short name "kinesis", as Databricks Runtime's Kinesis source does. */
public class KinesisNamedSource implements DataSourceRegister {
  @Override
  public String shortName() {
    return "kinesis";
  }
}
"""


def build_kinesis_named_jar(work: Path) -> str:
    """The jar of a JVM data source whose short name is "kinesis" (built with javac against PySpark's
    own jars), or a skip where no JDK compiler is installed (a failure in CI)."""
    javac = shutil.which("javac")
    if javac is None:
        missing_tool("no JDK compiler (javac) on this machine to build the JVM source named 'kinesis'")
    source = work / "src" / "test" / "fake" / "KinesisNamedSource.java"
    source.parent.mkdir(parents=True)
    source.write_text(SOURCE)
    classes = work / "classes"
    subprocess.run(
        [javac, "-cp", str(Path(spark_home()) / "jars" / "*"), "-d", str(classes), str(source)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    jar = work / "kinesis-named.jar"
    with zipfile.ZipFile(jar, "w") as out:
        out.write(
            classes / "test" / "fake" / "KinesisNamedSource.class", "test/fake/KinesisNamedSource.class"
        )
        out.writestr(
            "META-INF/services/org.apache.spark.sql.sources.DataSourceRegister",
            "test.fake.KinesisNamedSource\n",
        )
    return str(jar)


def run_app(cfg: dict) -> dict:
    done = subprocess.run(
        [sys.executable, str(APP), json.dumps(cfg)], capture_output=True, text=True, timeout=300
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, f"exit {done.returncode}:\n{done.stderr[-3000:]}"
    result = json.loads(lines[-1][len("RESULT ") :])
    result["log"] = done.stderr
    return result


def scenario(endpoint: str, tmp_path: Path, **extra) -> tuple[dict, list[str]]:
    kin = client(endpoint)
    stream, target = new_stream(kin, shards=2), new_stream(kin, shards=1)
    expected = put(kin, stream, 0, 30)
    cfg = {
        "endpoint": endpoint,
        "stream": stream,
        "target": target,
        "meta": str(tmp_path / "meta"),
        "out": str(tmp_path / "out"),
        "checkpoint": str(tmp_path / "cp"),
        **extra,
    }
    return cfg, expected
