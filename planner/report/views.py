"""The human views of `planner plan`, `planner evaluate` and `planner profile`, drawn on a
console the caller passes (the CLI's stdout). Rendering only: no decision to print or exit."""

from __future__ import annotations

import os

from rich.console import Console
from rich.table import Table

from ..cost.energy import rented_nodes, run_cost
from ..cost.reliability import reliability
from ..cost.runtimes import attention_kernels
from ..inputs.hardware import GIB
from ..core.markup import esc
from ..plan import Plan
from .costs import caps_lines, cost_lines, reliability_lines, run_lines
from .tables import (gpu_labels, gpu_legend, headline, mfu_source_lines, mfu_text, precision_text, rank_text,
                     stages_table)


def stdout_console() -> Console:
    """The console a command prints its human view on (no colour under NO_COLOR)."""
    return Console(highlight=False, no_color="NO_COLOR" in os.environ)


# how a runtime's schedule runs its pipeline sends (planner.cost.p2p.P2P_MODES), in the critical lines
P2P_WORDS = {"exchange": "blocking (both ends wait)", "sequential": "blocking (each message in turn)",
             "overlapped": "overlapped with compute"}


def critical_lines(plan: Plan, est, labels: dict[str, str]) -> list[str]:
    """What sets the step (planner.cost.explain): the critical rank and replica, the part and the
    link that weigh most on it, and MFU's convention."""
    c = est.critical
    if c is None:
        return []
    stages = ", ".join(str(i) for i in c.stages)
    held: dict[str, int] = {}  # the replica's GPUs by type (a TP group may span two: it runs at c.gpu's pace)
    for rank in c.ranks:
        name = plan.cluster.group_of_rank(rank).gpu.name
        held[name] = held.get(name, 0) + 1
    gpus = " + ".join(f"{n}× {esc(labels.get(name, name))}" for name, n in held.items()) \
        + (f" (at the {esc(labels.get(c.gpu, c.gpu))}'s pace)" if len(held) > 1 else "")
    lines = [f"critical: pipeline rank {c.pipeline_rank} (stage{'s' if len(c.stages) > 1 else ''} {stages}), "
             f"{gpus} ranks {rank_text(c.ranks)}: {c.micro_batches} "
             f"micro-batches × {c.per_microbatch_s * 1e3:.1f} ms; bound by {c.bound_by} "
             f"({est.breakdown_s[c.bound_by]:.3f} s of {est.step_time_s:.3f} s); "
             f"{c.model_flops_per_s / 1e12:.0f} of {c.peak_flops_per_s / 1e12:.0f} peak TFLOP/s per GPU"
             + (f"; waits {c.pp_comm_s:.3f} s on pipeline sends, {P2P_WORDS[c.p2p]}" if c.pp_comm_s > 0 else "")]
    for link in c.links:
        lines.append(f"  {link.role} link {esc(link.name)}: {link.bandwidth_bytes_per_s / 1e9:.3g} GB/s per GPU, "
                     f"{link.latency_s * 1e6:.0f} us; {link.exposed_s:.3f} s exposed"
                     + ("  <- most exposed" if link is c.link else ""))
    for b in est.pipeline_links:
        lines.append(f"  pipeline {b.stage}->{b.stage + 1} over {esc(b.name)}: {b.micro_batches} × "
                     f"{b.per_microbatch_s * 1e3:.1f} ms ({b.bytes_per_microbatch / 2**20:.1f} MiB each way), "
                     f"{P2P_WORDS[b.p2p]}; {b.exposed_s:.3f} s exposed, {b.overlapped_s:.3f} s "
                     + ("off the critical path" if b.blocking else "overlapped"))
    lines.append("MFU counts model FLOPs with causal attention at half the full s² (planner.cost.flops)")
    return lines + attention_kernel_lines(plan, labels) + mfu_source_lines(plan, est)


# what a planner.cost.attention_kernels name runs, for the attention line
KERNEL_WORDS = {"standard": "standard attention (no fused kernel under the runtime: s² scores saved)",
                "cutlass": "the CUTLASS memory-efficient kernel (no FlashAttention-2 before sm80)"}


def attention_kernel_lines(plan: Plan, labels: dict[str, str]) -> list[str]:
    """Where `flash` attention is priced as another kernel than FlashAttention-2 (cost.runtimes.attention_kernels)."""
    return [f"attention: flash on {esc(labels.get(name, name))} under {esc(plan.training.runtime)} runs "
            f"{KERNEL_WORDS.get(kernel, kernel)}" for name, kernel in attention_kernels(plan.cluster.gpu_types,
                                                                                       plan.training).items()]


def print_plan(result, console: Console | None = None, tokens: int | None = None) -> None:
    console = console or stdout_console()
    plan, est = result.plan, result.estimate
    est.check_credible()
    cluster = plan.cluster
    labels = gpu_labels(cluster)
    console.print(headline(plan, est))
    console.print(stages_table(plan, est, labels, "Stages"))
    if gpu_legend(labels):
        console.print(gpu_legend(labels))
    console.print(f"step {est.step_time_s:.3f} s   tokens/s {est.tokens_per_s:,.0f}   {mfu_text(est, plan)}   "
                  f"bubble {est.bubble_fraction:.1%}   "
                  + "   ".join(f"{k} {v:.3f}s" for k, v in est.breakdown_s.items()))
    for line in critical_lines(plan, est, labels):
        console.print(line)
    for line in money_lines(plan, est, tokens) + caps_lines(result):
        console.print(line)
    why = getattr(result, "not_proven", "")
    status = "proven optimal" if result.optimal else \
        f"not proven optimal (gap to lower bound {result.gap:.1%}{'; ' + esc(why) if why else ''})"
    console.print(f"solver: {status}; {result.candidates} stage configurations priced in {result.seconds:.2f} s"
                  + (f"; searched on {result.decomposition}" if result.decomposition != "exact" else ""))
    line = any_runtime_line(result)
    if line:
        console.print(line)


def money_lines(plan: Plan, est, tokens: int | None) -> list[str]:
    """The cost, energy and failures lines (report.costs), with a run of `tokens` tokens."""
    cost = run_cost(plan, est)
    failures = reliability(plan, est, rented_nodes(plan))
    lines = cost_lines(cost, tokens)
    if tokens:
        lines += run_lines(failures, cost, tokens)
    return lines + reliability_lines(failures)


def any_runtime_line(result) -> str | None:
    """What `--runtime any` would gain over the plan's runtime (SearchResult.any_runtime_step_s)."""
    step, note = getattr(result, "any_runtime_step_s", None), getattr(result, "any_runtime_note", None)
    if result.plan.training.runtime == "any":
        return None
    if step is None:
        return f"--runtime any: {esc(note)}" if note else None
    gain = max(0.0, 1.0 - step / result.estimate.step_time_s)
    if gain < 5e-4:
        return ("a runtime with uneven shares and per-stage TP would be no faster: this plan is optimal "
                "under --runtime any too")
    return (f"a runtime with uneven shares and per-stage TP would be {gain:.1%} faster "
            f"({step:.3f} s, --runtime any; this plan is what {esc(result.plan.training.runtime)} can run)")


def print_estimate(plan: Plan, estimate, console: Console | None = None, tokens: int | None = None) -> None:
    console = console or stdout_console()
    estimate.check_credible()
    t = plan.training
    console.print(f"[bold]{esc(plan.model.name)}[/] on [bold]{esc(plan.cluster.name)}[/] "
                  f"({estimate.num_gpus_used} of {plan.cluster.num_gpus} GPUs), global batch {t.global_batch} "
                  f"x {t.seq_len} tokens, {precision_text(t)}, micro-batch {t.micro_batch}, "
                  f"{t.schedule}"
                  + (f" (V={t.virtual_stages})" if t.virtual_stages > 1 else ""))
    times = Table(title="Step time")
    times.add_column("part")
    times.add_column("seconds", justify="right")
    times.add_column("share", justify="right")
    for key, value in estimate.breakdown_s.items():
        times.add_row(key, f"{value:.3f}", f"{value / estimate.step_time_s:.1%}")
    times.add_row("[bold]step[/]", f"[bold]{estimate.step_time_s:.3f}[/]", "100%")
    console.print(times)
    console.print(f"tokens/s {estimate.tokens_per_s:,.0f}   model TFLOP/s per GPU "
                  f"{estimate.model_tflops_per_gpu:.1f}   {mfu_text(estimate, plan)}   "
                  f"bubble {estimate.bubble_fraction:.1%}")
    for line in critical_lines(plan, estimate, gpu_labels(plan.cluster)):
        console.print(line)
    for line in money_lines(plan, estimate, tokens):
        console.print(line)
    mem = Table(title="Peak memory per GPU type")
    for col in ("GPU", "peak GiB", "capacity GiB", "use"):
        mem.add_column(col, justify="left" if col == "GPU" else "right", overflow="fold")
    capacity = {estimate.gpu_by_rank[r]: c for r, c in estimate.capacity_by_rank.items()}
    for gpu, peak in estimate.peak_memory_by_gpu().items():
        share = peak / capacity[gpu]
        style = "red" if share > 1 else "green"
        mem.add_row(esc(gpu), f"{peak / GIB:.1f}", f"{capacity[gpu] / GIB:.0f}", f"[{style}]{share:.0%}[/]")
    console.print(mem)


def print_profile(data: dict, console: Console | None = None) -> None:
    console = console or stdout_console()
    console.print(f"[bold]{esc(data['model'])}[/] on {esc(data['device'])}: {data['dtype']}, "
                  f"seq-len {data['seq_len']}")
    table = Table(title="Measured per layer (median; ms)")
    for col in ("layer", "kind", "tp", "micro-batch", "fwd ms", "bwd ms", "saved MiB/sample"):
        table.add_column(col, justify="left" if col in ("layer", "kind") else "right")
    shown = set()
    for layer in data["layers"]:
        if layer["kind"] in shown:  # every decoder block carries the same measurement
            continue
        shown.add(layer["kind"])
        name = "block.*" if layer["kind"] == "decoder" else layer["name"]
        m = layer["measured"]
        for tp_key, per in m["by_tp"].items():
            for i, b in enumerate(m["micro_batch"]):
                table.add_row(esc(name), layer["kind"], tp_key, str(b), f"{per['fwd_s'][i] * 1e3:.3f}",
                              f"{per['bwd_s'][i] * 1e3:.3f}",
                              f"{per['saved_bytes_per_sample'][i] / 2**20:.2f}")
    console.print(table)


__all__ = ["print_estimate", "print_plan", "print_profile", "stdout_console"]
