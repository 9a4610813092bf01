"""The runtime registry (planner.cost.runtimes): one RuntimeSpec per runtime module holds its
pricing, capability, schedules, compile support and export; nothing else names a runtime's
schedules or the default runtime."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import pkgutil
from pathlib import Path

import pytest

import planner
from planner import cost
from planner.api import EvaluateRequest, PlanRequest
from planner.core.errors import BadInput
from planner.core.runtime_default import DEFAULT_RUNTIME
from planner.cost.runtimes import (ANY, RUNTIMES, RuntimeSpec, capability, compile_problem, get_runtime,
                                   register_runtime, runtime_spec)
from planner.export import EXPORT_TARGETS, TARGET_RUNTIMES
from planner.plan import Training
from planner.schedules import SCHEDULES, Schedule

PACKAGE = Path(planner.__file__).parent
# the registry's own modules; every other module of the package is one runtime
NOT_RUNTIMES = {"base", "capability", "registry", "spec"}


def runtime_modules() -> list:
    return [importlib.import_module(f"planner.cost.runtimes.{m.name}")
            for m in pkgutil.iter_modules(cost.runtimes.__path__) if m.name not in NOT_RUNTIMES]


def test_each_runtime_module_declares_one_spec_and_the_registry_holds_exactly_those():
    specs = []
    for module in runtime_modules():
        declared = [value for value in vars(module).values() if isinstance(value, RuntimeSpec)]
        assert len(declared) == 1, module.__name__
        specs.append(declared[0])
    assert sorted(spec.name for spec in specs) == sorted(RUNTIMES)
    assert all(RUNTIMES[spec.name] is spec for spec in specs)


def test_a_spec_is_the_one_record_every_lookup_reads():
    for name, spec in RUNTIMES.items():
        assert spec.name == name == spec.pricing.name == spec.capability.runtime
        assert runtime_spec(name) is spec and get_runtime(name) is spec.pricing
        assert capability(name) is spec.capability
    with pytest.raises(BadInput, match="unknown runtime 'colossalai', expected one of megatron, "):
        runtime_spec("colossalai")


def test_the_registry_refuses_a_second_spec_of_a_name_and_a_capability_of_another_runtime():
    with pytest.raises(ValueError, match="registered twice"):
        register_runtime(RUNTIMES["fsdp1"])
    with pytest.raises(ValueError, match="capability"):
        RuntimeSpec(pricing=RUNTIMES["fsdp1"].pricing, capability=RUNTIMES["megatron"].capability)
    with pytest.raises(ValueError, match="both runs and refuses 1f1b"):
        RuntimeSpec(pricing=RUNTIMES["fsdp1"].pricing, capability=RUNTIMES["fsdp1"].capability,
                    schedule_refusals={"1f1b": "no"})


def test_the_default_runtime_is_registered_and_every_default_is_it():
    assert DEFAULT_RUNTIME in RUNTIMES and DEFAULT_RUNTIME != ANY
    assert Training(global_batch=8, seq_len=128, dtype="bf16", micro_batch=1).runtime == DEFAULT_RUNTIME
    assert PlanRequest.__dataclass_fields__["runtime"].default == DEFAULT_RUNTIME
    assert EvaluateRequest.__dataclass_fields__["runtime"].default == DEFAULT_RUNTIME


def string_constants(path: Path, text: str) -> list[int]:
    """The lines of `path` that hold the string constant `text` (docstrings are longer strings)."""
    tree = ast.parse(path.read_text(), str(path))
    return [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Constant) and node.value == text]


def test_no_module_outside_the_runtimes_and_their_exporters_names_the_default_runtime():
    # the runtime modules and their exporters name runtimes; everything else reads DEFAULT_RUNTIME
    allowed = (PACKAGE / "cost" / "runtimes", PACKAGE / "export", PACKAGE / "core" / "runtime_default.py")
    found = [f"{path.relative_to(PACKAGE)}:{line}" for path in sorted(PACKAGE.rglob("*.py"))
             if not any(path == a or a in path.parents for a in allowed)
             for line in string_constants(path, DEFAULT_RUNTIME)]
    assert found == []


def test_the_checker_finds_a_default_runtime_literal(tmp_path):
    source = tmp_path / "module.py"
    source.write_text('"""Priced for megatron."""\n\ndef f(runtime: str = "megatron") -> str:\n    return runtime\n')
    assert string_constants(source, "megatron") == [3]


def test_schedules_say_nothing_of_runtimes_their_runtimes_list_them():
    fields = {f.name for f in dataclasses.fields(Schedule)}
    assert not fields & {"runtime_names", "unsupported_because"}
    for spec in RUNTIMES.values():
        assert set(spec.capability.schedules) <= set(SCHEDULES), spec.name
        assert set(spec.schedule_refusals) <= set(SCHEDULES) - set(spec.capability.schedules), spec.name
    assert capability(ANY).schedules == tuple(SCHEDULES)


def test_every_runtime_with_an_export_has_its_target_and_every_target_runs_a_registered_runtime():
    target_runtimes = {target.runtime for target in EXPORT_TARGETS.values() if target.runtime}
    for name, spec in RUNTIMES.items():
        if spec.exports_as:
            assert spec.exports_as in target_runtimes, name
            assert any(name in runtimes for runtimes in TARGET_RUNTIMES.values()), name
    for name, target in EXPORT_TARGETS.items():
        if target.runtime:
            assert RUNTIMES[target.runtime].exports_as == target.runtime, name
            assert TARGET_RUNTIMES[name][0] == target.runtime
    assert TARGET_RUNTIMES["megatron"] == ("megatron", "megatron-2021")
    assert "rankmap" not in TARGET_RUNTIMES and EXPORT_TARGETS["rankmap"].runtime == ""


def test_compile_problems_come_from_the_specs():
    assert compile_problem("torchtitan") == compile_problem(ANY) == ""
    assert compile_problem("megatron-2021") == compile_problem("megatron") == (
        "Megatron-LM has no torch.compile of the model (its fused kernels are priced already); "
        "--compile needs --runtime torchtitan (or any)")
