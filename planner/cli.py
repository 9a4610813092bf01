"""Command-line interface: the only module that prints or exits.

Exit codes: 0 success; 1 no feasible plan (or the evaluated configuration does not fit);
2 bad input or usage.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any, Callable

import click
from rich.console import Console
from rich.table import Table

from .errors import BadInput, NoFeasiblePlan
from .hardware import GIB, GB, TFLOPS, US, Cluster, load_catalog, load_cluster
from .model import ATTENTION_KINDS, RECOMPUTE_MODES, Model, catalog_names, load_model
from .plan import SCHEDULES, Plan, Training, plan_from_json, structural_problems, uniform_plan

EXIT_OK, EXIT_INFEASIBLE, EXIT_BAD_INPUT = 0, 1, 2


def _stdout() -> Console:
    return Console(highlight=False, no_color="NO_COLOR" in os.environ)


def _err(message: str) -> None:
    click.echo(f"planner: {message}", err=True)


def _emit_json(data: Any, output: str | None, as_json: bool) -> None:
    text = json.dumps(data, indent=2, sort_keys=False)
    if output:
        try:
            Path(output).write_text(text + "\n")
        except OSError as exc:
            raise BadInput(f"cannot write: {exc.strerror}", output) from None
    if as_json:
        click.echo(text)


class PlannerGroup(click.Group):
    """Turns the core's typed errors into one line on stderr and an exit code."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except BadInput as exc:
            _err(str(exc))
            sys.exit(EXIT_BAD_INPUT)
        except NoFeasiblePlan as exc:
            _err(f"no feasible plan: {exc.message}")
            sys.exit(EXIT_INFEASIBLE)
        except click.UsageError as exc:
            hint = f" (see `{ctx.command_path} --help`)" if ctx else ""
            _err(f"{exc.format_message()}{hint}")
            sys.exit(EXIT_BAD_INPUT)
        except (click.exceptions.Exit, click.ClickException, click.Abort, SystemExit):
            raise
        except RecursionError:
            _err("input too deeply nested")
            sys.exit(EXIT_BAD_INPUT)
        except Exception as exc:  # noqa: BLE001 - a user never sees a traceback
            if os.environ.get("PLANNER_DEBUG"):
                raise
            _err(f"internal error: {type(exc).__name__}: {exc} (set PLANNER_DEBUG=1 for a traceback)")
            sys.exit(3)


@click.group(cls=PlannerGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="planner")
def main() -> None:
    """Plan distributed training of deep networks on clusters of mixed GPUs.

    \b
    Example:
      planner plan --model llama-3-8b --cluster a100-v100-mix --global-batch 512 --seq-len 4096
    """


# --- catalog listings ----------------------------------------------------------------------


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON on stdout.")
def gpus(as_json: bool) -> None:
    """List the GPU catalog with data-sheet figures and sources.

    \b
    Example:
      planner gpus --json | jq '.[] | select(.name=="H100-SXM5-80GB")'
    """
    catalog = load_catalog()
    rows = []
    for name, g in catalog.items():
        rows.append({
            "name": name, "vendor": g.vendor, "memory_GiB": g.memory_bytes / GIB,
            "peak_tflops": {d: f / TFLOPS for d, f in g.peak_flops},
            "hbm_GBps": g.hbm_bandwidth_bytes_per_s / GB,
            "intra_node": {"kind": g.intra_node.kind, "bandwidth_GBps": g.intra_node.bandwidth_bytes_per_s / GB,
                           "latency_us": g.intra_node.latency_s / US},
            "inter_node": {"kind": g.inter_node.kind, "bandwidth_GBps": g.inter_node.bandwidth_bytes_per_s / GB,
                           "latency_us": g.inter_node.latency_s / US},
            "source": g.source})
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    table = Table(title="GPU catalog (dense peaks)")
    for col in ("name", "GiB", "bf16 TF", "fp16 TF", "fp32 TF", "HBM GB/s", "intra-node GB/s"):
        table.add_column(col, justify="left" if col == "name" else "right")
    for r in rows:
        pk = r["peak_tflops"]
        table.add_row(r["name"], f"{r['memory_GiB']:g}", f"{pk['bf16']:g}" if "bf16" in pk else "-",
                      f"{pk.get('fp16', 0):g}", f"{pk.get('fp32', 0):g}", f"{r['hbm_GBps']:g}",
                      f"{r['intra_node']['bandwidth_GBps']:g}")
    _stdout().print(table)


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON on stdout.")
def models(as_json: bool) -> None:
    """List the built-in model catalog with parameter counts.

    \b
    Example:
      planner models --json
    """
    rows = []
    for name in catalog_names():
        m = load_model(name)
        c = m.config
        rows.append({"name": name, "model_type": c.model_type, "params": m.params,
                     "layers": c.num_layers, "hidden": c.hidden, "heads": c.num_heads,
                     "kv_heads": c.num_kv_heads, "ffn_hidden": c.ffn_hidden, "vocab": c.vocab,
                     "experts": c.num_experts})
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    table = Table(title="Model catalog")
    for col in ("name", "type", "params", "layers", "hidden", "heads/kv", "ffn", "vocab"):
        table.add_column(col, justify="left" if col in ("name", "type") else "right")
    for r in rows:
        table.add_row(r["name"], r["model_type"], f"{r['params'] / 1e9:.2f}B", str(r["layers"]),
                      str(r["hidden"]), f"{r['heads']}/{r['kv_heads']}", str(r["ffn_hidden"]), str(r["vocab"]))
    _stdout().print(table)


# --- shared inputs ---------------------------------------------------------------------------


def resolve_dtype(cluster: Cluster, dtype: str | None) -> str:
    """bf16 where every GPU supports it, else fp16; an explicit dtype some GPU lacks is bad input."""
    if dtype is None:
        return cluster.common_dtype()
    missing = [g.name for g in cluster.gpu_types if not g.supports(dtype)]
    if missing:
        raise BadInput(f"{', '.join(missing)} has no {dtype} support", "--dtype")
    return dtype


def check_training_inputs(model: Model, training: Training) -> None:
    c = model.config
    if c is not None and c.learned_positions and training.seq_len > c.max_positions:
        raise BadInput(f"sequence length {training.seq_len} exceeds the model's {c.max_positions} "
                       "learned positions", "--seq-len")


def _common_options(func: Callable) -> Callable:
    options = [
        click.option("--model", "model_name", help="Catalog name, HF config.json or layer-profile file."),
        click.option("--cluster", "cluster_name", help="Cluster file (YAML/JSON) or built-in example name."),
        click.option("--global-batch", type=int, help="Sequences per optimizer step."),
        click.option("--seq-len", type=int, help="Tokens per sequence."),
        click.option("--dtype", type=click.Choice(["bf16", "fp16", "fp32"]), default=None,
                     help="Training dtype [default: bf16 if every GPU has it, else fp16]."),
        click.option("--attention", type=click.Choice(ATTENTION_KINDS), default="flash", show_default=True,
                     help="flash keeps no s^2 scores; standard keeps them (2021-22 kernels)."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def _require(value: Any, flag: str) -> Any:
    from .io import MAX_NUMBER

    if value is None:
        raise BadInput("is required", flag)
    if isinstance(value, int) and value <= 0:
        raise BadInput(f"must be positive, got {value}", flag)
    if isinstance(value, int) and value > MAX_NUMBER:
        raise BadInput(f"must be at most {MAX_NUMBER:.0e}", flag)
    return value


# --- evaluate --------------------------------------------------------------------------------


@main.command()
@_common_options
@click.option("--tp", type=int, help="Tensor-parallel degree.")
@click.option("--pp", type=int, help="Pipeline-parallel degree.")
@click.option("--dp", type=int, help="Data-parallel degree.")
@click.option("--micro-batch", type=int, help="Sequences per micro-batch.")
@click.option("--recompute", type=click.Choice(RECOMPUTE_MODES), default="none", show_default=True)
@click.option("--zero", type=click.IntRange(0, 3), default=0, show_default=True, help="ZeRO stage.")
@click.option("--sequence-parallel", is_flag=True, help="Megatron sequence parallelism.")
@click.option("--schedule", type=click.Choice(SCHEDULES), default=None,
              help="Pipeline schedule [default: interleaved if --virtual-stages > 1, else 1f1b].")
@click.option("--virtual-stages", type=int, default=1, show_default=True, help="Interleaved chunks per rank.")
@click.option("--plan", "plan_file", type=str, default=None, help="Re-price a plan JSON instead of flags.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
@click.option("-o", "--output", type=str, default=None, help="Also write the JSON to FILE.")
def evaluate(model_name, cluster_name, global_batch, seq_len, dtype, attention, tp, pp, dp, micro_batch,
             recompute, zero, sequence_parallel, schedule, virtual_stages, plan_file, as_json, output) -> None:
    """Price one configuration: step time, its breakdown, memory per GPU type.

    \b
    Examples:
      planner evaluate --model llama-3-8b --cluster dgx-a100 --global-batch 256 \\
          --seq-len 4096 --tp 4 --pp 2 --dp 4 --micro-batch 1 --recompute selective
      planner evaluate --plan plan.json --json
    """
    from .evaluate import evaluate as price

    if plan_file:
        plan = load_plan_file(plan_file)
    else:
        plan = plan_from_flags(model_name, cluster_name, global_batch, seq_len, dtype, attention, tp, pp,
                               dp, micro_batch, recompute, zero, sequence_parallel, schedule, virtual_stages)
    estimate = price(plan)
    report = estimate.to_json()
    report["config"] = describe_plan(plan)
    if as_json or output:
        _emit_json(report, output, as_json)
    if not as_json:
        print_estimate(plan, estimate)
    if not estimate.fits:
        worst = max(estimate.overflows, key=lambda o: o.over_bytes)
        _err(f"does not fit: rank {worst.rank} ({worst.gpu}) needs {worst.need_bytes / GIB:.1f} GiB of "
             f"{worst.capacity_bytes / GIB:.1f} GiB (over by {worst.over_bytes / GIB:.1f} GiB; "
             f"{len(estimate.overflows)} ranks overflow)")
        sys.exit(EXIT_INFEASIBLE)


def load_plan_file(path: str) -> Plan:
    from .io import parse_structured, read_text

    data = parse_structured(read_text(path, "plan file"), path)
    plan = plan_from_json(data, path)
    problems = structural_problems(plan)
    if problems:
        raise BadInput("invalid plan: " + "; ".join(f"{p}: {m}" for p, m in problems), path)
    return plan


def plan_from_flags(model_name, cluster_name, global_batch, seq_len, dtype, attention, tp, pp, dp,
                    micro_batch, recompute, zero, sequence_parallel, schedule, virtual_stages) -> Plan:
    for value, flag in ((model_name, "--model"), (cluster_name, "--cluster"), (global_batch, "--global-batch"),
                        (seq_len, "--seq-len"), (tp, "--tp"), (pp, "--pp"), (dp, "--dp"),
                        (micro_batch, "--micro-batch"), (virtual_stages, "--virtual-stages")):
        _require(value, flag)
    if schedule is None:
        schedule = "interleaved" if virtual_stages > 1 else "1f1b"
    if schedule == "interleaved" and virtual_stages < 2:
        raise BadInput("the interleaved schedule needs --virtual-stages >= 2", "--schedule")
    if schedule != "interleaved" and virtual_stages > 1:
        raise BadInput(f"--virtual-stages {virtual_stages} needs --schedule interleaved", "--virtual-stages")
    if schedule == "interleaved" and pp < 2:
        raise BadInput("the interleaved schedule needs --pp >= 2", "--schedule")
    model = load_model(model_name)
    cluster = load_cluster(cluster_name)
    dtype = resolve_dtype(cluster, dtype)
    if model.config is not None and model.config.num_heads % tp:
        raise BadInput(f"{model.config.num_heads} attention heads do not split over tp={tp}", "--tp")
    if sequence_parallel and tp == 1:
        raise BadInput("sequence parallelism needs --tp > 1", "--sequence-parallel")
    training = Training(global_batch, seq_len, dtype, micro_batch, schedule, virtual_stages, attention)
    check_training_inputs(model, training)
    return uniform_plan(model, cluster, training, tp=tp, pp=pp, dp=dp, zero=zero, recompute=recompute,
                        sequence_parallel=sequence_parallel)


def describe_plan(plan: Plan) -> dict:
    t = plan.training
    return {"model": plan.model.name, "cluster": plan.cluster.name, "num_gpus": plan.cluster.num_gpus,
            "global_batch": t.global_batch, "seq_len": t.seq_len, "dtype": t.dtype,
            "micro_batch": t.micro_batch, "schedule": t.schedule, "virtual_stages": t.virtual_stages,
            "attention": t.attention, "pp": plan.pp,
            "stages": [{"layers": list(s.layers), "tp": s.tp, "dp": s.dp, "zero": s.zero,
                        "recompute": s.recompute, "sequence_parallel": s.sequence_parallel}
                       for s in plan.stages]}


def print_estimate(plan: Plan, estimate) -> None:
    console = _stdout()
    t = plan.training
    console.print(f"[bold]{plan.model.name}[/] on [bold]{plan.cluster.name}[/] "
                  f"({estimate.num_gpus_used} of {plan.cluster.num_gpus} GPUs), global batch {t.global_batch} "
                  f"x {t.seq_len} tokens, {t.dtype}, micro-batch {t.micro_batch}, {t.schedule}"
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
                  f"{estimate.model_tflops_per_gpu:.1f}   MFU {estimate.mfu:.1%}   "
                  f"bubble {estimate.bubble_fraction:.1%}")
    mem = Table(title="Peak memory per GPU type")
    for col in ("GPU", "peak GiB", "capacity GiB", "use"):
        mem.add_column(col, justify="left" if col == "GPU" else "right")
    capacity = {estimate.gpu_by_rank[r]: c for r, c in estimate.capacity_by_rank.items()}
    for gpu, peak in estimate.peak_memory_by_gpu().items():
        share = peak / capacity[gpu]
        style = "red" if share > 1 else "green"
        mem.add_row(gpu, f"{peak / GIB:.1f}", f"{capacity[gpu] / GIB:.0f}", f"[{style}]{share:.0%}[/]")
    console.print(mem)


if __name__ == "__main__":
    main()
