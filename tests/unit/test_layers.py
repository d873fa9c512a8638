"""The import-layer contract: the layout shows the architecture only while nothing crosses its lines.

Read statically from every module's imports (module-level and inside functions alike), plus one
runtime check of what an executor loads when it unpickles a reader and runs a task. Also: the public
API's doctests, and no module past ~400 lines.
"""

from __future__ import annotations

import ast
import doctest
import json
import subprocess
import sys
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[2] / "src" / "pyspark_kinesis"
NAME = "pyspark_kinesis"

# Modules only the driver may load: planning and everything it alone uses.
DRIVER_ONLY = {
    f"{NAME}.source.planning",
    f"{NAME}.source.discovery",
    f"{NAME}.source.lineage",
    f"{NAME}.source.lag",
    f"{NAME}.assign",
}
# What each layer may import from the package (besides itself). Modules not listed are unrestricted.
ALLOWED = {
    "model": set(),
    "errors": set(),
    "assign": set(),
    "config": {"model", "errors"},
    "aws": {"config", "model", "errors"},
    "source": {"aws", "config", "model", "errors", "assign"},
    "sink": {"aws", "config", "model", "errors"},
}
# Executor-side modules of the source: never import a driver-only module, not even lazily.
EXECUTOR = {
    "reading",
    "fetching",
    "fanout",
    "fanout_link",
    "fanout_agent",
    "fanout_hub",
    "cutting",
    "columns",
    "worker_state",
    "deaggregation",
    "faults",
    "schema",
}


def module_name(path: Path) -> str:
    parts = [NAME, *path.relative_to(PKG).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path) -> set[str]:
    """Every package module `path` imports, relative imports resolved (`from . import x` gives x)."""
    mod = module_name(path)
    package = mod if path.name == "__init__.py" else mod.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith(NAME)}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if not target.startswith(NAME):
                continue
            found.add(target)
            for alias in node.names:  # `from . import lineage` imports a module
                candidate = f"{target}.{alias.name}"
                if (PKG.parent / Path(*candidate.split("."))).with_suffix(".py").exists():
                    found.add(candidate)
    return found


def layer(module: str) -> str:
    return module.split(".")[1] if module.count(".") >= 1 else ""


MODULES = sorted(PKG.rglob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PKG)))
def test_layers_import_only_what_sits_below_them(path):
    mod = module_name(path)
    own = layer(mod)
    allowed = ALLOWED.get(own)
    imported = imports_of(path)
    if allowed is not None:
        bad = sorted(m for m in imported if layer(m) not in allowed | {own} and m != NAME)
        assert not bad, f"{mod} ({own}/) may import only {sorted(allowed)}, not {bad}"
    if own != "tools" and mod != f"{NAME}.cli":
        assert not [m for m in imported if layer(m) == "tools"], f"{mod} imports development tools"


@pytest.mark.parametrize("name", sorted(EXECUTOR))
def test_executor_modules_never_import_driver_modules(name):
    imported = imports_of(PKG / "source" / f"{name}.py")
    assert not imported & DRIVER_ONLY, f"source/{name}.py imports {sorted(imported & DRIVER_ONLY)}"


def test_an_executor_loads_no_driver_module():
    """What a Python worker loads to run a task: the reader's module (unpickling) and the task code."""
    code = (
        "import json, sys\n"
        "import pyspark_kinesis.source.readers, pyspark_kinesis.sink.writers\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('pyspark_kinesis'))))\n"
    )
    loaded = set(
        json.loads(
            subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
        )
    )
    assert f"{NAME}.source.reading" in loaded
    assert not loaded & DRIVER_ONLY, f"an executor would load {sorted(loaded & DRIVER_ONLY)}"
    assert not [m for m in loaded if layer(m) == "tools"]


def test_the_layer_check_sees_a_violation():
    """The checker itself: a module of aws/ that imports source/ is found."""
    fake = PKG / "aws" / "_layer_probe.py"
    fake.write_text("from ..source import planning\n")
    try:
        imported = imports_of(fake)
    finally:
        fake.unlink()
    assert f"{NAME}.source.planning" in imported


def test_no_module_is_over_400_lines():
    long = {str(p.relative_to(PKG)): n for p in MODULES if (n := len(p.read_text().splitlines())) > 400}
    assert not long, f"split these modules: {long}"


def test_public_api_doctests_pass():
    import pyspark_kinesis
    from pyspark_kinesis import assign, metrics

    for module in (pyspark_kinesis, assign, metrics):
        result = doctest.testmod(module)
        assert result.failed == 0 and result.attempted > 0
    assert set(pyspark_kinesis.__all__) >= {"register", "KinesisDataSource", "DataLossError", "OptionError"}
    for name in pyspark_kinesis.__all__:
        assert getattr(pyspark_kinesis, name) is not None


def test_only_the_benchmarks_import_boto3():
    """The package depends on botocore alone (boto3 would break `pip check` beside s3fs; see
    aws/client.py); boto3 comes with the [bench] extra for the benchmarks' baselines."""
    users = {
        str(p.relative_to(PKG))
        for p in MODULES
        for node in ast.walk(ast.parse(p.read_text()))
        if (isinstance(node, ast.Import) and any(a.name.split(".")[0] == "boto3" for a in node.names))
        or (isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "boto3")
    }
    assert all(u.startswith("tools/benchmarks/") for u in users), sorted(users)
