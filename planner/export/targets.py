"""The export targets of `planner export --to`, by name: each one's exporter and the runtime it runs.

A target runs exactly the plans of the registered runtimes (planner.cost.runtimes) whose
RuntimeSpec.exports_as is its runtime, and `--lossy` plans and prices under that runtime;
rankmap (the reference runtime, planner.runner) runs any plan. A runtime with an export is its
module in planner.cost.runtimes plus its exporter and one entry here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..cost.runtimes import RUNTIMES
from ..plan import Plan
from .base import Warn
from .deepspeed import export_deepspeed
from .megatron import export_megatron
from .rankmap import export_rankmap
from .torchtitan import export_torchtitan, export_torchtitan_cli


@dataclass(frozen=True)
class ExportTarget:
    export: Callable[[Plan, Warn], str]  # the plan's text in the target's format (warnings to Warn)
    runtime: str = ""  # the registered runtime it runs ('': any plan, the reference runtime)
    launch: bool = False  # `--launch-dir` writes launch scripts that read its file


EXPORT_TARGETS: dict[str, ExportTarget] = {
    "megatron": ExportTarget(export_megatron, "megatron", launch=True),
    "deepspeed": ExportTarget(export_deepspeed, "deepspeed", launch=True),
    "torchtitan": ExportTarget(export_torchtitan, "torchtitan", launch=True),
    "torchtitan-cli": ExportTarget(export_torchtitan_cli, "torchtitan", launch=True),
    "rankmap": ExportTarget(export_rankmap),
}
TARGETS = tuple(EXPORT_TARGETS)
LAUNCH_TARGETS = tuple(name for name, target in EXPORT_TARGETS.items() if target.launch)
# target -> the runtimes whose plans it runs exactly, its own runtime first (rankmap: any plan, absent)
TARGET_RUNTIMES: dict[str, tuple[str, ...]] = {
    name: (target.runtime,) + tuple(r for r, spec in RUNTIMES.items()
                                    if spec.exports_as == target.runtime and r != target.runtime)
    for name, target in EXPORT_TARGETS.items() if target.runtime}

__all__ = ["EXPORT_TARGETS", "ExportTarget", "LAUNCH_TARGETS", "TARGETS", "TARGET_RUNTIMES"]
