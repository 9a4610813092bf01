"""Terminal tables shared by `plan`, `evaluate` and `show`, narrow enough for 80 columns.

Nothing is cut: every column wraps (long words fold onto the next line) instead of ending
in an ellipsis, and the wide parts are shortened by rule, the same rule everywhere:

- GPU names drop the form factor and the memory token and end in the memory in GiB:
  `A100-SXM4-80GB` -> `A100-80G`, `V100-SXM2-32GB` -> `V100-32G`, `H200-SXM-141GB` -> `H200-141G`.
  Names without such tokens (`T4`, `RTX-4090`, `MI300X`, custom names) stay as they are, and
  so do names whose short forms would collide in one cluster. A legend under the tables
  gives the full name of each shortened one.
- Layer spans name the first and last layer, sharing their prefix: `block.16..23`.
- Rank lists are ranges (`0-15, 32-47`); many equal blocks at a fixed step are written
  `0-7, 16-23, .., 592-599 (38 × 8, step 16)`: the first two, the last, how many of what
  size. A long list wraps between ranges.

Names from files (model, cluster, GPU, layer names) are escaped: they print literally.
"""

from __future__ import annotations

import re
from typing import Iterable, Mapping

from rich import box
from rich.table import Table

from ..cost.evaluate import Estimate
from ..inputs.hardware import GIB, Cluster
from ..core.markup import esc
from ..plan import Plan, Replica, Stage, rank_ranges
from .credibility import mfu_above_published

# tokens of a catalog GPU name that the short label drops: form factor and memory size
_DROPPED_TOKEN = re.compile(r"^(SXM\d*|PCIE|NVL|\d+GB)$", re.IGNORECASE)
MIN_REGULAR_BLOCKS = 4  # a rank list of at least this many equal blocks at a fixed step is summarised



def dims_text(stage, replicas: list[Replica] | None = None) -> str:
    """A stage's 'tp/dp/zero' cell; with context parallelism a line 'cp N ring', with expert
    parallelism a line 'ep N' (and 'etp N' where it is not tp). Under per-replica TP, with `replicas`
    (one GPU type's row): their own degrees ('2' or '1,2')."""
    tp = stage.tp_label() if replicas is None else ",".join(map(str, sorted({stage.replica_tp(r) for r in replicas})))
    return (f"{tp}/{stage.dp}/{stage.zero}" + (f"\ncp {stage.cp} {stage.cp_kind}" if stage.cp > 1 else "")
            + (f"\nep {stage.ep}" + (f" etp {stage.etp}" if stage.etp and stage.etp != stage.tp else "")
               if stage.ep > 1 or stage.etp else ""))

def precision_text(training) -> str:
    """A training's dtype with its fp8 recipe, its TF32 setting under fp32, torch.compile, an MoE
    dispatcher other than alltoall and the fp8 all-gather: `fp8 (torchao-rowwise), torch.compile`,
    `fp32 (TF32 matmuls allowed)`, `fp8, flex MoE dispatcher`, `fp8, fp8 FSDP all-gather`."""
    return (training.dtype + (f" ({training.fp8_recipe})" if training.fp8_recipe else "")
            + ("" if training.tf32_matmul is None else " (TF32 matmuls allowed)" if training.tf32_matmul
               else " (TF32 off)")
            + (", torch.compile" if training.compile else "")
            + (f", {training.moe_dispatcher} MoE dispatcher" if training.moe_dispatcher != "alltoall" else "")
            + (", fp8 FSDP all-gather" if training.fp8_all_gather else "")
            + (f", bf16 layers {training.bf16_layers[0]} + {training.bf16_layers[1]}" if training.bf16_layers != (0, 0)
               else ""))


def mfu_text(est: Estimate, plan: Plan) -> str:
    """`MFU 41.2%`, naming the peak it is relative to where that is TF32's (fp32 GEMMs on TF32),
    and, where it is above the best published MFU of the plan's GPUs (report.credibility),
    that ceiling and its run: `MFU 64.9% (above the best published Volta fp16 run, 52.0%: RUN)`
    (its source: mfu_source_lines)."""
    above = mfu_above_published(plan, est)
    return (f"MFU {est.mfu:.1%}" + (f" of {est.mfu_peak_dtype} peak" if "tf32" in est.mfu_peak_dtype else "")
            + (f" ({esc(above.text())})" if above else ""))


def mfu_source_lines(plan: Plan, est: Estimate) -> list[str]:
    """Where mfu_text names a published run, one line per run with its source."""
    above = mfu_above_published(plan, est)
    return [f"  published {esc(line)}" for line in above.sources()] if above else []


def headline(plan: Plan, est: Estimate) -> str:
    """The first line of every plan view: model, cluster, GPUs used, batch, dtype, schedule."""
    t = plan.training
    return (f"[bold]{esc(plan.model.name)}[/] on [bold]{esc(plan.cluster.name)}[/]: {est.num_gpus_used} of "
            f"{plan.cluster.num_gpus} GPUs, global batch {t.global_batch} x {t.seq_len}, {precision_text(t)}, "
            f"micro-batch {t.micro_batch}, {plan.num_microbatches} micro-batches, {t.schedule}"
            + (f" (V={t.virtual_stages} chunks per pipeline rank)" if t.virtual_stages > 1 else ""))


def short_gpu_name(name: str, memory_bytes: float) -> str:
    """`A100-SXM4-80GB` -> `A100-80G`: the name less its form-factor and memory tokens, plus
    the memory in GiB; a name with no such token is returned as it is."""
    tokens = name.split("-")
    kept = [t for t in tokens if not _DROPPED_TOKEN.match(t)]
    if len(kept) == len(tokens) or not kept:
        return name
    return f"{'-'.join(kept)}-{memory_bytes / GIB:.0f}G"


def gpu_labels(cluster: Cluster) -> dict[str, str]:
    """Each GPU type of the cluster -> its table label (short unless two types would share one)."""
    short = {g.name: short_gpu_name(g.name, g.memory_bytes) for g in cluster.gpu_types}
    taken: dict[str, int] = {}
    for label in short.values():
        taken[label] = taken.get(label, 0) + 1
    return {name: label if taken[label] == 1 else name for name, label in short.items()}


def gpu_legend(labels: Mapping[str, str]) -> str:
    """'A100-80G = A100-SXM4-80GB, ...' for the shortened labels ('' when none is)."""
    pairs = [f"{esc(label)} = {esc(name)}" for name, label in labels.items() if label != name]
    return ("GPUs: " + ", ".join(pairs)) if pairs else ""


def rank_text(ranks: Iterable[int]) -> str:
    """Sorted ranks as ranges; a long regular list (equal blocks at a fixed step) summarised."""
    spans = rank_ranges(sorted(ranks)).split(",")
    if len(spans) < MIN_REGULAR_BLOCKS:
        return ", ".join(spans)
    bounds = [tuple(int(x) for x in span.split("-")) if "-" in span else (int(span), int(span)) for span in spans]
    sizes = {b - a + 1 for a, b in bounds}
    steps = {bounds[i + 1][0] - bounds[i][0] for i in range(len(bounds) - 1)}
    if len(sizes) > 1 or len(steps) > 1:
        return ", ".join(spans)
    return f"{spans[0]}, {spans[1]}, .., {spans[-1]} ({len(spans)} × {sizes.pop()}, step {steps.pop()})"


def layer_span(plan: Plan, stage: Stage) -> str:
    """'[16, 34)\\nblock.15..head': the layer interval and its first and last layer names."""
    first, end = stage.layers
    a, b = plan.model.layers[first].name, plan.model.layers[end - 1].name
    if end - first == 1:
        names = a
    else:
        prefix = a[:a.rfind(".") + 1]
        names = f"{a}..{b[len(prefix):]}" if prefix and b.startswith(prefix) else f"{a}..{b}"
    return f"[{first}, {end})\n{esc(names)}"


def replicas_by_gpu(plan: Plan, replicas: tuple[Replica, ...]) -> dict[tuple[str, ...], list[Replica]]:
    """A stage's replicas by the GPU types of their ranks (one, or those of a TP group over several types, in
    rank order)."""
    groups: dict[tuple[str, ...], list[Replica]] = {}
    for r in replicas:
        types = tuple(dict.fromkeys(plan.cluster.group_of_rank(x).gpu.name for x in r.ranks))
        groups.setdefault(types, []).append(r)
    return groups


def types_label(labels: Mapping[str, str], types: tuple[str, ...]) -> str:
    """The label of a replicas_by_gpu key: `A100-80GB`, or `RTX-4090+RTX-3090` for a TP group over both."""
    return "+".join(labels[name] for name in types)


def shares_text(replicas: list[Replica]) -> str:
    """'16 × 4 samples': how many replicas take each batch share (samples per step)."""
    counts: dict[int, int] = {}
    for r in replicas:
        counts[r.batch_share] = counts.get(r.batch_share, 0) + 1
    return ", ".join(f"{n} × {share}" for share, n in sorted(counts.items(), reverse=True)) + " samples"


def stages_table(plan: Plan, est: Estimate, labels: Mapping[str, str], title: str,
                 per_microbatch: Mapping[int, str] | None = None) -> Table:
    """One row per stage and GPU type: layers, GPUs with their ranks and batch shares,
    tp/dp/zero (and cp), recomputation, and either each type's peak memory against capacity or (with
    `per_microbatch`, text by pipeline rank) the time per micro-batch."""
    table = Table(title=title, box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("stage", justify="right", overflow="fold")
    table.add_column("layers", overflow="fold")
    table.add_column("GPUs, ranks,\nsamples per replica", overflow="fold")
    table.add_column("tp/dp/\nzero", justify="right", overflow="fold")
    table.add_column("recompute", overflow="fold")
    if per_microbatch is None:
        table.add_column("peak/cap\nGiB", justify="right", overflow="fold")
    else:
        table.add_column("ms per mb\nfwd+bwd", justify="right", overflow="fold")
    interleaved = len(plan.stages) != plan.pp
    for s in plan.stages:
        label = str(s.index) + (f"\n(rank {s.pipeline_rank})" if interleaved else "")
        recompute = (f"block {s.recompute_layers}" if s.recompute == "block" else s.recompute) \
            + ("\n+seq-par" if s.sequence_parallel else "") + ("\n+offload" if s.offload else "") \
            + (f"\n+act offload {s.offload_activations}" if s.offload_activations else "")
        for i, (gpu, replicas) in enumerate(replicas_by_gpu(plan, s.replicas).items()):
            ranks = [x for r in replicas for x in r.ranks]
            head = i == 0
            if per_microbatch is None:
                peak = max(est.memory_by_rank[x].total_bytes for x in ranks)
                last = f"{peak / GIB:.1f}/{est.capacity_by_rank[ranks[0]] / GIB:.0f}"
            else:
                last = per_microbatch[s.pipeline_rank] if head else ""
            table.add_row(label if head else "", layer_span(plan, s) if head else "",
                          f"{len(ranks)}× {esc(types_label(labels, gpu))}\nranks {rank_text(ranks)}\n{shares_text(replicas)}",
                          dims_text(s, replicas) if s.mixed_tp else dims_text(s) if head else "",
                          recompute if head else "", last)
    return table
