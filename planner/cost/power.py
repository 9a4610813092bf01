"""A GPU under a power cap (`nvidia-smi -pl W`): how fast it computes and what it draws.

Dense training does not quite reach the power limit: a GPU running flat out draws P_draw = d x
P_board. Dynamic voltage and frequency scaling lowers the clock under a cap below that draw, and the
throughput falls on a convex curve above a floor P_0 = b x P_board that no useful clock gets under
(static and memory power, Zeus, You et al. NSDI'23, sec 2.3; Perseus, Chung et al. SOSP'24):

    speed(P_cap) = ((P_cap - P_0) / (P_draw - P_0))^(1/alpha)     for P_0 < P_cap < P_draw, else 1

and the tensor and vector peaks scale with it; the memory clock, and so HBM bandwidth, stays (caps
lower the SM clock). (d, b, alpha) belong to the GPU architecture (POWER_CURVES), each fitted by least
squares to the published per-cap training measurements of Zeus (NSDI'23 trace,
github.com/ml-energy/zeus, examples/research_reproducibility/zeus_nsdi23/trace/summary_power_*.csv:
one epoch's time and mean power per power limit for BERT-base on SQuAD and on Sentiment140 and
ResNet-50 on ImageNet), caps from 40 % of the board power up. A capped GPU draws its cap (at most
P_draw); an uncapped one P_draw.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..core.errors import BadInput
from ..inputs.devices import GpuSpec


@dataclass(frozen=True)
class PowerCurve:
    """An architecture's training throughput under a power cap (module docstring)."""

    draw_fraction: float  # d: what dense training draws uncapped, of the board power
    floor_fraction: float  # b: P_0 of the board power
    exponent: float  # alpha
    source: str

    def speed(self, board_W: float, cap_W: float) -> float:
        """The speed under a cap of `cap_W`, of the uncapped speed (module docstring)."""
        draw, floor = self.draw_fraction * board_W, self.floor_fraction * board_W
        if cap_W >= draw:
            return 1.0
        return max(0.0, (cap_W - floor) / (draw - floor)) ** (1 / self.exponent)


# fitted on the Zeus trace (module docstring); docs/power-curves.md gives each curve's error per sweep
VOLTA = PowerCurve(0.894, 0.35, 3.55, "Zeus trace, V100 250 W, 3 workloads x 7 caps")
TURING = PowerCurve(0.907, 0.38, 3.80, "Zeus trace, Quadro RTX 6000 (TU102) 260 W, 3 workloads x 7 caps")
AMPERE = PowerCurve(0.89, 0.39, 3.40, "Zeus trace, A40 300 W, 3 workloads x 4-8 caps")
# no published per-cap training sweep for ada, hopper, blackwell or AMD parts: the nearest measured
# architecture's curve, Ampere's
POWER_CURVES = {"volta": VOLTA, "turing": TURING, "ampere": AMPERE, "ada": AMPERE, "hopper": AMPERE,
                "blackwell": AMPERE, "cdna2": AMPERE, "cdna3": AMPERE}
# where the catalog states no lowest power limit: half the board power (NVIDIA's datacenter parts
# accept caps down to 25-50 % of it: A100-SXM4 100 of 400 W, H100-SXM 200 of 700 W)
DEFAULT_MIN_CAP_FRACTION = 0.5
CAP_STEP_FRACTION = 0.05  # caps are searched in steps of 5 % of the board power


def power_curve(gpu: GpuSpec) -> PowerCurve:
    """The GPU's architecture's curve (Ampere's for an unknown architecture)."""
    return POWER_CURVES.get(gpu.architecture, AMPERE)


def draw_W(gpu: GpuSpec) -> float:
    """What the GPU draws computing flat out, uncapped."""
    assert gpu.power is not None
    return power_curve(gpu).draw_fraction * gpu.power.board_W


def clock_fraction(gpu: GpuSpec, cap_W: float) -> float:
    """The speed of a GPU drawing at most `cap_W`, of its uncapped speed (1 at or above its draw)."""
    assert gpu.power is not None
    return power_curve(gpu).speed(gpu.power.board_W, cap_W)


def lowest_cap_W(gpu: GpuSpec) -> float:
    """The lowest cap the planner sets or accepts: the GPU's minimum power limit, else
    DEFAULT_MIN_CAP_FRACTION of its board power, and a step above its idle draw and its curve's floor
    (where the speed goes to nothing)."""
    power = gpu.power
    assert power is not None
    step = CAP_STEP_FRACTION * power.board_W
    floor = power.min_cap_W or power.board_W * DEFAULT_MIN_CAP_FRACTION
    return max(floor, power.idle_W + step, power_curve(gpu).floor_fraction * power.board_W + step)


def cap_levels_W(gpu: GpuSpec) -> tuple[float, ...]:
    """The caps searched, from the board power down in CAP_STEP_FRACTION steps to lowest_cap_W."""
    assert gpu.power is not None
    board, low = gpu.power.board_W, lowest_cap_W(gpu)
    levels, fraction = [], 1.0
    while board * fraction >= low - 1e-9:
        levels.append(round(board * fraction, 6))
        fraction = round(fraction - CAP_STEP_FRACTION, 6)
    return tuple(levels)


def check_cap(gpu: GpuSpec, cap_W: float, where: str, field: str) -> None:
    """BadInput unless `cap_W` is a cap the GPU takes (between lowest_cap_W and its board power)."""
    if gpu.power is None:
        raise BadInput(f"GPU {gpu.name} has no power figures (power_W) to cap", where, field)
    low = lowest_cap_W(gpu)
    if not low - 1e-6 <= cap_W <= gpu.power.board_W + 1e-6:
        raise BadInput(f"{cap_W:g} W is outside {gpu.name}'s caps ({low:g}-{gpu.power.board_W:g} W)", where, field)


def capped(gpu: GpuSpec, cap_W: float) -> GpuSpec:
    """`gpu` computing at the clock a cap of `cap_W` leaves it (peaks scaled, HBM as it is); unchanged
    without a cap (0) or at its board power."""
    if not cap_W or gpu.power is None or cap_W >= gpu.power.board_W:
        return gpu
    speed = clock_fraction(gpu, cap_W)
    return replace(gpu, peak_flops=tuple((dtype, flops * speed) for dtype, flops in gpu.peak_flops))


def running_power_W(gpu: GpuSpec, cap_W: float = 0.0) -> float:
    """What the GPU draws while it computes: its cap, at most its uncapped draw."""
    return min(cap_W, draw_W(gpu)) if cap_W else draw_W(gpu)
