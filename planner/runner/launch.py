"""`planner run`: the process group from torchrun's environment, each rank's stages, the data,
and the step loop. One process per rank of the plan: torchrun's rank i runs the plan's i-th
used cluster rank; gloo on CPU, NCCL on CUDA. A one-rank plan also runs without torchrun.

Per step, world rank 0 yields {"step", "loss", "step_time_s", "predicted_step_time_s"}:
the mean loss over the global batch, the wall time of the step on this machine (from a
barrier before it to a barrier after the optimizer) and the plan's prediction (its
`predicted.step_time_s`, else the cost model's price of the plan). A step whose loss is not
finite raises Diverged on every rank (the loss is all-reduced, so every rank sees it).

Bad options and a bad launch environment (RANK outside WORLD_SIZE, no MASTER_ADDR, a port in
use) are BadInput before any collective can wait on a peer that never comes.
"""

from __future__ import annotations

import io
import math
import os
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, Iterator, Mapping

from ..core.errors import BadInput
from ..core.outfile import check_output, write_output
from ..cost.runtimes import tf32_setting
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
    timeout_s: float = 600.0  # a rendezvous, receive or collective that waits longer fails


# AdamW's largest sane learning rate: past it the first update alone moves each weight by more
# than 10 (Adam's step is about lr per weight), and from about 3e37 its arithmetic overflows fp32
MAX_LR = 10.0
MAX_SEED = 2**63 - 1  # a signed 64-bit integer, as torch.manual_seed and most launchers take a seed


def check_options(options: RunOptions) -> None:
    """BadInput, naming the flag, for an option the run cannot use."""
    if not (math.isfinite(options.lr) and 0 < options.lr <= MAX_LR):
        raise BadInput(f"{options.lr:g} is outside 0 < LR <= {MAX_LR:g}", "--lr")
    if not 0 <= options.seed <= MAX_SEED:
        raise BadInput(f"{options.seed} is outside 0..2**63-1", "--seed")


class Diverged(Exception):
    """The loss of a step is not finite: training stops (exit 1 in `planner run`)."""

    def __init__(self, step: int, loss: float):
        self.step, self.loss = step, loss
        super().__init__(f"training diverged: the loss of step {step} is {loss} (not finite); lower --lr")


@dataclass(frozen=True)
class Launch:
    """Where this process sits: from torchrun's environment, or given (tests)."""

    rank: int = 0
    world_size: int = 1
    init_method: str = "env://"
    local_rank: int = 0

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> "Launch":
        """torchrun's RANK, WORLD_SIZE, LOCAL_RANK, checked: a rank outside the world, or a
        world of several ranks without MASTER_ADDR and MASTER_PORT, is BadInput naming the
        variable (it would wait for peers that never come, or fail inside torch)."""
        env = os.environ if env is None else env
        if "WORLD_SIZE" not in env:
            return cls()
        values = {}
        for name, default in (("WORLD_SIZE", None), ("RANK", None), ("LOCAL_RANK", "0")):
            text = env.get(name, default)
            try:
                values[name] = int(text)  # type: ignore[arg-type]
            except (TypeError, ValueError):
                raise BadInput(f"{'is not set' if text is None else repr(text) + ' is not an integer'}; torchrun "
                               "sets RANK, WORLD_SIZE and LOCAL_RANK", name) from None
        world, rank, local = values["WORLD_SIZE"], values["RANK"], values["LOCAL_RANK"]
        if world < 1:
            raise BadInput(f"{world} is not a number of processes (1 or more)", "WORLD_SIZE")
        if not 0 <= rank < world:
            raise BadInput(f"{rank} is outside the world of WORLD_SIZE={world} ranks (0..{world - 1})", "RANK")
        if local < 0:
            raise BadInput(f"{local} is negative", "LOCAL_RANK")
        if world > 1:
            for name in ("MASTER_ADDR", "MASTER_PORT"):
                if not env.get(name):
                    raise BadInput(f"is not set, but WORLD_SIZE={world}: the ranks meet at MASTER_ADDR:MASTER_PORT "
                                   "(torchrun sets both)", name)
            port = env["MASTER_PORT"]
            if not (port.isdigit() and 0 < int(port) < 65536):
                raise BadInput(f"{port!r} is not a TCP port (1..65535)", "MASTER_PORT")
        return cls(rank, world, "env://", local)


def predicted_step_time_s(plan: Plan, data: Mapping[str, Any]) -> float:
    """The plan file's predicted.step_time_s, else the cost model's price of the plan."""
    value = (data.get("predicted") or {}).get("step_time_s")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    from ..cost.evaluate import evaluate
    from ..cost.runtimes import training_params

    return evaluate(plan, training_params(plan.cluster.gpu_types, plan.training)).step_time_s


# the dtypes the engine trains in (engine.RankState.autocast): no quantized linears
RUNNER_DTYPES = ("fp32", "bf16", "fp16")


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
    check_options(options)
    if plan.training.dtype not in RUNNER_DTYPES:
        raise BadInput(f"the reference runtime trains in {', '.join(RUNNER_DTYPES)} (torch.autocast), not "
                       f"{plan.training.dtype}: export it --to megatron, or re-plan in bf16", "training.dtype")
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
        if t.dtype == "fp32":
            # fp32 GEMMs on TF32 tensor cores exactly as the plan was priced (Training.tf32_matmul,
            # else its runtime's stated default); PyTorch keeps it off for matmuls by default
            torch.backends.cuda.matmul.allow_tf32 = bool(tf32_setting(t.runtime, "fp32", t.tf32_matmul))
    target = None
    if options.save_dir is not None:
        target = str(Path(options.save_dir) / f"rank{launch.rank}.pt")
        check_output(target)  # before training, not after it
    distributed = launch.world_size > 1
    if distributed:
        _init_process_group(dist, "nccl" if cuda else "gloo", launch, options.timeout_s)
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
            if not math.isfinite(loss):
                raise Diverged(step + 1, loss)
            if launch.rank == 0:
                yield {"step": step + 1, "loss": loss, "step_time_s": elapsed, "predicted_step_time_s": predicted}
        if target is not None:
            params = gather_parameters(state, groups)
            buffer = io.BytesIO()
            torch.save({"plan_rank": layout.plan_ranks[launch.rank], "layers": params}, buffer)
            write_output(target, buffer.getvalue())
    finally:
        if distributed:
            dist.destroy_process_group()


def _init_process_group(dist, backend: str, launch: Launch, timeout_s: float) -> None:
    """init_process_group with a finite timeout; a rendezvous that fails (the port taken, the
    address unreachable, the peers absent past the timeout) is BadInput naming where."""
    try:
        dist.init_process_group(backend, init_method=launch.init_method, rank=launch.rank,
                                world_size=launch.world_size, timeout=timedelta(seconds=timeout_s))
    except dist.DistError as exc:
        env = os.environ
        where = f"MASTER_ADDR:MASTER_PORT ({env.get('MASTER_ADDR')}:{env.get('MASTER_PORT')})" \
            if launch.init_method == "env://" else launch.init_method
        text = str(exc)
        if "EADDRINUSE" in text or "address already in use" in text.lower():
            raise BadInput("the port is in use (another run or torchrun holds it): choose a free MASTER_PORT, or let "
                           "torchrun --standalone pick one", where) from None
        first = text.strip().splitlines()[0][:300] if text.strip() else type(exc).__name__
        raise BadInput(f"the ranks could not meet (timeout {timeout_s:g} s): {first}", where) from None


def load_run_plan(path: str) -> tuple[Plan, float]:
    """The plan file at `path`, checked as every command checks it, and its predicted step time."""
    from ..core.io import parse_structured, read_text
    from ..verify.plan_checks import load_plan_file

    plan = load_plan_file(path)
    Layout(plan)  # what the runtime cannot run: bad input before any process group exists
    return plan, predicted_step_time_s(plan, parse_structured(read_text(path, "plan file"), path))
