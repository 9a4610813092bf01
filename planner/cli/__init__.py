"""Command-line interface: the only package that prints or exits.

Each command is a thin module here (flags -> planner.api or the library -> output); the work is
the library's. Exit codes: 0 success; 1 no feasible plan (or the evaluated configuration does
not fit); 2 bad input or usage; 130 interrupted (Ctrl-C; a sweep stopped by SIGTERM: 143).
"""

from __future__ import annotations

import click

from .catalog import gpus, inspect_command, models
from .evaluate import evaluate_command
from .export import export_command
from .frontier import frontier_command
from .links import profile_links_command
from .output import EXIT_BAD_INPUT, EXIT_INFEASIBLE, EXIT_INTERRUPTED, EXIT_OK, PlannerGroup
from .plan import plan_command
from .profile import calibrate_command, profile_command
from .replan import replan_command
from .run import run_command
from .show import show_command
from .sweep import sweep_command
from .validate import validate_command


@click.group(cls=PlannerGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="planner")
def main() -> None:
    """Plan distributed training of deep networks on clusters of mixed GPUs.

    \b
    Example:
      planner plan --model llama-3-8b --cluster a100-v100-mix --global-batch 512 --seq-len 4096
    """


for _command in (gpus, models, inspect_command, plan_command, frontier_command, evaluate_command, profile_command, profile_links_command, calibrate_command,
                 sweep_command, validate_command, export_command, show_command, run_command, replan_command):
    main.add_command(_command)

__all__ = ["EXIT_BAD_INPUT", "EXIT_INFEASIBLE", "EXIT_INTERRUPTED", "EXIT_OK", "PlannerGroup", "main"]
