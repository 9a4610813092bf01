"""The human lines of what a plan costs (planner.cost.energy) and of the choice among subsets of
nodes (planner.api.objective). Rendering only."""

from __future__ import annotations

from ..core.markup import esc
from ..cost.energy import J_PER_KWH, RunCost


def cost_lines(cost: RunCost, tokens: int | None = None) -> list[str]:
    """'cost: ...' and 'energy: ...' (figures unknown named), and with `tokens` the run's totals."""
    idle = f", {cost.gpus_idle} of them idle" if cost.gpus_idle else ""
    if cost.usd_per_hour is None:
        money = f"cost: no price for {', '.join(map(esc, cost.missing_price))} (price_per_gpu_hour in the cluster file)"
    else:
        money = (f"cost: ${cost.usd_per_hour:,.2f}/h for {cost.gpus_rented} GPUs{idle}; ${sig(cost.usd_per_step)} "
                 f"per step, ${sig(cost.usd_per_million_tokens)} per million tokens")
    if cost.energy_J_per_step is None:
        energy = f"energy: no power figures for {', '.join(map(esc, cost.missing_power))}"
    else:
        energy = (f"energy: {sig(cost.energy_J_per_step / J_PER_KWH)} kWh per step, {sig(cost.energy_J_per_token)} "
                  f"J per token, {sig(cost.power_W / 1e3)} kW" + (f" (PUE {cost.pue:g})" if cost.pue != 1 else ""))
    lines = [money, energy]
    if tokens:
        run = cost.for_tokens(tokens)
        parts = [f"run of {tokens:,} tokens: {run.steps:,} steps, {run.wall_s / 86400:,.2f} days"]
        if run.usd is not None:
            parts.append(f"${run.usd:,.0f}")
        if run.energy_MWh is not None:
            parts.append(f"{run.energy_MWh:,.2f} MWh")
        lines.append(", ".join(parts))
    return lines


def run_lines(failures, cost: RunCost, tokens: int) -> list[str]:
    """With failures, the run's expected wall time, interruptions and dollars."""
    wall = failures.run_wall_s(tokens)
    money = f", ${cost.usd_per_hour * wall / 3600:,.0f}" if cost.usd_per_hour is not None else ""
    return [f"  with failures: {wall / 86400:,.2f} days, {wall / failures.mtbf_s:,.0f} interruptions expected{money}"]


def reliability_lines(failures) -> list[str]:
    """'failures: ...': the job's interruptions, its checkpoint and interval, the goodput."""
    return [f"failures: one every {sig(failures.mtbf_s / 3600)} h; checkpoint {sig(failures.checkpoint_bytes / 1e9)} GB "
            f"written in {sig(failures.checkpoint_write_s)} s every {sig(failures.checkpoint_interval_s / 60)} min "
            f"(Young/Daly); goodput {failures.efficiency:.1%} of the step's tokens/s "
            f"({failures.goodput_tokens_per_s:,.0f} tokens/s)"]


def objective_lines(result) -> list[str]:
    """What `--objective` chose (planner.api.objective.ObjectiveResult): the nodes rented, those left
    idle and what they would have added, and how many subsets were planned."""
    chosen, whole, cluster = result.chosen, result.whole, result.cluster
    lines = [f"objective {result.objective}: rents nodes {esc(chosen.used.describe(cluster))}; "
             f"{sum(o.result is not None for o in result.outcomes)} of {len(result.outcomes)} sets of nodes "
             f"planned" + ("" if result.every_count else " (each group at halvings of its nodes only)")
             + ("; proven" if result.proven else "; not proven (a search was cut short)")]
    idle = chosen.used.idle(cluster)
    if idle and whole is not None and whole.result is not None:
        left = ", ".join(f"{esc(name)} {nodes} nodes ({gpus} GPUs)" for name, nodes, gpus in idle)
        step = _change(whole.result.estimate.step_time_s, chosen.result.estimate.step_time_s)
        lines.append(f"  left idle: {left}; every node would change the step {step}"
                     + _money(whole, chosen) + _energy(whole, chosen))
    return lines


def _change(whole: float | None, chosen: float | None) -> str:
    if whole is None or chosen is None or chosen == 0:
        return "unknown"
    return f"{whole / chosen - 1:+.1%}"


def _money(whole, chosen) -> str:
    return f", dollars {_change(whole.cost.usd_per_step, chosen.cost.usd_per_step)}" \
        if whole.cost.usd_per_step is not None else ""


def _energy(whole, chosen) -> str:
    return f", energy {_change(whole.cost.energy_J_per_step, chosen.cost.energy_J_per_step)}" \
        if whole.cost.energy_J_per_step is not None else ""


def caps_lines(result) -> list[str]:
    """What `--power-caps` chose (SearchResult.power_caps): the caps per pipeline rank, the energy saved
    and the step's growth."""
    choice = getattr(result, "power_caps", None)
    if choice is None:
        return []
    data = choice.to_json()
    if not data["caps_W"]:
        return [f"power caps: none within +{choice.max_slowdown:.1%} of the step that saves energy "
                f"({data['plans_priced']} plans priced)"]
    caps = ", ".join(f"pipeline rank {k} at {v:g} W" for k, v in data["caps_W"].items())
    return [f"power caps: {caps}: {data['energy_saved_fraction']:.1%} less energy per step for a "
            f"{data['slowdown']:+.2%} step (at most +{choice.max_slowdown:.1%}); nvidia-smi -pl lines in the "
            f"launch files"]


def sig(value: float) -> str:
    """Three significant figures, thousands separated, without exponents (0.000123, 12,300)."""
    if value == 0 or value >= 100:
        return f"{value:,.0f}"
    digits = max(0, 2 - int(f"{value:e}".split("e")[1]))
    return f"{value:,.{digits}f}"
