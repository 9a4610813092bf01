"""`planner run`: the process group from torchrun's environment, each rank's stages, the data,
and the step loop. One process per rank of the plan: torchrun's rank i runs the plan's i-th
used cluster rank; gloo on CPU, NCCL on CUDA. A one-rank plan also runs without torchrun.

Per step, world rank 0 yields {"step", "loss", "step_time_s", "predicted_step_time_s"}:
the mean loss over the global batch, the wall time of the step on this machine (from a
barrier before it to a barrier after the optimizer) and the plan's prediction (its
`predicted.step_time_s`, else the cost model's price of the plan).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, Iterator, Mapping

from ..core.errors import BadInput
from ..plan import Plan
from .data import SYNTHETIC, Batches
from .layout import Layout


@dataclass(frozen=True)
class RunOptions:
    steps: int = 10
    seed: int = 0
    data: str = SYNTHETIC
    lr: float = 1e-3
    device: str = "auto"  # auto: cuda when available, else cpu
    save_dir: str | None = None  # write each rank's final parameters (whole layers) as DIR/rank<R>.pt
    timeout_s: float = 600.0  # a receive or collective that waits longer fails


@dataclass(frozen=True)
class Launch:
    """Where this process sits: from torchrun's environment, or given (tests)."""

    rank: int = 0
    world_size: int = 1
    init_method: str = "env://"
    local_rank: int = 0

    @classmethod
    def from_env(cls) -> "Launch":
        env = os.environ
        if "WORLD_SIZE" not in env:
            return cls()
        try:
            return cls(int(env["RANK"]), int(env["WORLD_SIZE"]), "env://", int(env.get("LOCAL_RANK", "0")))
        except (KeyError, ValueError):
            raise BadInput("RANK and WORLD_SIZE must be integers (as torchrun sets them)", "environment") from None


def predicted_step_time_s(plan: Plan, data: Mapping[str, Any]) -> float:
    """The plan file's predicted.step_time_s, else the cost model's price of the plan."""
    value = (data.get("predicted") or {}).get("step_time_s")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    from ..cost.evaluate import evaluate
    from ..cost.runtimes import training_params

    return evaluate(plan, training_params(plan.cluster.gpu_types, plan.training)).step_time_s


def _torch():
    try:
        import torch
    except ImportError:
        from ..calibrate.profile_inputs import INSTALL_HINT

        raise BadInput(INSTALL_HINT, "planner run") from None
    return torch


def run_plan(plan: Plan, options: RunOptions, predicted_s: float | None = None,
             launch: Launch | None = None) -> Iterator[dict]:
    """Train `plan` for options.steps steps as this process's rank; yields one record per step on
    world rank 0 (nothing on the others)."""
    torch = _torch()
    import torch.distributed as dist

    from .engine import AdamWSettings, RankState, gather_parameters, train_step

    layout = Layout(plan)
    launch = launch or Launch.from_env()
    if launch.world_size != layout.world_size:
        raise BadInput(f"the plan runs on {layout.world_size} ranks, but {launch.world_size} processes were "
                       f"started (torchrun --nproc_per_node={layout.world_size} ... planner run PLAN)",
                       "WORLD_SIZE")
    config = plan.model.config
    t = plan.training
    batches = Batches(options.data, t.global_batch, t.seq_len, config.vocab, options.seed)
    if options.device == "cuda" and not torch.cuda.is_available():
        raise BadInput("no CUDA device here (torch.cuda.is_available() is false)", "--device")
    cuda = options.device == "cuda" or (options.device == "auto" and torch.cuda.is_available())
    device = torch.device(f"cuda:{launch.local_rank}" if cuda else "cpu")
    if cuda:
        torch.cuda.set_device(device)
    distributed = launch.world_size > 1
    if distributed:
        dist.init_process_group("nccl" if cuda else "gloo", init_method=launch.init_method, rank=launch.rank,
                                world_size=launch.world_size, timeout=timedelta(seconds=options.timeout_s))
    try:
        groups = {ranks: dist.new_group(list(ranks)) for ranks in layout.groups} if distributed else {}
        state = RankState(layout, launch.rank, groups, options.seed, device, AdamWSettings(lr=options.lr))
        predicted = predicted_s if predicted_s is not None else predicted_step_time_s(plan, {})
        for step in range(options.steps):
            tokens = torch.from_numpy(batches.batch(step))
            if distributed:
                dist.barrier()
            start = time.perf_counter()
            loss = train_step(state, tokens)
            if distributed:
                dist.barrier()
            elapsed = time.perf_counter() - start
            if launch.rank == 0:
                yield {"step": step + 1, "loss": loss, "step_time_s": elapsed, "predicted_step_time_s": predicted}
        if options.save_dir is not None:
            params = gather_parameters(state, groups)
            target = Path(options.save_dir) / f"rank{launch.rank}.pt"
            torch.save({"plan_rank": layout.plan_ranks[launch.rank], "layers": params}, target)
    finally:
        if distributed:
            dist.destroy_process_group()


def load_run_plan(path: str) -> tuple[Plan, float]:
    """The plan file at `path`, checked as every command checks it, and its predicted step time."""
    from ..core.io import parse_structured, read_text
    from ..verify.plan_checks import load_plan_file

    plan = load_plan_file(path)
    Layout(plan)  # what the runtime cannot run: bad input before any process group exists
    return plan, predicted_step_time_s(plan, parse_structured(read_text(path, "plan file"), path))
