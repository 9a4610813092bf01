"""The shape of the package: no import cycles, nothing imports the CLI, and only the CLI
(planner/cli/) uses click or exits. Imports are read with `ast` from every module of planner/,
at module level and inside functions (also under `if TYPE_CHECKING:`), so a lazy import
cannot hide a cycle."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Callable

PACKAGE_DIR = Path(__file__).resolve().parent.parent / "planner"
CLI = "planner.cli"

# Cycles that another branch removes; each entry must still be a cycle (test below), so the
# entry is deleted when that branch is merged.
KNOWN_CYCLES: set[frozenset[str]] = set()  # none: keep it so


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def package_sources(root: Path = PACKAGE_DIR) -> dict[str, tuple[str, bool]]:
    """module name -> (source, is a package __init__) for every .py file under root."""
    return {module_name(p, root): (p.read_text(), p.name == "__init__.py") for p in sorted(root.rglob("*.py"))}


def imports_of(name: str, source: str, is_package: bool, modules: set[str]) -> set[str]:
    """The modules of `modules` that module `name` imports, anywhere in its source. `from X
    import y` imports X.y where that is a module, else X."""
    package = name if is_package else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                origin = ".".join(base + ([node.module] if node.module else []))
            else:
                origin = node.module or ""
            targets = [f"{origin}.{alias.name}" if f"{origin}.{alias.name}" in modules else origin
                       for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in modules:  # `import planner.x.y` of a name inside x
                target = target.rpartition(".")[0]
            if target and target != name:
                out.add(target)
    return out


def import_graph(sources: dict[str, tuple[str, bool]]) -> dict[str, set[str]]:
    modules = set(sources)
    return {name: imports_of(name, src, is_pkg, modules) for name, (src, is_pkg) in sources.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each strongly connected component of more than one module (modules that all reach each
    other), as one shortest cycle through its first module, sorted. The component's modules:
    components()."""
    return sorted(_cycle_through(graph, c) for c in components(graph))


def components(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def visit(v: str) -> None:  # Tarjan
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(component)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return [frozenset(c) for c in components]


def _cycle_through(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """A shortest cycle from the component's first module back to it, within the component."""
    start = min(component)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & component):
                if w == start:
                    return paths[v] + [start]
                if w not in paths:
                    paths[w] = paths[v] + [w]
                    nxt.append(w)
        frontier = nxt
    raise AssertionError(f"no cycle in {component}")  # a component of > 1 module always has one


def is_cli(name: str) -> bool:
    return name == CLI or name.startswith(CLI + ".")


def cli_importers(graph: dict[str, set[str]]) -> list[str]:
    return sorted(f"{m} imports {t}" for m, targets in graph.items() if not is_cli(m)
                  for t in targets if is_cli(t))


def click_users(sources: dict[str, tuple[str, bool]]) -> list[str]:
    out = []
    for name, (source, _) in sources.items():
        if is_cli(name):
            continue
        for node in ast.walk(ast.parse(source)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            if any(n == "click" or n.startswith("click.") for n in names):
                out.append(f"{name}:{node.lineno} imports click")
    return sorted(out)


def exits(sources: dict[str, tuple[str, bool]]) -> list[str]:
    """SystemExit, sys.exit, exit() and quit() outside the CLI."""
    out = []
    for name, (source, _) in sources.items():
        if is_cli(name):
            continue
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Name) and node.id == "SystemExit":
                out.append(f"{name}:{node.lineno} SystemExit")
            elif isinstance(node, ast.Attribute) and node.attr == "exit" and \
                    isinstance(node.value, ast.Name) and node.value.id == "sys":
                out.append(f"{name}:{node.lineno} sys.exit")
            elif isinstance(node, ast.ImportFrom) and node.module == "sys" and \
                    any(a.name == "exit" for a in node.names):
                out.append(f"{name}:{node.lineno} from sys import exit")
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("exit", "quit"):
                out.append(f"{name}:{node.lineno} {node.func.id}()")
    return sorted(out)


# --- the package ---------------------------------------------------------------------------------


def test_no_import_cycles_but_the_known_ones():
    graph = import_graph(package_sources())
    new = [f"{' -> '.join(_cycle_through(graph, c))} (modules in the cycle: {', '.join(sorted(c))})"
           for c in components(graph) if c not in KNOWN_CYCLES]
    assert not new, "import cycles:\n" + "\n".join(new)


def test_known_cycles_still_exist():
    """An entry of KNOWN_CYCLES whose cycle is gone must be deleted (so none can come back)."""
    found = set(components(import_graph(package_sources())))
    stale = [sorted(c) for c in KNOWN_CYCLES if c not in found]
    assert not stale, f"no longer cycles, delete them from KNOWN_CYCLES: {stale}"


def test_no_library_module_imports_the_cli():
    assert not cli_importers(import_graph(package_sources()))


def test_only_the_cli_imports_click():
    assert not click_users(package_sources())


def test_only_the_cli_exits():
    assert not exits(package_sources())


def test_the_cli_is_a_package_of_commands():
    sources = package_sources()
    assert {"planner.cli", "planner.cli.output", "planner.cli.plan", "planner.cli.sweep"} <= set(sources)
    assert "planner.api" in sources


# --- the checks themselves fail on what they look for ----------------------------------------------


def _fake(**modules: str) -> dict[str, tuple[str, bool]]:
    return {name.replace("__", "."): (src, False) for name, src in modules.items()}


def test_checker_finds_a_cycle_through_a_lazy_relative_import():
    sources = _fake(planner__a="from .b import f\n",
                    planner__b="def f():\n    from planner.c import g\n",
                    planner__c="def g():\n    from . import a\n",
                    planner__d="import planner.a\n")
    assert cycles(import_graph(sources)) == [["planner.a", "planner.b", "planner.c", "planner.a"]]


def test_checker_finds_the_old_cli_sweep_cycle():
    sources = {"planner.cli": ("from .sweep import add_commands\n", False),  # the module cli.py
               "planner.cli.output": ("import click\n", False),
               "planner.sweep": ("def f():\n    from .cli import plan_json\n", False),
               "planner.executors": ("from .cli.output import err\n", False)}
    graph = import_graph(sources)
    assert cycles(graph) == [["planner.cli", "planner.sweep", "planner.cli"]]
    assert cli_importers(graph) == ["planner.executors imports planner.cli.output",
                                    "planner.sweep imports planner.cli"]


def test_checker_finds_click_and_exits_outside_the_cli():
    sources = _fake(planner__a="import click\n", planner__b="from click.testing import CliRunner\n",
                    planner__c="import sys\ndef f():\n    sys.exit(2)\n",
                    planner__d="def f():\n    raise SystemExit(2) from None\n",
                    planner__e="from sys import exit\n", planner__f="exit(1)\n")
    sources["planner.cli.x"] = ("import click, sys\nsys.exit(1)\n", False)
    assert click_users(sources) == ["planner.a:1 imports click", "planner.b:1 imports click"]
    assert exits(sources) == ["planner.c:3 sys.exit", "planner.d:2 SystemExit", "planner.e:1 from sys import exit",
                              "planner.f:1 exit()"]


# --- the subpackages follow the data flow ------------------------------------------------------

# Bottom to top (README "Layout"): a subpackage (or top-level module) imports only from itself
# and from the layers below it; the names on one layer import nothing from each other.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("core",), ("inputs",), ("schedules",), ("plan",), ("cost",),
    ("search", "calibrate", "verify", "report"), ("export", "runner"), ("api",), ("sweep",), ("cli",),
)


# Inside planner.search, bottom to top: the parts of a cluster, stage pricing, the lower bounds,
# the two searches (the DP and the uniform fall-backs), and the orchestration that runs them.
SEARCH_LAYERS: tuple[tuple[str, ...], ...] = (
    ("decompose", "power_caps", "relabel"), ("pricing", "subsets"), ("bounds", "relax"), ("dp", "uniform"), ("orchestration",),
)
SEARCH = "planner.search"


def part_of(module: str) -> str:
    """The subpackage (or top-level module) of planner a module belongs to; '' for planner itself."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def search_part_of(module: str) -> str:
    """The subpackage (or top-level module) of planner.search a module belongs to; '' for one
    outside it and for planner.search itself."""
    if not module.startswith(SEARCH + "."):
        return ""
    return module.split(".")[2]


def layer_violations(graph: dict[str, set[str]], layers: tuple[tuple[str, ...], ...] = LAYERS,
                     part: Callable[[str], str] = part_of) -> list[str]:
    """Each import from a layer to the same or a higher one (another part of it), sorted."""
    rank = {name: i for i, names in enumerate(layers) for name in names}
    out = []
    for module, targets in sorted(graph.items()):
        for target in sorted(targets):
            a, b = part(module), part(target)
            if not a or not b or a == b:
                continue
            if a not in rank or b not in rank or rank[b] >= rank[a]:
                out.append(f"{module} imports {target}")
    return out


def test_every_part_of_the_package_has_a_layer():
    parts = {part_of(name) for name in package_sources()} - {""}
    placed = {name for names in LAYERS for name in names}
    assert parts == placed


def test_subpackages_import_only_the_layers_below_them():
    assert layer_violations(import_graph(package_sources())) == []


def test_every_part_of_the_search_has_a_layer():
    parts = {search_part_of(name) for name in package_sources()} - {""}
    placed = {name for names in SEARCH_LAYERS for name in names}
    assert parts == placed


def test_the_search_imports_only_its_layers_below():
    assert layer_violations(import_graph(package_sources()), SEARCH_LAYERS, search_part_of) == []


def test_checker_finds_an_import_against_the_data_flow():
    graph = {"planner.cost.pricing": {"planner.search.pricing.stages", "planner.inputs.model"},
             "planner.search.pricing.stages": {"planner.cost.pricing"},
             "planner.report.show": {"planner.verify.checks"},
             "planner.newthing": {"planner.core.errors"}}
    assert layer_violations(graph) == ["planner.cost.pricing imports planner.search.pricing.stages",
                                       "planner.newthing imports planner.core.errors",
                                       "planner.report.show imports planner.verify.checks"]


def test_checker_finds_an_import_against_the_search_layers():
    graph = {"planner.search.pricing.stages": {"planner.search.bounds.bound", "planner.search.decompose"},
             "planner.search.bounds.bound": {"planner.search.pricing.stages", "planner.cost.pricing"},
             "planner.search.dp": {"planner.search.uniform", "planner.search.orchestration.lanes"},
             "planner.search.orchestration.lanes": {"planner.search.dp"}}
    assert layer_violations(graph, SEARCH_LAYERS, search_part_of) == [
        "planner.search.dp imports planner.search.orchestration.lanes",
        "planner.search.dp imports planner.search.uniform",
        "planner.search.pricing.stages imports planner.search.bounds.bound"]
