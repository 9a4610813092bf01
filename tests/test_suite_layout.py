"""The shape of the test suite: the benchmarks stand on the package alone (the oracle they share with
the tests is planner.verify.oracle), a fixture name means one fixture, and `make test-fast` leaves
out exactly the marked slow and integration tests."""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def imported_modules(source: str) -> set[str]:
    """Every module an `import` or `from ... import` names, anywhere in the source (relative ones
    with their leading dots)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            out.add("." * node.level + (node.module or ""))
    return out


def fixture_names(source: str) -> list[str]:
    """The module-level functions decorated with pytest.fixture (called or not)."""
    names = []
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef):
            for decorator in node.decorator_list:
                target = decorator.func if isinstance(decorator, ast.Call) else decorator
                if isinstance(target, ast.Attribute) and target.attr == "fixture":
                    names.append(node.name)
    return names


def test_benchmarks_import_nothing_from_the_tests():
    found = sorted(f"{path.name} imports {module}" for path in (ROOT / "benchmarks").glob("*.py")
                   for module in imported_modules(path.read_text())
                   if module == "tests" or module.startswith(("tests.", ".")))
    assert found == []


def test_each_fixture_name_is_defined_in_one_place():
    where: dict[str, list[str]] = defaultdict(list)
    for path in sorted((ROOT / "tests").glob("*.py")):
        for name in fixture_names(path.read_text()):
            where[name].append(path.name)
    assert {name: files for name, files in where.items() if len(files) > 1} == {}


def test_the_checks_find_an_import_of_the_tests_and_a_fixture_defined_twice():
    assert imported_modules("def f():\n    from tests.oracle import brute_force\nimport os\n") == {"tests.oracle", "os"}
    assert fixture_names("import pytest\n@pytest.fixture(scope='module')\ndef a(): ...\n"
                         "@pytest.fixture\ndef b(): ...\ndef c(): ...\n") == ["a", "b"]


def test_make_test_fast_leaves_out_the_slow_and_integration_markers_it_registers():
    makefile = (ROOT / "Makefile").read_text()
    recipe = re.search(r"^test-fast:.*\n\t(.+)$", makefile, re.MULTILINE)
    assert recipe and '-m "not slow and not integration"' in recipe.group(1)
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert re.search(r'^\s*"slow: ', pyproject, re.MULTILINE)
    assert re.search(r'^\s*"integration: ', pyproject, re.MULTILINE)
