"""The registry of runtimes by name: each module of planner.cost.runtimes declares one
RuntimeSpec (planner.cost.runtimes.spec), which the package registers (register_runtime)."""

from __future__ import annotations

from ...core.errors import BadInput
from .spec import RuntimeSpec

RUNTIMES: dict[str, RuntimeSpec] = {}  # by name, in registration order


def register_runtime(spec: RuntimeSpec) -> RuntimeSpec:
    """Add `spec` under its name (ValueError for a name registered already)."""
    if spec.name in RUNTIMES:
        raise ValueError(f"runtime {spec.name!r} is registered twice")
    RUNTIMES[spec.name] = spec
    return spec


def runtime_spec(name: str) -> RuntimeSpec:
    """The registered runtime `name` (BadInput naming `--runtime` for another)."""
    spec = RUNTIMES.get(name)
    if spec is None:
        raise BadInput(f"unknown runtime {name!r}, expected one of {', '.join(RUNTIMES)}", "--runtime")
    return spec


__all__ = ["RUNTIMES", "RuntimeSpec", "register_runtime", "runtime_spec"]
