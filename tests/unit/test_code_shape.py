"""The code keeps the shape a newcomer can hold in mind (issue #64): no executor or fan-out agent class
with more than 10 attributes of its own state, no function over 60 lines outside the decoder's hot
path. Both are read from the source's syntax tree, so a class or function added tomorrow is checked."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[2] / "src" / "pyspark_kinesis"
MAX_ATTRIBUTES = 10
MAX_FUNCTION_LINES = 60
# The GetRecords body scanner: one loop over the JSON bytes, kept whole because a call per field costs
# a measurable share of a read's CPU (docs/performance.md, the decoder's section).
HOT_PATH = {"aws/get_records_scan.py:scan"}


def _decorated(cls: ast.ClassDef, word: str) -> bool:
    return any(word in ast.unparse(d) for d in cls.decorator_list)


def attributes(cls: ast.ClassDef) -> set[str]:
    """What an instance of `cls` keeps: every `self.X` the class's code assigns, and a mutable
    dataclass's fields (a frozen dataclass's are fixed inputs, not state)."""
    names = set()
    for node in ast.walk(cls):
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        else:
            continue
        for target in targets:
            for part in ast.walk(target):
                if (
                    isinstance(part, ast.Attribute)
                    and isinstance(part.value, ast.Name)
                    and part.value.id == "self"
                ):
                    names.add(part.attr)
    if _decorated(cls, "dataclass") and not _decorated(cls, "frozen=True"):
        for statement in cls.body:
            if (
                isinstance(statement, ast.AnnAssign)
                and isinstance(statement.target, ast.Name)
                and "ClassVar" not in ast.unparse(statement.annotation)
            ):
                names.add(statement.target.id)
    return names


def classes(folder: Path) -> dict[str, set[str]]:
    return {
        f"{path.relative_to(PKG)}:{node.name}": attributes(node)
        for path in sorted(folder.rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ClassDef)
    }


@pytest.mark.parametrize("runtime", ["source/executor", "source/agent"])
def test_no_executor_or_agent_class_keeps_more_than_ten_attributes(runtime):
    found = classes(PKG / runtime)
    assert len(found) > 5, "the walk found the classes"
    wide = {name: sorted(names) for name, names in found.items() if len(names) > MAX_ATTRIBUTES}
    assert not wide, f"group these classes' state (fixed inputs apart from a small progress record): {wide}"


def test_the_attribute_count_sees_assignments_anywhere_and_mutable_dataclass_fields():
    tree = ast.parse(
        "@dataclass\nclass A:\n    x: int\n    y: ClassVar[int] = 0\n"
        "    def f(self):\n        self.z = 1\n        self.w += 1\n        self.v: int = 2\n        self.a, self.b = 1, 2\n"
        "@dataclass(frozen=True)\nclass B:\n    x: int\n"
    )
    found = {node.name: attributes(node) for node in ast.walk(tree) if isinstance(node, ast.ClassDef)}
    assert found == {"A": {"x", "z", "w", "v", "a", "b"}, "B": set()}


def test_no_function_is_over_sixty_lines_outside_the_decoders_hot_path():
    long = {}
    for path in sorted(PKG.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                name, lines = f"{path.relative_to(PKG)}:{node.name}", node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES and name not in HOT_PATH:
                    long[name] = lines
    assert not long, f"split these functions: {long}"
    for name in HOT_PATH:  # (the exception names a function that exists, or it hides nothing)
        module, function = name.split(":")
        tree = ast.parse((PKG / module).read_text())
        assert any(isinstance(n, ast.FunctionDef) and n.name == function for n in ast.walk(tree)), name
