"""What failures cost a plan: the job's mean time between interruptions, its checkpoint, the
checkpoint interval of least waste (Young/Daly) and the goodput, the tokens per second a run keeps
after checkpoints, lost work and restarts.

A synchronous job stops when any of its GPUs or nodes fails (Llama 3, Dubey et al. 2024, sec 3.3.4:
"a single GPU failure may require a restart of the entire job"), so interruptions arrive as a
Poisson process whose rate is the sum of its parts':

    lambda = sum over the GPUs of the nodes it rents of 1 / MTBF_gpu
           + sum over those nodes of (1 / MTBF_node + preemptions per hour)        M = 1 / lambda

MTBF_gpu depends on the GPU's architecture (GPU_MTBF_H_BY_ARCHITECTURE, each measured on a training
fleet), MTBF_node counts the other causes (host, network, software), as Llama 3 measured them.

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

from ..inputs.devices import NodeGroup
from ..inputs.model import DTYPE_BYTES
from ..plan import Plan
from .evaluate import Estimate
from .states import WEIGHT_BYTES_FP32_TRAINING, get_optimizer

HOUR_S = 3600.0
# Llama 3 405B pre-training (Dubey et al. 2024, sec 3.3.4, Table 5): 419 unexpected interruptions in
# a 54-day snapshot on 16,384 H100 GPUs in 2,048 eight-GPU servers, split by the table's counts into
# 268 GPU causes (faulty GPU 148, HBM3 72, SRAM 19, system processor 17, silent data corruption 6,
# thermal interface 6) and 151 others (network 35, host hardware 21, host maintenance 32, software 56,
# NCCL timeouts 7)
LLAMA3_GPU_HOURS = 16384 * 54 * 24
LLAMA3_NODE_HOURS = 2048 * 54 * 24
# every node's interruptions beyond its GPUs' (host, network, software): one per 17,578 node-hours
DEFAULT_NODE_MTBF_H = LLAMA3_NODE_HOURS / 151
HOPPER_GPU_MTBF_H = LLAMA3_GPU_HOURS / 268  # 79,230 GPU-hours
# Meta's RSC-1 A100 cluster (Kokolis et al., HPCA 2025, "Revisiting Reliability in Large-Scale Machine
# Learning Research Clusters"): 6.50 job-interrupting failures per 1,000 node-days of 8 A100s, every
# node-level cause; the GPUs' part once the node term above is taken out: one per 37,390 GPU-hours
# (BLOOM on 384 A100s, Jean Zay: "1-2 GPU failures a week", one per 43,008 GPU-hours at 1.5)
AMPERE_GPU_MTBF_H = 8 / (6.50 / (1000 * 24) - 1 / DEFAULT_NODE_MTBF_H)
# a 63-node B200 cluster (SKT, Upstage, Lablup, NVIDIA Korea and VAST Data technical report, 2026): 10
# XID-identified GPU failures in 55 days on 504 GPUs, one per 66,528 GPU-hours (10 events: +-2x)
BLACKWELL_GPU_MTBF_H = 504 * 55 * 24 / 10
# each GPU's interruptions by architecture; none published for volta, turing and ada (Ampere's, the
# nearest measured fleet) nor for AMD's cdna parts (Hopper's); an unknown architecture takes Hopper's
GPU_MTBF_H_BY_ARCHITECTURE = {"volta": AMPERE_GPU_MTBF_H, "turing": AMPERE_GPU_MTBF_H, "ampere": AMPERE_GPU_MTBF_H,
                              "ada": AMPERE_GPU_MTBF_H, "hopper": HOPPER_GPU_MTBF_H,
                              "blackwell": BLACKWELL_GPU_MTBF_H, "cdna2": HOPPER_GPU_MTBF_H,
                              "cdna3": HOPPER_GPU_MTBF_H}
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


def checkpoint_bytes_per_s(cluster, nodes: int) -> float:
    """The storage bandwidth a job on `nodes` nodes writes (and reads back) its checkpoint at: the
    cluster's `checkpoint_write_GBps`, else DEFAULT_NODE_WRITE_BYTES_PER_S per node."""
    return cluster.checkpoint_bytes_per_s or DEFAULT_NODE_WRITE_BYTES_PER_S * nodes


def gpu_mtbf_h(group: NodeGroup) -> float:
    """Hours between interruptions a GPU of `group` causes: the cluster file's `gpu_mtbf_hours`, else its
    architecture's (GPU_MTBF_H_BY_ARCHITECTURE)."""
    return group.gpu_mtbf_h or GPU_MTBF_H_BY_ARCHITECTURE.get(group.gpu.architecture, HOPPER_GPU_MTBF_H)


def node_failures_per_h(group: NodeGroup) -> float:
    """Interruptions per hour one node of `group` brings a job: its GPUs', its own (the cluster file's
    `node_mtbf_hours`, else DEFAULT_NODE_MTBF_H) and its spot preemptions; a mixed node's part (one GPU
    type's GPUs) brings its share of the node's own interruptions, so the parts of a node add up to it."""
    return group.gpus_per_node / gpu_mtbf_h(group) \
        + group.node_share * (1 / (group.node_mtbf_h or DEFAULT_NODE_MTBF_H) + group.preemptions_per_h)


def reliability(plan: Plan, estimate: Estimate, nodes: tuple[tuple[str, int], ...]) -> Reliability:
    """`plan`'s Reliability on the rented `nodes` ((group, node) pairs: planner.cost.energy.rented_nodes)."""
    cluster = plan.cluster
    rate_per_h = 0.0
    for name, _ in nodes:
        rate_per_h += node_failures_per_h(cluster.group(name))
    mtbf_s = HOUR_S / rate_per_h
    size = checkpoint_bytes(plan)
    bandwidth = checkpoint_bytes_per_s(cluster, len(nodes))
    write_s = size / bandwidth
    restart_s = (DEFAULT_RESTART_S if cluster.restart_s is None else cluster.restart_s) + write_s  # read back alike
    interval_s = daly_interval_s(write_s, mtbf_s)
    return Reliability(mtbf_s, size, write_s, interval_s, restart_s,
                       efficiency(interval_s, write_s, restart_s, mtbf_s), estimate.tokens_per_s, len(nodes))
