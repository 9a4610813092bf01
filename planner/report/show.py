"""`planner show`: a plan file in the terminal, and its pipeline timeline as an SVG.

The terminal view prices the plan with evaluate.evaluate (default cost parameters) and
prints its stages on their devices, memory per device against capacity, the step-time
breakdown and the headline figures.

The timeline (`--svg FILE`, needs matplotlib) draws one step of the pipeline, one row per
pipeline rank. Per-micro-batch forward and backward times come from the same prices as
evaluate's (replica_pricer.PlanPricer, planner.cost.pricing.ChunkTime), for the replica that sets the
rank's busy time (micro-batches x time per micro-batch, the same replica evaluate picks);
a schedule that splits the backward (zero bubble) draws its input-gradient (B) and
weight-gradient (W) passes as distinct boxes, W being the weight GEMMs' time (LayerTime.wgrad_s);
the rank's per-micro-batch communication is split between the boxes: TP all-reduces where
cost.layer_time puts them, the pipeline send/receive half to the forward and half to the
backward, ZeRO-2 reduce-scatters to the backward, ZeRO-3 gathers one to each. So forward
+ backward of a box pair equals evaluate's per-micro-batch time.

A rank's replicas may run different numbers of micro-batches from another rank's (uneven
data-parallel widths and shares). Micro-batch j of a rank that runs n_dst micro-batches
waits for micro-batch floor(j * n_src / n_dst) of its neighbour (forward: the rank
before; backward: the rank after): samples dealt round-robin over the neighbour's
replicas. For equal counts this is the usual one-to-one dependency. Gradient reduction
and the optimizer step after the last backward are not drawn; a dashed line marks the
predicted step time, which includes them.
"""

from __future__ import annotations

import io
import math
import os
from dataclasses import dataclass
from typing import Any, Mapping

from rich import box
from rich.console import Console
from rich.table import Table

from ..cost.formulas import CostParams
from ..cost.states import MemoryBreakdown
from ..core.errors import BadInput
from ..cost.evaluate import Estimate
from ..cost.replica_pricer import PlanPricer
from ..inputs.hardware import GIB
from ..core.markup import esc
from ..core.outfile import write_output
from ..plan import Plan, Stage
from .routes import stage_routes
from ..schedules import get_schedule
from .tables import gpu_labels, gpu_legend, headline, mfu_source_lines, mfu_text, stages_table

MAX_DRAWN_MICROBATCHES = 64
BAR_WIDTH = 18
INSTALL_HINT = "pip install 'planner[viz]', or from a checkout pip install -e '.[viz]' (matplotlib)"

# memory parts in bar order: (MemoryBreakdown attribute, label, glyph, colour)
MEMORY_PARTS = (("weights_bytes", "weights", "█", "blue"),
                ("gradients_bytes", "grads", "▓", "magenta"),
                ("optimizer_bytes", "optimizer", "▒", "yellow"),
                ("activations_bytes", "activations", "░", "cyan"),
                ("reserved_bytes", "reserved", "▪", "bright_black"))
FREE_GLYPH = "·"


# --- per-micro-batch times -----------------------------------------------------------------


@dataclass(frozen=True)
class RankTiming:
    """One pipeline rank's replica that sets its busy time, per micro-batch."""

    pipeline_rank: int
    stages: tuple[int, ...]  # stage indices on this rank (several when interleaved)
    gpu: str
    dp_rank: int
    num_microbatches: int
    fwd_s: float
    bwd_s: float  # the whole backward: B and, for a split backward, W
    wgrad_s: float = 0.0  # its weight-gradient part (a split backward's W pass, LayerTime.wgrad_s)

    @property
    def per_microbatch_s(self) -> float:
        return self.fwd_s + self.bwd_s

    @property
    def busy_s(self) -> float:
        return self.num_microbatches * self.per_microbatch_s


def rank_timings(plan: Plan, params: CostParams | Mapping[str, CostParams] | None = None) -> list[RankTiming]:
    """Per pipeline rank, the busiest replica's micro-batch count and its forward and backward
    time per micro-batch (module docstring)."""
    chunks: dict[int, list[Stage]] = {}
    for st in plan.stages:
        chunks.setdefault(st.pipeline_rank, []).append(st)
    pricer = PlanPricer(plan, params)
    out = []
    for k in range(plan.pp):
        rank_chunks = chunks[k]
        best: RankTiming | None = None
        for replica in rank_chunks[0].replicas:
            price = pricer.replica(rank_chunks, replica)
            fwd = sum(c.forward_s for c in price.chunks)
            bwd = sum(c.backward_s for c in price.chunks)
            timing = RankTiming(k, tuple(st.index for st in rank_chunks), price.gpu.name, replica.dp_rank,
                                replica.batch_share // plan.training.micro_batch, fwd, bwd,
                                sum(c.span.wgrad_s for c in price.chunks))
            if best is None or timing.busy_s > best.busy_s:
                best = timing
        out.append(best)
    return out


# --- the schedule --------------------------------------------------------------------------


@dataclass(frozen=True)
class Op:
    pipeline_rank: int
    kind: str  # "F", "B" or "W" (a split backward's weight gradient)
    microbatch: int
    start_s: float
    end_s: float


def simulate(timings: list[RankTiming], schedule: str) -> list[Op]:
    """Start and end of every forward and backward of one step, ranks following `schedule`'s
    order (Schedule.order; interleaved runs as 1F1B over each rank's chunks together) and
    waiting for their neighbours (module docstring)."""
    pp = len(timings)
    counts = [t.num_microbatches for t in timings]
    split = get_schedule(schedule).split_backward
    order = get_schedule(schedule).order

    def duration(rank: int, kind: str) -> float:
        """F the forward; B the whole backward, or split its input-gradient part; W the rest."""
        timing = timings[rank]
        if kind == "F":
            return timing.fwd_s
        if kind == "W":
            return timing.wgrad_s
        return timing.bwd_s - timing.wgrad_s if split else timing.bwd_s
    queues = [order(k, pp, counts[k]) for k in range(pp)]
    heads = [0] * pp
    free = [0.0] * pp
    done: dict[tuple[int, str, int], float] = {}
    ops: list[Op] = []

    def dependency(rank: int, kind: str, microbatch: int) -> tuple[int, str, int] | None:
        if kind == "W":  # the weight gradient needs its own B only
            return (rank, "B", microbatch)
        if kind == "F":
            if rank == 0:
                return None
            return (rank - 1, "F", microbatch * counts[rank - 1] // counts[rank])
        if rank == pp - 1:
            return (rank, "F", microbatch)
        return (rank + 1, "B", microbatch * counts[rank + 1] // counts[rank])

    def ready(rank: int, position: int) -> bool:
        kind, microbatch = queues[rank][position]
        dep = dependency(rank, kind, microbatch)
        return dep is None or dep in done

    remaining = sum(len(q) for q in queues)
    while remaining:
        progressed = False
        for k in range(pp):
            while heads[k] < len(queues[k]) and ready(k, heads[k]):
                kind, j = queues[k][heads[k]]
                dep = dependency(k, kind, j)
                start = max(free[k], done[dep] if dep is not None else 0.0)
                end = start + duration(k, kind)
                done[(k, kind, j)] = end
                free[k] = end
                ops.append(Op(k, kind, j, start, end))
                heads[k] += 1
                remaining -= 1
                progressed = True
        if progressed or not remaining:
            continue
        # uneven micro-batch counts can leave every rank waiting: let one run a later
        # forward that is ready ahead of its blocked backward
        for k in range(pp):
            later = next((i for i in range(heads[k] + 1, len(queues[k]))
                          if queues[k][i][0] == "F" and ready(k, i)), None)
            if later is not None:
                queues[k].insert(heads[k], queues[k].pop(later))
                break
        else:  # pragma: no cover - every backward follows its own forward
            raise RuntimeError("pipeline schedule deadlocked")
    return ops


# --- terminal view -------------------------------------------------------------------------


def terminal_console() -> Console:
    return Console(highlight=False, no_color="NO_COLOR" in os.environ)


def memory_bar(mem: MemoryBreakdown, capacity: float, width: int = BAR_WIDTH) -> str:
    """Rich markup of a bar of `width` cells: one glyph (and colour) per memory part, in
    proportion to capacity, then free cells; over capacity the bar is scaled to the total."""
    parts = [getattr(mem, attr) for attr, *_ in MEMORY_PARTS]
    scale = max(capacity, mem.total_bytes)
    filled = min(width, round(mem.total_bytes / scale * width)) if scale > 0 else 0
    exact = [x / scale * width for x in parts] if scale > 0 else [0.0] * len(parts)
    cells = [int(x) for x in exact]
    # largest remainders get the cells left to fill
    for i in sorted(range(len(parts)), key=lambda i: exact[i] - cells[i], reverse=True):
        if sum(cells) >= filled:
            break
        cells[i] += 1
    while sum(cells) > filled:
        i = max(range(len(cells)), key=lambda i: cells[i])
        cells[i] -= 1
    text = "".join(f"[{colour}]{glyph * n}[/]" for n, (_, _, glyph, colour) in zip(cells, MEMORY_PARTS) if n)
    if mem.total_bytes > capacity:
        return f"[red]{text}[/][red bold]![/]"
    return text + f"[dim]{FREE_GLYPH * (width - filled)}[/]"


def print_show(plan: Plan, est: Estimate, timings: list[RankTiming], console: Console) -> None:
    cluster = plan.cluster
    labels = gpu_labels(cluster)
    console.print(headline(plan, est) + f", pp {plan.pp}")
    per_mb = {k: f"{timing.fwd_s * 1e3:.1f}+{timing.bwd_s * 1e3:.1f}" + ("\n(all chunks)" if len(timing.stages) > 1 else "")
              for k, timing in enumerate(timings)}
    console.print(stages_table(plan, est, labels, "Stages on devices", per_mb))
    routes = stage_routes(plan)
    if routes:
        console.print("Network between stages (the cluster's topology: widest path, its narrowest hop):")
        for route in routes:
            console.print("  " + esc(route.describe()))

    memory = Table(title="Memory per device (the fullest rank of each GPU type on each pipeline rank)",
                   box=box.SIMPLE_HEAD, pad_edge=False)
    memory.add_column("pp", justify="right", min_width=2, overflow="fold")
    memory.add_column("GPU", overflow="fold")
    memory.add_column("memory", min_width=BAR_WIDTH + 1, overflow="fold")
    memory.add_column("GiB (use)", justify="right", overflow="fold")
    memory.add_column("W/G/O/A/R GiB", justify="right", overflow="fold")
    chunks: dict[int, Stage] = {}
    for s in plan.stages:
        chunks.setdefault(s.pipeline_rank, s)
    for k in range(plan.pp):
        by_type: dict[str, list[int]] = {}  # the pipeline rank's GPUs by their own type
        for x in (x for r in chunks[k].replicas for x in r.ranks):
            by_type.setdefault(plan.cluster.group_of_rank(x).gpu.name, []).append(x)
        for i, (gpu, ranks) in enumerate(by_type.items()):
            rank = max(ranks, key=lambda x: est.memory_by_rank[x].total_bytes)
            mem, cap = est.memory_by_rank[rank], est.capacity_by_rank[rank]
            use = mem.total_bytes / cap
            split = "/".join(f"{getattr(mem, attr) / GIB:.1f}" for attr, *_ in MEMORY_PARTS)
            memory.add_row(str(k) if i == 0 else "", esc(labels[gpu]), memory_bar(mem, cap),
                           f"{mem.total_bytes / GIB:.1f}/{cap / GIB:.0f} "
                           f"([{'red' if use > 1 else 'green'}]{use:.0%}[/])", split)
    console.print(memory)
    console.print("  " + "  ".join(f"[{colour}]{glyph}[/] {label[0].upper()} {label}" for _, label, glyph, colour in MEMORY_PARTS)
                  + f"  [dim]{FREE_GLYPH}[/] free")
    if gpu_legend(labels):
        console.print("  " + gpu_legend(labels))

    times = Table(title="Step time", box=box.SIMPLE_HEAD, pad_edge=False)
    for col, justify in (("part", "left"), ("seconds", "right"), ("share", "right"), ("", "left")):
        times.add_column(col, justify=justify)
    for key, value in est.breakdown_s.items():
        share = value / est.step_time_s if est.step_time_s > 0 else 0.0
        times.add_row(key, f"{value:.4f}", f"{share:.1%}", "█" * round(share * 20))
    times.add_row("[bold]step[/]", f"[bold]{est.step_time_s:.4f}[/]", "100%", "")
    console.print(times)
    console.print(f"step {est.step_time_s:.3f} s   tokens/s {est.tokens_per_s:,.0f}   "
                  f"samples/s {est.samples_per_s:,.1f}   model TFLOP/s per GPU {est.model_tflops_per_gpu:.1f}   "
                  f"{mfu_text(est, plan)}   bubble {est.bubble_fraction:.1%}")
    for line in mfu_source_lines(plan, est):
        console.print(line)
    if not est.fits:
        worst = max(est.overflows, key=lambda o: o.over_bytes)
        console.print(f"[red bold]does not fit[/]: {len(est.overflows)} ranks overflow; rank {worst.rank} "
                      f"({esc(worst.gpu)}) needs {worst.need_bytes / GIB:.1f} GiB of {worst.capacity_bytes / GIB:.1f} GiB")


# --- SVG timeline --------------------------------------------------------------------------


def require_matplotlib() -> Any:
    """The matplotlib package, or BadInput naming the install command."""
    try:
        import matplotlib
        import matplotlib.figure  # fail here, not halfway through drawing
    except ImportError:
        raise BadInput(f"needs matplotlib ({INSTALL_HINT})", "--svg") from None
    return matplotlib


def write_timeline_svg(plan: Plan, est: Estimate, timings: list[RankTiming], path: str,
                       max_microbatches: int = MAX_DRAWN_MICROBATCHES, inputs: tuple[str, ...] = ()) -> int:
    """Draw one step's pipeline timeline to `path` as SVG (planner.core.outfile.write_output: never
    onto a link or one of `inputs`); returns the number of boxes drawn."""
    require_matplotlib()
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    t = plan.training
    ops = simulate(timings, t.schedule)
    longest = max(x.num_microbatches for x in timings)
    truncated = longest > max_microbatches
    # the first `max_microbatches` of the longest rank, and the same fraction of the others
    limits = [math.ceil(x.num_microbatches * min(1.0, max_microbatches / longest)) for x in timings]
    drawn = [op for op in ops if op.microbatch < limits[op.pipeline_rank]]
    pp = len(timings)
    end_s = max(op.end_s for op in drawn)
    scale, unit = (1e3, "ms") if end_s < 10 else (1.0, "s")

    width_in = min(24.0, 8.0 + 0.25 * max(limits))
    fig = Figure(figsize=(width_in, 1.8 + 0.55 * pp))
    ax = fig.add_subplot()
    x_end = max(end_s, 0.0 if truncated else est.step_time_s) * scale * 1.01
    points_per_unit = 0.8 * width_in * 72 / x_end  # the axes span about 80% of the figure
    colours = {"F": "#4C72B0", "B": "#55A868", "W": "#DD8452"}
    kinds = ("F", "B", "W") if get_schedule(t.schedule).split_backward else ("F", "B")
    for k in range(pp):
        for kind in kinds:  # one collection per row and kind keeps long pipelines quick
            spans = [(op.start_s * scale, (op.end_s - op.start_s) * scale)
                     for op in drawn if op.pipeline_rank == k and op.kind == kind]
            ax.broken_barh(spans, (k - 0.4, 0.8), facecolors=colours[kind], edgecolor="white", linewidth=0.5)
    for op in drawn:
        label = str(op.microbatch + 1)
        if (op.end_s - op.start_s) * scale * points_per_unit >= 5 * len(label) + 4:  # boxes with room
            ax.text((op.start_s + op.end_s) / 2 * scale, op.pipeline_rank, label, ha="center", va="center",
                    fontsize=6, color="white")
    if not truncated:
        ax.axvline(est.step_time_s * scale, color="#C44E52", linestyle="--", linewidth=1)
    ax.set_yticks(range(pp))
    ax.set_yticklabels([f"rank {x.pipeline_rank}: {x.gpu}\n({x.num_microbatches} mb)" for x in timings],
                       fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel(f"time ({unit})")
    ax.set_xlim(0, x_end)
    pipeline_schedule = get_schedule(t.schedule)
    schedule = pipeline_schedule.title(t.virtual_stages)
    title = (f"{plan.model.name} on {plan.cluster.name}: one step, {schedule}, micro-batch {t.micro_batch}; "
             f"predicted step {est.step_time_s * scale:.1f} {unit}, bubble {est.bubble_fraction:.1%}")
    if pipeline_schedule.drawn_as is not None:
        title += f"\napproximation: drawn as {pipeline_schedule.drawn_as}"
    if truncated:
        title += f"\nfirst {max_microbatches} of {longest} micro-batches drawn"
    ax.set_title(title, fontsize=9, parse_math=False)  # a `$` in a name is not TeX
    ax.grid(axis="x", linewidth=0.3, alpha=0.5)
    ax.set_axisbelow(True)
    handles = [Patch(color=colours["F"], label="forward")]
    if "W" in kinds:
        handles += [Patch(color=colours["B"], label="backward: input gradient (B)"),
                    Patch(color=colours["W"], label="backward: weight gradient (W)")]
    else:
        handles.append(Patch(color=colours["B"], label="backward"))
    if not truncated:
        handles.append(Patch(facecolor="white", edgecolor="#C44E52", linestyle="--",
                             label="predicted step (with gradient reduction and optimizer)"))
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), fontsize=7, frameon=False)
    fig.tight_layout(rect=(0, 0.3 / fig.get_figheight(), 1, 1))
    svg = io.BytesIO()
    fig.savefig(svg, format="svg", metadata={"Date": None})
    write_output(path, svg.getvalue(), inputs=inputs)
    return len(drawn)
