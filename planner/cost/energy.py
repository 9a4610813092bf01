"""What a plan costs to run: dollars and energy per step, per token and over a run.

Dollars: a plan rents every GPU of each node it uses (a cloud instance is a node), at the node
group's price per GPU-hour (the cluster file's `price_per_gpu_hour`, else the GPU catalog's
on-demand price), for the whole step. Energy (the GPU board power model of Perseus, Chung et al.,
SOSP'24, sec. 2: a GPU draws its running power while it computes and its idle power while it
waits in the bubble or on communication it cannot overlap):

    E_gpu    = P_run x t_active + P_idle x (T - t_active)   per GPU of a used node (t_active 0 if unused)
    E_node   = P_node x T                                    per used node (CPUs, memory, NICs, fans)
    E_step   = PUE x (sum E_gpu + sum E_node)

with P_run the board power (the default power limit, which dense training reaches), or the stage's
power cap (planner.cost.power), t_active the estimate's seconds of kernels per rank (Estimate.active_s_by_rank).
Pure: no I/O; prices in USD per GPU-second, energy in joules, power in watts.
"""

from __future__ import annotations

from dataclasses import dataclass
from ..inputs.devices import HOUR
from ..plan import Plan
from .evaluate import Estimate
from .power import running_power_W

J_PER_MWH = 3.6e9
J_PER_KWH = 3.6e6


@dataclass(frozen=True)
class RunTotals:
    """A run of `tokens` tokens at one plan's step: whole steps, wall time, dollars, energy."""

    tokens: int
    steps: int
    wall_s: float
    usd: float | None
    energy_MWh: float | None

    def to_json(self) -> dict:
        return {"tokens": self.tokens, "steps": self.steps, "wall_s": self.wall_s, "usd": self.usd,
                "energy_MWh": self.energy_MWh}


@dataclass(frozen=True)
class RunCost:
    """Dollars and energy of one plan's step; a figure is None where a GPU type it rents has no price
    (or power) in the catalog or the cluster file (`missing` names them)."""

    step_time_s: float
    tokens_per_step: int
    gpus_rented: int  # every GPU of the nodes the plan uses
    gpus_idle: int  # of those, the ones the plan leaves without work
    usd_per_hour: float | None
    energy_J_per_step: float | None
    gpu_energy_J_per_step: float | None  # of it, the GPU boards' before PUE
    pue: float
    missing_price: tuple[str, ...] = ()  # GPU types rented without a price
    missing_power: tuple[str, ...] = ()  # ... without a power figure

    @property
    def usd_per_step(self) -> float | None:
        return None if self.usd_per_hour is None else self.usd_per_hour * self.step_time_s / HOUR

    @property
    def usd_per_million_tokens(self) -> float | None:
        return None if self.usd_per_step is None else self.usd_per_step / self.tokens_per_step * 1e6

    @property
    def energy_J_per_token(self) -> float | None:
        return None if self.energy_J_per_step is None else self.energy_J_per_step / self.tokens_per_step

    @property
    def power_W(self) -> float | None:
        """The facility's mean power while the plan runs."""
        return None if self.energy_J_per_step is None else self.energy_J_per_step / self.step_time_s

    def for_tokens(self, tokens: int) -> RunTotals:
        """A run of `tokens` tokens: whole steps (the last one full), at this step's cost."""
        steps = -(-tokens // self.tokens_per_step)
        usd = None if self.usd_per_step is None else self.usd_per_step * steps
        energy = None if self.energy_J_per_step is None else self.energy_J_per_step * steps / J_PER_MWH
        return RunTotals(tokens, steps, self.step_time_s * steps, usd, energy)

    def to_json(self) -> dict:
        return {"usd_per_hour": self.usd_per_hour, "usd_per_step": self.usd_per_step,
                "usd_per_million_tokens": self.usd_per_million_tokens,
                "energy_J_per_step": self.energy_J_per_step, "energy_J_per_token": self.energy_J_per_token,
                "gpu_energy_J_per_step": self.gpu_energy_J_per_step, "power_W": self.power_W, "pue": self.pue,
                "gpus_rented": self.gpus_rented, "gpus_idle": self.gpus_idle,
                **({"missing_price": list(self.missing_price)} if self.missing_price else {}),
                **({"missing_power": list(self.missing_power)} if self.missing_power else {})}


def rented_nodes(plan: Plan) -> tuple[tuple[str, int], ...]:
    """The nodes (group name, node index) holding a rank the plan uses, in cluster order."""
    cluster = plan.cluster
    return tuple(sorted({cluster.node_of(rank) for rank in plan.used_ranks()},
                        key=lambda node: (cluster.group(node[0]).first_rank, node[1])))


def run_cost(plan: Plan, estimate: Estimate) -> RunCost:
    """The dollars and energy of `plan`'s step as `estimate` prices it (a stage's power cap is its
    GPUs' running power: planner.cost.power)."""
    cluster, step = plan.cluster, estimate.step_time_s
    caps_W = {rank: st.power_cap_W for st in plan.stages if st.power_cap_W for rep in st.replicas
              for rank in rep.ranks}
    nodes = rented_nodes(plan)
    usd_per_s, gpu_J, node_J, rented, idle = 0.0, 0.0, 0.0, 0, 0
    missing_price: dict[str, None] = {}
    missing_power: dict[str, None] = {}
    for name, node in nodes:
        group = cluster.group(name)
        gpu = group.gpu
        rented += group.gpus_per_node
        if group.price_usd_per_gpu_s is None:
            missing_price[gpu.name] = None
        else:
            usd_per_s += group.price_usd_per_gpu_s * group.gpus_per_node
        node_J += group.node_power_W * group.node_share * step  # a mixed node's part: its share
        first = group.first_rank + node * group.gpus_per_node
        for rank in range(first, first + group.gpus_per_node):
            active = estimate.active_s_by_rank.get(rank, 0.0)
            idle += rank not in estimate.active_s_by_rank
            if gpu.power is None:
                missing_power[gpu.name] = None
                continue
            gpu_J += running_power_W(gpu, caps_W.get(rank, 0.0)) * active + gpu.power.idle_W * (step - active)
    usd_per_hour = None if missing_price else usd_per_s * HOUR
    energy = None if missing_power else cluster.pue * (gpu_J + node_J)
    return RunCost(step, plan.training.global_batch * plan.training.seq_len, rented, idle, usd_per_hour,
                   energy, None if missing_power else gpu_J, cluster.pue,
                   tuple(missing_price), tuple(missing_power))
