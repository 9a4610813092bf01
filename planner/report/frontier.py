"""The views of `planner frontier` (planner.api.frontier): the table of the Pareto set and the
marginal value of each node group, and the SVG plot of step time against dollars (or energy where
no price is known) per step, written as plain SVG text (no plotting library). Rendering only."""

from __future__ import annotations

from html import escape

from rich import box
from rich.console import Console
from rich.table import Table

from ..core.markup import esc
from ..cost.energy import J_PER_KWH
from .costs import sig

WIDTH, HEIGHT, MARGIN = 720, 480, 70


def frontier_table(result) -> Table:
    """The Pareto set, fastest first: nodes rented, step, dollars, energy, the configuration."""
    table = Table(title="Pareto set of step time, dollars and energy", box=box.SIMPLE_HEAD, pad_edge=False)
    for name, justify in (("nodes used", "left"), ("GPUs", "right"), ("step s", "right"), ("$/step", "right"),
                          ("$/M tokens", "right"), ("kWh/step", "right"), ("configuration", "left")):
        table.add_column(name, justify=justify)
    for index in result.pareto:
        outcome = result.outcomes[index]
        cost = outcome.cost
        table.add_row(esc(outcome.used.describe(result.cluster)), str(cost.gpus_rented),
                      f"{outcome.result.estimate.step_time_s:.3f}", _number(cost.usd_per_step),
                      _number(cost.usd_per_million_tokens),
                      _number(None if cost.energy_J_per_step is None else cost.energy_J_per_step / J_PER_KWH),
                      esc(result.configurations[index]))
    return table


def print_frontier(result, console: Console) -> None:
    planned = sum(o.result is not None for o in result.outcomes)
    console.print(frontier_table(result))
    console.print(f"{len(result.pareto)} of {planned} planned sets of nodes on the frontier "
                  f"({len(result.outcomes)} within the constraints"
                  + ("" if result.every_count else "; each group at halvings of its nodes only") + "); "
                  + ("every search proven optimal" if result.proven else "not proven: a search was cut short")
                  + f"; {result.seconds:.1f} s")
    for marginal in result.marginals:
        console.print(esc(marginal.text(result.cluster.group(marginal.group).gpu.name)))


def _number(value: float | None) -> str:
    return "-" if value is None else sig(value)


def frontier_svg(result) -> str:
    """Step time (x) against dollars per step (y; joules where no price is known) of every planned
    set of nodes, the Pareto set joined and labelled."""
    planned = [(i, o) for i, o in enumerate(result.outcomes) if o.result is not None]
    use_money = all(o.cost.usd_per_step is not None for _, o in planned)
    label = "dollars per step" if use_money else "kWh per step"

    def y_of(outcome) -> float:
        cost = outcome.cost
        if use_money:
            return cost.usd_per_step
        return (cost.energy_J_per_step or 0.0) / J_PER_KWH

    xs = [o.result.estimate.step_time_s for _, o in planned]
    ys = [y_of(o) for _, o in planned]
    x_lo, x_hi = _span(xs)
    y_lo, y_hi = _span(ys)

    def px(x: float) -> float:
        return MARGIN + (x - x_lo) / (x_hi - x_lo) * (WIDTH - 2 * MARGIN)

    def py(y: float) -> float:
        return HEIGHT - MARGIN - (y - y_lo) / (y_hi - y_lo) * (HEIGHT - 2 * MARGIN)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
             f'viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="11">',
             f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
             f'<text x="{WIDTH / 2}" y="20" text-anchor="middle" font-size="14">'
             f'{escape(result.cluster.name)}: step time and {label} of each set of nodes</text>',
             f'<line x1="{MARGIN}" y1="{HEIGHT - MARGIN}" x2="{WIDTH - MARGIN}" y2="{HEIGHT - MARGIN}" stroke="black"/>',
             f'<line x1="{MARGIN}" y1="{MARGIN}" x2="{MARGIN}" y2="{HEIGHT - MARGIN}" stroke="black"/>',
             f'<text x="{WIDTH / 2}" y="{HEIGHT - 25}" text-anchor="middle">step time (s)</text>',
             f'<text x="18" y="{HEIGHT / 2}" text-anchor="middle" transform="rotate(-90 18 {HEIGHT / 2})">'
             f'{label}</text>']
    for value, tick in ((x_lo, "lo"), (x_hi, "hi")):
        parts.append(f'<text x="{px(value):.1f}" y="{HEIGHT - MARGIN + 15}" text-anchor="middle">{value:.3g}</text>')
    for value in (y_lo, y_hi):
        parts.append(f'<text x="{MARGIN - 5}" y="{py(value) + 4:.1f}" text-anchor="end">{value:.3g}</text>')
    frontier = [result.outcomes[i] for i in result.pareto]
    path = " ".join(f"{px(o.result.estimate.step_time_s):.1f},{py(y_of(o)):.1f}" for o in frontier)
    parts.append(f'<polyline points="{path}" fill="none" stroke="#1f77b4" stroke-width="1.5"/>')
    for index, outcome in planned:
        on = index in result.pareto
        x, y = px(outcome.result.estimate.step_time_s), py(y_of(outcome))
        parts.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{4 if on else 3}" '
                     f'fill="{"#1f77b4" if on else "#bbbbbb"}"><title>'
                     f'{escape(outcome.used.describe(result.cluster))}</title></circle>')
        if on:
            parts.append(f'<text x="{x + 6:.1f}" y="{y - 6:.1f}">'
                         f'{escape(outcome.used.describe(result.cluster))}</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def _span(values: list[float]) -> tuple[float, float]:
    lo, hi = min(values), max(values)
    if hi - lo < 1e-12 * max(1.0, abs(hi)):
        pad = max(abs(hi) * 0.05, 1e-9)
        return lo - pad, hi + pad
    pad = (hi - lo) * 0.05
    return lo - pad, hi + pad
