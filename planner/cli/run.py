"""`planner run`: train a plan with the reference runtime (planner.runner; needs torch), one
process per rank under torchrun; world rank 0 prints one JSON line per step."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import click

from ..core.errors import BadInput
from ..core.io import json_text
from ..core.outfile import check_output, commit, open_temp
from .output import EXIT_INFEASIBLE, bad_input_exit, err


@click.command("run")
@click.argument("plan_file", metavar="PLAN")
@click.option("--steps", type=click.IntRange(min=1), default=10, show_default=True, help="Training steps.")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True,
              help="Seeds the initial weights and the synthetic data.")
@click.option("--data", default="synthetic", show_default=True,
              help="synthetic, or a token file (a flat array of uint16 ids, nanoGPT's .bin).")
@click.option("--lr", type=click.FloatRange(min=0, min_open=True), default=1e-3, show_default=True,
              help="AdamW learning rate.")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True,
              help="auto: CUDA (NCCL) when available, else CPU (gloo).")
@click.option("--log", "--log-file", "log_file", default=None,
              help="Also write the JSON lines to FILE (under torchrun spell it --log-file: torchrun "
                   "reads --log as its own --log-dir).")
@click.option("--save-params", "save_dir", default=None,
              help="Write each rank's final layers (whole, TP shards joined) to DIR/rank<R>.pt.")
def run_command(plan_file, steps, seed, data, lr, device, log_file, save_dir) -> None:
    """Train a plan exactly as planned: its stages, TP and DP degrees, batch shares,
    schedule, ZeRO and recompute (CPU with gloo, or CUDA with NCCL).

    Launch one process per rank of the plan with torchrun (the lines of `planner export
    PLAN --to rankmap`); a one-rank plan also runs without torchrun. World rank 0 prints
    per step {"step", "loss", "step_time_s", "predicted_step_time_s"}. A loss that is not
    finite stops the run with exit 1; bad flags or environment exit 2.

    \b
    Example:
      torchrun --nproc_per_node=3 -m planner.cli run plan.json --steps 5
    """
    from ..runner.launch import Diverged, RunOptions, load_run_plan, run_plan

    try:
        if log_file:
            check_output(log_file, [plan_file])
        if save_dir is not None and not Path(save_dir).is_dir():
            raise BadInput("no such folder", save_dir, "--save-params")
        plan, predicted = load_run_plan(plan_file)
        options = RunOptions(steps=steps, seed=seed, data=data, lr=lr, device=device, save_dir=save_dir)
        log = None
        try:
            for record in run_plan(plan, options, predicted):
                line = json_text(record, indent=None)
                click.echo(line)
                if log_file:
                    log = log or _open_log(log_file)
                    log.write(line + "\n")
                    log.flush()
        finally:
            if log is not None:
                log.close()
    except BadInput as exc:
        bad_input_exit(exc)
    except Diverged as exc:
        err(str(exc))
        sys.exit(EXIT_INFEASIBLE)


def _open_log(path: str):
    """The log file open for writing line by line: a regular file is new (a temporary file
    renamed over `path`, as planner.core.outfile writes every file); a device or FIFO
    (/dev/stdout), which check_output lets through, is written through."""
    try:
        if os.path.exists(path) and not stat.S_ISREG(os.stat(path).st_mode):
            return open(path, "w", encoding="utf-8")
        handle, tmp = open_temp(path)
        commit(handle, tmp, path)
    except OSError as exc:
        raise BadInput(f"cannot write: {exc.strerror or exc}", path) from None
    return handle
