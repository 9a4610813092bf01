"""A GPU under a power cap (`nvidia-smi -pl W`): how fast it computes and what it draws.

Dynamic voltage and frequency scaling: dynamic power goes as f x V^2 and the voltage with the clock
f, so a GPU running flat out draws P(f) = P_idle + (P_board - P_idle) x (f / f_max)^3 (the cubic
CMOS model; Perseus, Chung et al. SOSP'24, and Zeus, You et al. NSDI'23, measure the same convex
shape on A100/A40). A cap P_cap between idle and board power lowers the clock to

    f / f_max = ((P_cap - P_idle) / (P_board - P_idle))^(1/3)

and the tensor and vector peaks with it; the memory clock, and so HBM bandwidth, stays (caps lower
the SM clock). Checked against measured points (docs/cost-and-energy.md): a 3090 at 80 % of its
board power keeps over 95 % of its training throughput (the model: 89 %, with its 107 W idle), and
an H100 at 600 of 700 W loses 10-15 % of step throughput (the model: 6 %).
"""

from __future__ import annotations

from dataclasses import replace

from ..core.errors import BadInput
from ..inputs.devices import GpuPower, GpuSpec

DVFS_EXPONENT = 3.0  # P_dynamic ~ f^3 (module docstring)
# where the catalog states no lowest power limit: half the board power (NVIDIA's datacenter parts
# accept caps down to 25-50 % of it: A100-SXM4 100 of 400 W, H100-SXM 200 of 700 W)
DEFAULT_MIN_CAP_FRACTION = 0.5
CAP_STEP_FRACTION = 0.05  # caps are searched in steps of 5 % of the board power


def clock_fraction(power: GpuPower, cap_W: float) -> float:
    """f / f_max of a GPU drawing at most `cap_W` (1 at or above its board power)."""
    if cap_W >= power.board_W:
        return 1.0
    return ((cap_W - power.idle_W) / (power.board_W - power.idle_W)) ** (1 / DVFS_EXPONENT)


def lowest_cap_W(power: GpuPower) -> float:
    """The lowest cap the planner sets: the GPU's minimum power limit, else DEFAULT_MIN_CAP_FRACTION of
    its board power, and always above its idle draw."""
    floor = power.min_cap_W or power.board_W * DEFAULT_MIN_CAP_FRACTION
    return max(floor, power.idle_W + CAP_STEP_FRACTION * power.board_W)


def cap_levels_W(power: GpuPower) -> tuple[float, ...]:
    """The caps searched, from the board power down in CAP_STEP_FRACTION steps to lowest_cap_W."""
    levels, fraction = [], 1.0
    while power.board_W * fraction >= lowest_cap_W(power) - 1e-9:
        levels.append(round(power.board_W * fraction, 6))
        fraction = round(fraction - CAP_STEP_FRACTION, 6)
    return tuple(levels)


def check_cap(gpu: GpuSpec, cap_W: float, where: str, field: str) -> None:
    """BadInput unless `cap_W` is a cap the GPU takes (between lowest_cap_W and its board power)."""
    if gpu.power is None:
        raise BadInput(f"GPU {gpu.name} has no power figures (power_W) to cap", where, field)
    low = lowest_cap_W(gpu.power)
    if not low - 1e-6 <= cap_W <= gpu.power.board_W + 1e-6:
        raise BadInput(f"{cap_W:g} W is outside {gpu.name}'s caps ({low:g}-{gpu.power.board_W:g} W)", where, field)


def capped(gpu: GpuSpec, cap_W: float) -> GpuSpec:
    """`gpu` computing at the clock a cap of `cap_W` leaves it (peaks scaled, HBM as it is); unchanged
    without a cap (0) or at its board power."""
    if not cap_W or gpu.power is None or cap_W >= gpu.power.board_W:
        return gpu
    speed = clock_fraction(gpu.power, cap_W)
    return replace(gpu, peak_flops=tuple((dtype, flops * speed) for dtype, flops in gpu.peak_flops))


def running_power_W(gpu: GpuSpec, cap_W: float = 0.0) -> float:
    """What the GPU draws while it computes: its cap, else its board power (dense training runs at
    the power limit)."""
    assert gpu.power is not None
    return min(cap_W, gpu.power.board_W) if cap_W else gpu.power.board_W
