"""A JVM data source named "kinesis", as Databricks Runtime ships one: for the tests of what the
format's name becomes beside it (classic and Spark Connect sessions)."""

from __future__ import annotations

import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from tests.support.cluster import spark_home

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
    own jars), or a skip where no JDK compiler is installed."""
    javac = shutil.which("javac")
    if javac is None:
        pytest.skip("no JDK compiler (javac) on this machine to build the JVM source named 'kinesis'")
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
