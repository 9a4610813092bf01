"""A leading underscore means private to its module: no module of planner imports another's
private name (`from .x import _name`) or reaches one through a module (`x._name`)."""

from __future__ import annotations

import ast
from pathlib import Path

import planner

ROOT = Path(planner.__file__).parent


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_imports(path: Path, tree: ast.AST) -> list[str]:
    """`from <planner module> import _name` and `<imported planner module>._name` in one file."""
    out, modules = [], set()  # (line, text)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("planner")):
            for alias in node.names:
                if _private(alias.name):
                    out.append((node.lineno, f"imports {alias.name}"))
                else:
                    modules.add(alias.asname or alias.name)
        elif isinstance(node, ast.Import):
            modules.update((a.asname or a.name).split(".")[0] for a in node.names if a.name.startswith("planner"))
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and _private(node.attr) and isinstance(node.value, ast.Name)
                and node.value.id in modules):
            out.append((node.lineno, f"uses {node.value.id}.{node.attr}"))
    return [f"{path.relative_to(ROOT.parent)}:{line} {text}" for line, text in sorted(out)]


def test_no_module_uses_another_modules_private_names():
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        found += private_imports(path, ast.parse(path.read_text(), str(path)))
    assert found == []


def test_the_checker_finds_a_private_import_and_a_private_attribute():
    tree = ast.parse("from .a import _x, y\nfrom . import b\nb._z()\ny._w\n")
    assert private_imports(ROOT / "m.py", tree) == ["planner/m.py:1 imports _x", "planner/m.py:3 uses b._z",
                                                   "planner/m.py:4 uses y._w"]
