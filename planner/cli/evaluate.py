"""`planner evaluate`: flags or a plan file -> planner.api.evaluate -> the estimate; exit 1
when the configuration does not fit."""

from __future__ import annotations

import os
import sys

import click

from ..core.errors import BadInput
from ..api import EvaluateRequest, evaluate, evaluate_plan_file, evaluation_plan_json, input_files, require
from ..core.io import json_text
from ..core.markup import esc
from ..core.outfile import check_output, write_output
from ..inputs.links import cluster_with_links
from ..inputs.hardware import GIB
from ..plan import SCHEDULES, STAGE_RECOMPUTE_MODES
from ..cost.runtimes import get_runtime
from ..report.views import print_estimate
from .options import common_options, links_option, measurement_options
from .output import EXIT_INFEASIBLE, emit, err, stdout, warn


@click.command("evaluate")
@common_options
@click.option("--tp", type=int, help="Tensor-parallel degree.")
@click.option("--pp", type=int, help="Pipeline-parallel degree.")
@click.option("--dp", type=int, help="Data-parallel degree.")
@click.option("--micro-batch", type=int, help="Sequences per micro-batch.")
@click.option("--recompute", type=click.Choice(STAGE_RECOMPUTE_MODES), default="none", show_default=True,
              help="block: recompute only the first --recompute-layers decoder blocks of each chunk.")
@click.option("--recompute-layers", type=click.IntRange(0), default=0, show_default=True,
              help="With --recompute block: decoder blocks per chunk that recompute (Megatron --recompute-num-layers).")
@click.option("--offload", is_flag=True,
              help="ZeRO-Offload: optimizer states and fp32 master weights in host memory, the step on the CPU.")
@click.option("--offload-activations", type=click.IntRange(0), default=0, show_default=True,
              help="Activation offload: decoder blocks per chunk (its first) whose saved activations go to host "
                   "memory over PCIe (Megatron --cpu-offloading-num-layers).")
@click.option("--zero", type=click.IntRange(0, 3), default=0, show_default=True, help="ZeRO stage.")
@click.option("--sequence-parallel", is_flag=True, help="Megatron sequence parallelism.")
@click.option("--cp", type=int, default=1, show_default=True,
              help="Context-parallel degree: GPUs sharing each sequence (each replica is tp x cp GPUs).")
@click.option("--cp-kind", type=click.Choice(("ring", "all-to-all")), default="ring", show_default=True,
              help="ring: Ring Attention (Megatron CP, torchtitan CP); all-to-all: DeepSpeed-Ulysses.")
@click.option("--ep", type=int, default=1, show_default=True,
              help="Expert-parallel degree (MoE): carved from the TP x CP x DP ranks; divides the experts.")
@click.option("--etp", type=int, default=None, help="Expert tensor-parallel degree [default: --tp].")
@click.option("--schedule", type=click.Choice(tuple(SCHEDULES)), default=None,
              help="Pipeline schedule [default: interleaved if --virtual-stages > 1, else 1f1b].")
@click.option("--virtual-stages", type=int, default=1, show_default=True, help="Interleaved chunks per rank.")
@click.option("--plan", "plan_file", type=str, default=None, help="Re-price a plan JSON instead of flags.")
@measurement_options
@links_option
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
@click.option("-o", "--output", type=str, default=None, help="Also write the JSON to FILE.")
@click.option("--plan-out", type=str, default=None, metavar="FILE",
              help="Also write the configuration as a plan file (planner.plan/v1, as `plan -o` writes one) for "
                   "validate, export and run; none when it does not fit (exit 1).")
def evaluate_command(model_name, cluster_name, global_batch, seq_len, dtype, fp8_recipe, torch_compile, tf32, attention,
                     optimizer,
                     tp, pp, dp, micro_batch,
                     recompute, recompute_layers, offload, offload_activations, zero, sequence_parallel, cp, cp_kind, ep, etp, schedule,
                     virtual_stages, plan_file, runtime, profiles,
                     calibrations, links, as_json, output, plan_out) -> None:
    """Price one configuration: step time, its breakdown, memory per GPU type.

    \b
    Examples:
      planner evaluate --model llama-3-8b --cluster dgx-a100 --global-batch 256 \\
          --seq-len 4096 --tp 4 --pp 2 --dp 4 --micro-batch 1 --recompute selective
      planner evaluate --plan plan.json --json
      planner evaluate --model gpt2 --cluster consumer-3090-4090 --global-batch 64 \\
          --seq-len 1024 --tp 1 --pp 1 --dp 16 --micro-batch 4 --plan-out hand.json
    """
    if runtime is not None:
        get_runtime(runtime)  # an unknown name is a bad input before anything is read
    inputs = input_files(model_name, cluster_name, profiles, calibrations, plan_file, links)
    if plan_out:
        check_output(plan_out, inputs, "--plan-out")  # before pricing, as `plan -o` does
        if output and os.path.abspath(output) == os.path.abspath(plan_out):
            raise BadInput("names the same file as -o (the report); give the plan its own file", "--plan-out")
    if plan_file:
        given = [flag for flag, value in (("--model", model_name), ("--cluster", cluster_name),
                                          ("--global-batch", global_batch), ("--seq-len", seq_len),
                                          ("--tp", tp), ("--pp", pp), ("--dp", dp), ("--micro-batch", micro_batch),
                                          ("--dtype", dtype), ("--fp8-recipe", fp8_recipe),
                                          ("--compile", torch_compile or None), ("--links", links),
                                          ("--tf32" if tf32 else "--no-tf32", tf32),
                                          ("--cp", cp if cp != 1 else None),
                                          ("--ep", None if ep == 1 else ep), ("--etp", etp),
                                          ("--offload-activations", offload_activations or None)) if value is not None]
        if given:
            raise BadInput(f"a plan file carries its own configuration; drop {', '.join(given)}", "--plan")
        result = evaluate_plan_file(plan_file, tuple(profiles), tuple(calibrations), warn, runtime)
    else:
        cluster = cluster_with_links(require(cluster_name, "--cluster"), links) if links else cluster_name
        result = evaluate(EvaluateRequest(
            model=model_name, cluster=cluster, global_batch=global_batch, seq_len=seq_len, tp=tp, pp=pp, dp=dp,
            micro_batch=micro_batch, dtype=dtype, attention=attention, optimizer=optimizer,
            fp8_recipe=fp8_recipe or "", compile=torch_compile, tf32=tf32, recompute=recompute,
            recompute_layers=recompute_layers, offload=offload, offload_activations=offload_activations, zero=zero,
            sequence_parallel=sequence_parallel, schedule=schedule, virtual_stages=virtual_stages,
            profiles=tuple(profiles), calibrations=tuple(calibrations), runtime=runtime or "megatron",
            cp=cp, cp_kind=cp_kind, ep=ep, etp=etp), warn)
    plan, estimate = result.plan, result.estimate
    # the plan file is checked (exit 2 when not a valid plan) before anything is printed
    plan_data = evaluation_plan_json(result, runtime) if plan_out and estimate.fits else None
    emit(result.to_json(), output, as_json, lambda: print_estimate(plan, estimate), None, inputs)
    if not estimate.fits:
        worst = max(estimate.overflows, key=lambda o: o.over_bytes)
        err(f"does not fit: rank {worst.rank} ({worst.gpu}) needs {worst.need_bytes / GIB:.1f} GiB of "
            f"{worst.capacity_bytes / GIB:.1f} GiB (over by {worst.over_bytes / GIB:.1f} GiB; "
            f"{len(estimate.overflows)} ranks overflow)" + (f"; no plan written to {plan_out}" if plan_out else ""))
        sys.exit(EXIT_INFEASIBLE)
    if plan_data is not None:
        write_output(plan_out, json_text(plan_data) + "\n", inputs=inputs)
        if not as_json:
            stdout().print(f"plan written to {esc(plan_out)}")
