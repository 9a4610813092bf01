"""What failures cost a plan: the job's mean time between interruptions, its checkpoint, the
checkpoint interval of least waste (Young/Daly) and the goodput, the tokens per second a run keeps
after checkpoints, lost work and restarts.

A synchronous job stops when any of its GPUs or nodes fails (Llama 3, Dubey et al. 2024, sec 3.3.4:
"a single GPU failure may require a restart of the entire job"), so interruptions arrive as a
Poisson process whose rate is the sum of its parts':

    lambda = sum over the GPUs of the nodes it rents of 1 / MTBF_gpu
           + sum over those nodes of (1 / MTBF_node + preemptions per hour)        M = 1 / lambda

A checkpoint writes every parameter's weights and optimizer states (its size does not depend on the
sharding) in delta = bytes / the storage bandwidth; a restart takes R (detect, reschedule, relaunch)
plus reading it back. With a checkpoint every tau seconds of work, Daly's model (Daly 2006, "A higher
order estimate of the optimum checkpoint interval for restart dumps", FGCS 22, eqs. 10 and 37):

    tau_opt    = sqrt(2 delta M) (1 + sqrt(delta / 2M) / 3 + delta / 18M) - delta    for delta < 2M, else M
    wall       = M e^(R/M) (e^((tau + delta)/M) - 1) / tau          per second of work
    efficiency = 1 / wall,  goodput = tokens per second x efficiency

Pure: SI units (seconds, bytes, bytes/s).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..inputs.model import DTYPE_BYTES
from ..plan import Plan
from .evaluate import Estimate
from .states import WEIGHT_BYTES_FP32_TRAINING, get_optimizer

HOUR_S = 3600.0
# Llama 3 405B pre-training (Dubey et al. 2024, sec 3.3.4, Table 5): 419 unexpected interruptions in
# a 54-day snapshot on 16,384 H100 GPUs, every cause counted (GPU, HBM, network, host, software):
# one per 16,384 x 54 x 24 / 419 GPU-hours of a job's GPUs
DEFAULT_GPU_MTBF_H = 16384 * 54 * 24 / 419
# the same run's storage (Tectonic) sustained 2 TB/s for its 2,048 eight-GPU servers: 1 GB/s per node
DEFAULT_NODE_WRITE_BYTES_PER_S = 2e12 / 2048
# a 504-GPU B200 training cluster's median interval between a failure and its automatic retry, 11 min
# (SKT, Upstage, Lablup, NVIDIA Korea and VAST Data technical report, 2026: 224 multi-node sessions)
DEFAULT_RESTART_S = 11 * 60.0


@dataclass(frozen=True)
class Reliability:
    """One plan's failures, checkpoint and goodput."""

    mtbf_s: float  # the job's mean time between interruptions
    checkpoint_bytes: float
    checkpoint_write_s: float  # delta
    checkpoint_interval_s: float  # tau, Daly's optimum
    restart_s: float  # R: the restart and the checkpoint read back
    efficiency: float  # seconds of work per second of wall time
    tokens_per_s: float  # without failures
    nodes: int

    @property
    def goodput_tokens_per_s(self) -> float:
        return self.tokens_per_s * self.efficiency

    @property
    def lost_s_per_failure(self) -> float:
        """The work redone and the restart, per interruption (half an interval on average)."""
        return (self.checkpoint_interval_s + self.checkpoint_write_s) / 2 + self.restart_s

    def run_wall_s(self, tokens: int) -> float:
        return tokens / self.goodput_tokens_per_s

    def to_json(self) -> dict:
        return {"mtbf_s": self.mtbf_s, "checkpoint_GB": self.checkpoint_bytes / 1e9,
                "checkpoint_write_s": self.checkpoint_write_s, "checkpoint_interval_s": self.checkpoint_interval_s,
                "restart_s": self.restart_s, "lost_s_per_failure": self.lost_s_per_failure,
                "efficiency": self.efficiency, "goodput_tokens_per_s": self.goodput_tokens_per_s}


def state_bytes_per_param(training) -> tuple[float, float]:
    """(weight bytes, optimizer state bytes) of one parameter: the weights in the training dtype and the
    optimizer's states (fp32 training: fp32 weights and the states, no master copy)."""
    optimizer = get_optimizer(training.optimizer)
    if training.dtype == "fp32":
        return WEIGHT_BYTES_FP32_TRAINING, optimizer.state_bytes_fp32
    return DTYPE_BYTES.get(training.dtype, 2), optimizer.state_bytes_mixed


def checkpoint_bytes(plan: Plan) -> float:
    """Every parameter's weights and optimizer states (state_bytes_per_param)."""
    return plan.model.params * sum(state_bytes_per_param(plan.training))


def daly_interval_s(write_s: float, mtbf_s: float) -> float:
    """Daly's optimum compute time between checkpoints (module docstring)."""
    if write_s >= 2 * mtbf_s:
        return mtbf_s
    ratio = write_s / (2 * mtbf_s)
    return math.sqrt(2 * write_s * mtbf_s) * (1 + math.sqrt(ratio) / 3 + ratio / 9) - write_s


def efficiency(interval_s: float, write_s: float, restart_s: float, mtbf_s: float) -> float:
    """Seconds of work per second of wall time under Poisson interruptions (Daly 2006, eq. 10)."""
    exponent = restart_s / mtbf_s + (interval_s + write_s) / mtbf_s
    if exponent > 700:  # the job almost never completes an interval
        return 0.0
    wall = mtbf_s * math.exp(restart_s / mtbf_s) * math.expm1((interval_s + write_s) / mtbf_s) / interval_s
    return 1.0 / wall


def reliability(plan: Plan, estimate: Estimate, nodes: tuple[tuple[str, int], ...]) -> Reliability:
    """`plan`'s Reliability on the rented `nodes` ((group, node) pairs: planner.cost.energy.rented_nodes)."""
    cluster = plan.cluster
    rate_per_h = 0.0
    for name, _ in nodes:
        group = cluster.group(name)
        rate_per_h += group.gpus_per_node / (group.gpu_mtbf_h or DEFAULT_GPU_MTBF_H)
        rate_per_h += (1 / group.node_mtbf_h if group.node_mtbf_h else 0.0) + group.preemptions_per_h
    mtbf_s = HOUR_S / rate_per_h
    size = checkpoint_bytes(plan)
    bandwidth = cluster.checkpoint_bytes_per_s or DEFAULT_NODE_WRITE_BYTES_PER_S * len(nodes)
    write_s = size / bandwidth
    restart_s = (DEFAULT_RESTART_S if cluster.restart_s is None else cluster.restart_s) + write_s  # read back alike
    interval_s = daly_interval_s(write_s, mtbf_s)
    return Reliability(mtbf_s, size, write_s, interval_s, restart_s,
                       efficiency(interval_s, write_s, restart_s, mtbf_s), estimate.tokens_per_s, len(nodes))
