"""The architecture holds: the import contracts (`lint-imports`, the same command CI runs) and what an
executor loads at run time. Also: the public API's doctests, and no module past ~400 lines."""

from __future__ import annotations

import doctest
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from importlib.metadata import version
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "src" / "pyspark_kinesis"
LINT = Path(sys.executable).with_name("lint-imports")


def lint(src: Path) -> subprocess.CompletedProcess[str]:
    """`lint-imports` with the project's contracts over the package found first in `src`."""
    env = dict(os.environ, PYTHONPATH=str(src), NO_COLOR="1")
    done = subprocess.run(
        [str(LINT), "--config", str(ROOT / "pyproject.toml"), "--no-cache"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    # Older import-linter releases colour their report even when piped: compare plain text.
    done.stdout = re.sub(r"\x1b\[[0-9;]*m", "", done.stdout)
    return done


def test_the_import_contracts_hold():
    done = lint(ROOT / "src")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout


def test_a_violation_inside_a_function_breaks_a_contract(tmp_path):
    """The contracts see imports made inside functions (lazy ones), not only module-level ones: an
    executor module that imports the planner when it runs is caught."""
    copy = tmp_path / "src" / "pyspark_kinesis"
    shutil.copytree(PKG, copy, ignore=shutil.ignore_patterns("__pycache__"))
    task = copy / "source" / "executor" / "task.py"
    task.write_text(
        task.read_text() + "\n\ndef _probe():\n    from ..driver import planner\n\n    return planner\n"
    )
    done = lint(tmp_path / "src")
    report = " ".join(done.stdout.split())
    assert done.returncode != 0
    assert "never imports the driver side BROKEN" in report, done.stdout[-3000:]
    assert "pyspark_kinesis.source.executor.task -> pyspark_kinesis.source.driver.planner" in report


def test_the_drained_read_never_imports_the_bounded_one(tmp_path):
    """`task` and `drain` once imported each other (the tree's one cycle): both now run the protocol
    of `protocol`, and a `drain` that imports `task` again breaks a contract."""
    copy = tmp_path / "src" / "pyspark_kinesis"
    shutil.copytree(PKG, copy, ignore=shutil.ignore_patterns("__pycache__"))
    drain = copy / "source" / "executor" / "drain.py"
    drain.write_text(drain.read_text() + "\n\ndef _probe():\n    from . import task\n\n    return task\n")
    done = lint(tmp_path / "src")
    report = " ".join(done.stdout.split())
    assert done.returncode != 0
    assert "never the reverse BROKEN" in report, done.stdout[-3000:]


def test_a_dynamic_import_is_refused_by_the_linter(tmp_path):
    """importlib hides an import from the contracts: ruff refuses it (TID251) outside assign.py."""
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import importlib\n\nplanner = importlib.import_module('pyspark_kinesis.source.driver.planner')\n"
    )
    done = subprocess.run(
        [
            str(Path(sys.executable).with_name("ruff")),
            "check",
            "--config",
            str(ROOT / "pyproject.toml"),
            str(probe),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode != 0 and "TID251" in done.stdout, done.stdout


def loaded_by(*imports: str) -> set[str]:
    """The connector's modules a fresh interpreter holds after these import statements."""
    code = "\n".join(
        [
            "import json, sys",
            *imports,
            "print(json.dumps([m for m in sys.modules if m.startswith('pyspark_kinesis')]))",
        ]
    )
    done = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    return set(json.loads(done.stdout))


def test_an_executor_loads_no_driver_module():
    """What a Python worker loads to run a task: the reader's module (unpickling), then the task code
    (`read()` imports it)."""
    loaded = loaded_by(
        "import pyspark_kinesis.source.readers, pyspark_kinesis.sink.writers",
        "from pyspark_kinesis.source.executor.task import read_task",
        "from pyspark_kinesis.source.executor.modes import source_for",
    )
    assert "pyspark_kinesis.source.executor.task" in loaded
    driver = sorted(
        m for m in loaded if m.startswith(("pyspark_kinesis.source.driver", "pyspark_kinesis.cli"))
    )
    assert not driver, f"an executor would load {driver}"
    assert "pyspark_kinesis.source.agent.link" not in loaded  # polling never loads fan-out's socket code


def test_the_planners_process_loads_no_reading_code():
    """Spark starts a fresh Python process for every streaming query's planner: what it imports is a
    fixed cost of every query (and of every availableNow run), so the reader's module leaves the
    executor's reading code to `read()`."""
    loaded = loaded_by("import pyspark_kinesis.source.readers, pyspark_kinesis.source.driver.planner")
    assert "pyspark_kinesis.source.driver.planner" in loaded
    reading = sorted(m for m in loaded if m.startswith("pyspark_kinesis.source.executor"))
    assert not reading, f"the planner's process would load {reading}"


def test_a_raw_querys_planning_loads_no_glue_code_nor_pandas():
    """What a query's planner process imports is paid by every query: the glue format's registry and
    codec modules (and pandas, which building an Arrow scalar loads) only when the query uses
    `valueFormat=glue` (its option declarations are light, and every query's options are checked
    against them), and the package's version only when asked for (looking it up scans sys.path)."""
    code = "\n".join(
        [
            "import json, sys",
            "import pyspark_kinesis",
            "assert '__version__' not in vars(pyspark_kinesis)",
            "import pyspark_kinesis.datasource, pyspark_kinesis.source.readers",
            "import pyspark_kinesis.source.value_columns, pyspark_kinesis.source.driver.planner",
            "from pyspark_kinesis.formats import ValueDoesNotFit, codec_of",
            "from pyspark_kinesis.config.value_format import ValueFormat",
            "codec_of(ValueFormat())",
            "from pyspark_kinesis.source.options import parse_options",
            "parse_options({'streamName': 's', 'region': 'us-east-1'}, streaming=False)",
            "heavy = ('pandas', 'pyspark_kinesis.values.glue', 'pyspark_kinesis.aws.glue')",
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith(heavy))))",
        ]
    )
    done = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    assert json.loads(done.stdout) == []
    import pyspark_kinesis

    assert pyspark_kinesis.__version__ == version("pyspark-kinesis")


def test_a_planners_clients_load_no_getrecords_decoder():
    """A query's planner makes clients and reads no records (unless it looks at an idle shard): the
    decoder's pyarrow.compute and msgspec load with the first GetRecords response parsed, not with
    the client (aws/response_parser.py)."""
    code = "\n".join(
        [
            "import json, sys",
            "import pyspark_kinesis.datasource, pyspark_kinesis.source.readers",
            "import pyspark_kinesis.source.driver.planner, pyspark_kinesis.source.driver.discovery",
            "from pyspark_kinesis.aws import client",
            "from pyspark_kinesis.config.aws_settings import AwsSettings",
            "settings = AwsSettings('us-east-1', 'http://127.0.0.1:9', access_key_id='a', secret_key='b')",
            "made = client.kinesis_client(settings)",
            "loaded = lambda: sorted(m for m in sys.modules if m in ('pyarrow.compute', 'msgspec') or 'get_records' in m)",
            "before = loaded()",
            "parser = made._endpoint._response_parser_factory.create_parser('json')",
            "shape = made.meta.service_model.operation_model('GetRecords').output_shape",
            'body = b\'{"Records": [], "NextShardIterator": "i", "MillisBehindLatest": 0}\'',
            "parsed = parser.parse({'body': body, 'headers': {}, 'status_code': 200}, shape)",
            "print(json.dumps([before, loaded(), len(parsed['Records'])]))",
        ]
    )
    done = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    before, after, records = json.loads(done.stdout)
    assert before == []
    assert "pyspark_kinesis.aws.get_records" in after and records == 0  # loaded by the first parse


def test_no_module_is_over_400_lines():
    long = {
        str(p.relative_to(PKG)): n
        for p in sorted(PKG.rglob("*.py"))
        if (n := len(p.read_text().splitlines())) > 400
    }
    assert not long, f"split these modules: {long}"


def test_public_api_doctests_pass():
    import pyspark_kinesis
    from pyspark_kinesis import assign, kpl, metrics

    for module in (pyspark_kinesis, assign, metrics, kpl):
        result = doctest.testmod(module)
        assert result.failed == 0 and result.attempted > 0
    assert set(pyspark_kinesis.__all__) >= {"register", "KinesisDataSource", "DataLossError", "OptionError"}
    for name in pyspark_kinesis.__all__:
        assert getattr(pyspark_kinesis, name) is not None


def test_the_command_without_its_extra_says_what_to_install():
    """typer and rich are the [cli] extra: the connector Spark imports needs neither."""
    code = "import sys\nsys.modules['typer'] = None\nfrom pyspark_kinesis.cli import main\nmain()\n"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 1 and "pip install 'pyspark-kinesis[cli]'" in done.stderr, done.stderr


def test_the_connector_imports_without_the_command_line_libraries():
    code = (
        "import sys\nsys.modules['typer'] = sys.modules['rich'] = None\n"
        "import pyspark_kinesis.datasource, pyspark_kinesis.source.executor.task, pyspark_kinesis.metrics\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)


def test_pyspark_is_an_extra_not_a_requirement():
    """Databricks and EMR put their PySpark on the path without pip knowing it: a requirement would make
    pip fetch PyPI's pyspark over theirs."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert not [d for d in project["dependencies"] if d.lower().startswith("pyspark")]
    assert project["optional-dependencies"]["spark"] == ["pyspark>=4.0,<5"]


def test_registering_without_a_pyspark_4_says_what_is_needed():
    code = (
        "import sys\nsys.modules['pyspark.sql.datasource'] = None\nimport pyspark_kinesis\n"
        "pyspark_kinesis.register(object())\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 1, done.stderr
    assert "pyspark-kinesis needs PySpark 4.0 or later" in done.stderr, done.stderr
    assert (
        "pip install 'pyspark-kinesis[spark]'" in done.stderr
        and "importing pyspark.sql.datasource" in done.stderr
    )
