"""Command-line interface: the only module that prints or exits.

Exit codes: 0 success; 1 no feasible plan (or the evaluated configuration does not fit);
2 bad input or usage; 130 interrupted (Ctrl-C; a sweep stopped by SIGTERM: 143).
"""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

import click
from rich.console import Console
from rich.table import Table

from . import ranges
from .clock import DEFAULT_TIME_LIMIT_S
from .errors import BadInput, NoFeasiblePlan
from .io import json_text
from .markup import esc
from .outfile import check_output
from .hardware import GIB, GB, TFLOPS, US, Cluster, load_catalog, load_cluster
from .model import ATTENTION_KINDS, RECOMPUTE_MODES, Model, catalog_names, load_model
from .plan import SCHEDULES, Plan, Training, load_plan_file, structural_problems, uniform_plan
from .tables import gpu_labels, gpu_legend, stages_table

EXIT_OK, EXIT_INFEASIBLE, EXIT_BAD_INPUT = 0, 1, 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT


def _stdout() -> Console:
    return Console(highlight=False, no_color="NO_COLOR" in os.environ)


def _err(message: str) -> None:
    click.echo(f"planner: {message}", err=True)


def _emit(data: Any, output: str | None, as_json: bool, show: Callable[[], None], written: str | None = None,
          inputs: tuple = ()) -> None:
    """The JSON to `-o FILE` and/or stdout (`--json`); without --json the human view via
    `show`, then, when `written` names the thing, where the file went. The file is written
    by planner.outfile (atomically; never onto a link or onto one of the `inputs`)."""
    from .outfile import write_output

    if as_json or output:
        text = json_text(data)
        if output:
            write_output(output, text + "\n", inputs=inputs)
        if as_json:
            click.echo(text)
    if not as_json:
        show()
        if output and written:
            _stdout().print(f"{written} written to {esc(output)}")


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
        except KeyboardInterrupt:  # Ctrl-C: 130, not click's "Aborted!" and 1 (no feasible plan)
            _err("interrupted")
            sys.exit(EXIT_INTERRUPTED)
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
        click.echo(json_text(rows))
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
        click.echo(json_text(rows))
        return
    table = Table(title="Model catalog")
    for col in ("name", "type", "params", "layers", "hidden", "heads/kv", "ffn", "vocab"):
        table.add_column(col, justify="left" if col in ("name", "type") else "right")
    for r in rows:
        table.add_row(r["name"], r["model_type"], f"{r['params'] / 1e9:.2f}B", str(r["layers"]),
                      str(r["hidden"]), f"{r['heads']}/{r['kv_heads']}", str(r["ffn_hidden"]), str(r["vocab"]))
    _stdout().print(table)


# --- shared inputs ---------------------------------------------------------------------------


def _input_files(*names: str | tuple[str, ...] | None) -> list[str]:
    """A command's input names (files or catalog names) that an output must not overwrite;
    `--profile GPU=FILE` specs count as FILE."""
    from .outfile import input_paths

    return [n.partition("=")[2] if "=" in n and not os.path.exists(n) else n for n in input_paths(*names)]


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


def load_profiles(specs: tuple[str, ...], cluster: Cluster, model: Model, training: Training) -> dict:
    """`--profile GPU=FILE` (repeatable) -> {GPU name: CostParams pricing it from measurements}."""
    from .cost import DEFAULT_PARAMS
    from .io import parse_structured, read_text
    from .measured import measured_from_profile

    out = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            raise BadInput(f"expected GPU=FILE, got {spec!r}", "--profile")
        gpu = next((g for g in cluster.gpu_types if g.name.lower() == name.lower()), None)
        if gpu is None:
            raise BadInput(f"{name} is not a GPU type of cluster {cluster.name} "
                           f"({', '.join(g.name for g in cluster.gpu_types)})", "--profile")
        data = parse_structured(read_text(path, "profile file"), path)
        measured = measured_from_profile(data, gpu.name, path)
        if measured.seq_len != training.seq_len:
            raise BadInput(f"measured at sequence length {measured.seq_len}, the plan uses {training.seq_len}",
                           path, "seq_len")
        decoder = next((l for l in data["layers"] if isinstance(l, dict) and l.get("kind") == "decoder"), {})
        blocks = [l for l in model.layers if l.kind == "decoder"]
        if blocks and decoder.get("params") != blocks[0].params:
            raise BadInput(f"profiles a decoder block of {decoder.get('params')} parameters, but "
                           f"{model.name}'s has {blocks[0].params}", path, "layers")
        if measured.dtype != training.dtype:
            click.echo(f"planner: warning: {path} was measured in {measured.dtype}, the plan trains in "
                       f"{training.dtype}; its times are used as measured", err=True)
        out[gpu.name] = DEFAULT_PARAMS.with_updates(measured=measured)
    return out


def _measurement_options(func: Callable) -> Callable:
    """`--profile GPU=FILE` and `--calibration FILE`, shared by plan and evaluate."""
    func = click.option("--calibration", "calibrations", multiple=True, metavar="FILE",
                        help="Fitted efficiencies for a GPU type (planner calibrate); repeatable.")(func)
    return click.option("--profile", "profiles", multiple=True, metavar="GPU=FILE",
                        help="Price this GPU type from a measured layer profile (planner profile); "
                             "repeatable.")(func)


def per_gpu_params(profiles: tuple[str, ...], calibrations: tuple[str, ...], cluster: Cluster, model: Model,
                   training: Training) -> dict:
    """Cost parameters per GPU type from `--profile` and `--calibration` (types not named: defaults)."""
    return load_calibrations(calibrations, cluster, load_profiles(profiles, cluster, model, training))


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


# The documented range (planner.ranges) of each numeric flag.
FLAG_FIGURES = {"--global-batch": "global_batch", "--seq-len": "seq_len", "--micro-batch": "micro_batch",
                "--virtual-stages": "virtual_stages", "--tp": "degree", "--pp": "degree", "--dp": "degree",
                "--time-limit": "time_limit_s"}


def _require(value: Any, flag: str) -> Any:
    """A given flag's value, checked against its documented range."""
    if value is None:
        raise BadInput("is required", flag)
    return ranges.check(value, FLAG_FIGURES[flag], flag) if flag in FLAG_FIGURES else value


# --- plan ------------------------------------------------------------------------------------

DEFAULT_PLAN = {"model": "llama-3-8b", "cluster": "a100-v100-mix", "global_batch": 512, "seq_len": 4096}


@main.command("plan")
@_common_options
@click.option("--micro-batch", "micro_batches", type=int, multiple=True,
              help="Micro-batch sizes to search (repeatable) [default: 1 2 4 8].")
@click.option("--virtual-stages", "virtual_stages", type=int, multiple=True,
              help="Pipeline chunks per rank to search (repeatable): 1 is 1F1B, V > 1 the interleaved "
                   "schedule with V chunks per rank [default: 1 2].")
@click.option("--time-limit", type=float, default=DEFAULT_TIME_LIMIT_S, show_default=True,
              help="Return within S seconds with the best plan found so far and its gap (exit 1 if none).")
@click.option("--max-bundle-nodes", type=click.IntRange(1, 64), default=4, show_default=True,
              help="Clusters of more than 8 nodes are searched as identical bundles of at most this many "
                   "nodes (and not proven optimal).")
@click.option("--solver", type=click.Choice(["highs", "cbc"]), default="highs", show_default=True,
              help="MILP solver for the batch shares.")
@_measurement_options
@click.option("--json", "as_json", is_flag=True, help="Print the plan JSON on stdout.")
@click.option("-o", "--output", type=str, default=None, help="Write the plan JSON to FILE.")
def plan_command(model_name, cluster_name, global_batch, seq_len, dtype, attention, micro_batches, virtual_stages,
                 time_limit, max_bundle_nodes, solver, profiles, calibrations, as_json, output) -> None:
    """Find the fastest plan for a model on a (mixed) cluster, and prove it.

    Without options it plans llama-3-8b on the built-in A100 + V100 example cluster.

    \b
    Examples:
      planner plan
      planner plan --model llama-3-70b --cluster h100-a100-v100 --global-batch 1024 \\
          --seq-len 4096 -o plan.json
      planner plan --virtual-stages 1          # 1F1B only, no interleaving
    """
    from .search import SolverOptions, solve
    from .shares import IlpOptions

    inputs = _input_files(model_name, cluster_name, profiles, calibrations)
    if output:
        check_output(output, inputs)  # before the search, which can take minutes
    model = load_model(model_name or DEFAULT_PLAN["model"])
    cluster = load_cluster(cluster_name or DEFAULT_PLAN["cluster"])
    global_batch = _require(DEFAULT_PLAN["global_batch"] if global_batch is None else global_batch, "--global-batch")
    seq_len = _require(DEFAULT_PLAN["seq_len"] if seq_len is None else seq_len, "--seq-len")
    if time_limit is not None:
        _require(time_limit, "--time-limit")
    for b in micro_batches:
        _require(b, "--micro-batch")
    for v in virtual_stages:
        _require(v, "--virtual-stages")
    dtype = resolve_dtype(cluster, dtype)
    base = Training(global_batch, seq_len, dtype, 1, "1f1b", 1, attention)
    check_training_inputs(model, base)
    measured = per_gpu_params(profiles, calibrations, cluster, model, base)
    options = SolverOptions(micro_batches=tuple(sorted(set(micro_batches))) or (1, 2, 4, 8),
                            virtual_stages=tuple(sorted(set(virtual_stages))) or (1, 2),
                            max_bundle_nodes=max_bundle_nodes, time_limit_s=time_limit,
                            ilp=IlpOptions("CBC" if solver == "cbc" else "HiGHS"),
                            gpu_params=tuple(sorted(measured.items())))
    if not any(global_batch % b == 0 for b in options.micro_batches):
        raise BadInput(f"no micro-batch size in {list(options.micro_batches)} divides the global batch "
                       f"{global_batch}", "--global-batch")
    with search_progress(sys.stderr.isatty()) as on_progress:
        result = solve(model, cluster, base, options, on_progress)
    problems = structural_problems(result.plan)
    if problems or not result.estimate.fits:  # checked in the solver too; never print a bad plan
        raise RuntimeError(f"solver returned an invalid plan: {problems or 'does not fit'}")
    _emit(plan_json(result), output, as_json, lambda: print_plan(result), "plan", inputs)


@contextmanager
def search_progress(enabled: bool) -> Iterator[Callable | None]:
    """On a terminal, a one-line status on stderr while the search runs (gone when it ends)."""
    if not enabled:
        yield None
        return
    with Console(stderr=True).status("searching") as status:
        def report(p) -> None:
            best = "none yet" if p.best_step_s is None else f"{p.best_step_s:.3f} s"
            status.update(f"searching: {p.elapsed_s:.0f} s, subproblems {p.subproblems_done}/{p.subproblems_total}, "
                          f"best step {best}, lower bound {p.lower_bound_s:.3f} s")
        yield report


def plan_json(result) -> dict:
    from .plan import plan_to_json

    est = result.estimate
    predicted = {"step_time_s": est.step_time_s, "tokens_per_s": est.tokens_per_s, "mfu": est.mfu,
                 "bubble_fraction": est.bubble_fraction, "samples_per_s": est.samples_per_s,
                 "model_tflops_per_gpu": est.model_tflops_per_gpu, "breakdown_s": dict(est.breakdown_s),
                 "peak_memory_GiB_by_rank": {str(r): m.total_bytes / GIB for r, m in sorted(est.memory_by_rank.items())}}
    return plan_to_json(result.plan, predicted, result.solver_json())


def print_plan(result, console: Console | None = None) -> None:
    console = console or _stdout()
    plan, est = result.plan, result.estimate
    t = plan.training
    cluster = plan.cluster
    labels = gpu_labels(cluster)
    console.print(f"[bold]{esc(plan.model.name)}[/] on [bold]{esc(cluster.name)}[/]: {est.num_gpus_used} of "
                  f"{cluster.num_gpus} GPUs, global batch {t.global_batch} x {t.seq_len}, {t.dtype}, "
                  f"micro-batch {t.micro_batch}, {plan.num_microbatches} micro-batches, {t.schedule}"
                  + (f" (V={t.virtual_stages} chunks per pipeline rank)" if t.virtual_stages > 1 else ""))
    console.print(stages_table(plan, est, labels, "Stages"))
    if gpu_legend(labels):
        console.print(gpu_legend(labels))
    console.print(f"step {est.step_time_s:.3f} s   tokens/s {est.tokens_per_s:,.0f}   MFU {est.mfu:.1%}   "
                  f"bubble {est.bubble_fraction:.1%}   "
                  + "   ".join(f"{k} {v:.3f}s" for k, v in est.breakdown_s.items()))
    status = "proven optimal" if result.optimal else f"not proven optimal (gap to lower bound {result.gap:.1%})"
    console.print(f"solver: {status}; {result.candidates} stage configurations priced in {result.seconds:.2f} s"
                  + (f"; searched as {result.bundles} identical bundles" if result.bundles > 1 else ""))


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
@_measurement_options
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
@click.option("-o", "--output", type=str, default=None, help="Also write the JSON to FILE.")
def evaluate(model_name, cluster_name, global_batch, seq_len, dtype, attention, tp, pp, dp, micro_batch,
             recompute, zero, sequence_parallel, schedule, virtual_stages, plan_file, profiles, calibrations,
             as_json, output) -> None:
    """Price one configuration: step time, its breakdown, memory per GPU type.

    \b
    Examples:
      planner evaluate --model llama-3-8b --cluster dgx-a100 --global-batch 256 \\
          --seq-len 4096 --tp 4 --pp 2 --dp 4 --micro-batch 1 --recompute selective
      planner evaluate --plan plan.json --json
    """
    from .cost import DEFAULT_PARAMS
    from .evaluate import evaluate as price

    if plan_file:
        given = [flag for flag, value in (("--model", model_name), ("--cluster", cluster_name),
                                          ("--global-batch", global_batch), ("--seq-len", seq_len),
                                          ("--tp", tp), ("--pp", pp), ("--dp", dp), ("--micro-batch", micro_batch),
                                          ("--dtype", dtype)) if value is not None]
        if given:
            raise BadInput(f"a plan file carries its own configuration; drop {', '.join(given)}", "--plan")
        # every check `validate` runs, except memory: an overflow is this command's exit 1, with the JSON
        plan = load_plan_file(plan_file, memory=False)
    else:
        plan = plan_from_flags(model_name, cluster_name, global_batch, seq_len, dtype, attention, tp, pp,
                               dp, micro_batch, recompute, zero, sequence_parallel, schedule, virtual_stages)
    per_gpu = per_gpu_params(profiles, calibrations, plan.cluster, plan.model, plan.training)
    estimate = price(plan, {"*": DEFAULT_PARAMS, **per_gpu})
    report = estimate.to_json()
    report["config"] = describe_plan(plan)
    _emit(report, output, as_json, lambda: print_estimate(plan, estimate), None,
          _input_files(model_name, cluster_name, profiles, calibrations, plan_file))
    if not estimate.fits:
        worst = max(estimate.overflows, key=lambda o: o.over_bytes)
        _err(f"does not fit: rank {worst.rank} ({worst.gpu}) needs {worst.need_bytes / GIB:.1f} GiB of "
             f"{worst.capacity_bytes / GIB:.1f} GiB (over by {worst.over_bytes / GIB:.1f} GiB; "
             f"{len(estimate.overflows)} ranks overflow)")
        sys.exit(EXIT_INFEASIBLE)


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


def print_estimate(plan: Plan, estimate, console: Console | None = None) -> None:
    console = console or _stdout()
    t = plan.training
    console.print(f"[bold]{esc(plan.model.name)}[/] on [bold]{esc(plan.cluster.name)}[/] "
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
        mem.add_column(col, justify="left" if col == "GPU" else "right", overflow="fold")
    capacity = {estimate.gpu_by_rank[r]: c for r, c in estimate.capacity_by_rank.items()}
    for gpu, peak in estimate.peak_memory_by_gpu().items():
        share = peak / capacity[gpu]
        style = "red" if share > 1 else "green"
        mem.add_row(esc(gpu), f"{peak / GIB:.1f}", f"{capacity[gpu] / GIB:.0f}", f"[{style}]{share:.0%}[/]")
    console.print(mem)


# --- profile ---------------------------------------------------------------------------------


@main.command("profile")
@click.option("--model", "model_name", help="Catalog name or HF config.json.")
@click.option("--device", default="cpu", show_default=True, help="cpu, cuda or cuda:N.")
@click.option("--seq-len", type=int, default=None,
              help="Tokens per sequence [default: 2048, or fewer learned positions (GPT-2)].")
@click.option("--micro-batch", "micro_batch", default="1,2", show_default=True,
              help="Comma-separated micro-batch sizes to time.")
@click.option("--tp", default="1", show_default=True, help="Comma-separated tensor-parallel degrees (one rank's shard).")
@click.option("--dtype", type=click.Choice(["fp32", "bf16", "fp16"]), default=None,
              help="Parameter and activation dtype [default: fp32 on cpu, bf16 on cuda].")
@click.option("--warmup", type=int, default=2, show_default=True, help="Untimed runs before timing.")
@click.option("--repeats", type=int, default=5, show_default=True, help="Timed runs; the median is kept.")
@click.option("--json", "as_json", is_flag=True, help="Print the profile JSON on stdout.")
@click.option("-o", "--output", type=str, default=None, help="Write the profile JSON to FILE.")
def profile_command(model_name, device, seq_len, micro_batch, tp, dtype, warmup, repeats, as_json, output) -> None:
    """Time each distinct layer forward and backward on this machine (needs torch).

    Writes a layer-profile file that `--model` accepts (formats.md section 3).

    \b
    Example:
      planner profile --model gpt2 --device cpu --seq-len 512 --micro-batch 1,2,4 -o gpt2.json
    """
    from rich.progress import Progress

    from .profiler import (ProfileOptions, check_inputs, default_seq_len, normalize_device,
                           parse_int_list, profile_model, require_torch)

    require_torch()
    device = normalize_device(device)
    micro_batches = parse_int_list(micro_batch, "--micro-batch", (1, 2))
    tps = parse_int_list(tp, "--tp", (1,))
    model = load_model(_require(model_name, "--model"))
    if seq_len is None:
        seq_len = default_seq_len(model)
    _require(seq_len, "--seq-len")
    if dtype is None:
        dtype = "fp32" if device == "cpu" else "bf16"
    if output and not Path(output).resolve().parent.is_dir():
        raise BadInput("cannot write: the folder does not exist", output)
    if output:
        check_output(output, _input_files(model_name))
    options = ProfileOptions(device=device, seq_len=seq_len, micro_batches=micro_batches, tps=tps,
                             dtype=dtype, warmup=warmup, repeats=repeats)
    check_inputs(model, options)
    err_console = Console(stderr=True)
    with Progress(console=err_console, transient=True, disable=not err_console.is_terminal) as progress:
        data = profile_model(model, options, progress)
    _emit(data, output, as_json, lambda: print_profile(data), "profile", _input_files(model_name))


def print_profile(data: dict) -> None:
    console = _stdout()
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


@main.command("calibrate")
@click.argument("profile_file")
@click.option("--gpu", "gpu_name", required=True, help="The GPU type the profile was measured on (catalog name).")
@click.option("--model", "model_name", default=None, help="The profiled model [default: the profile's `model`].")
@click.option("--attention", type=click.Choice(ATTENTION_KINDS), default="standard", show_default=True,
              help="Attention kernel of the measured layers (planner profile times explicit attention).")
@click.option("-o", "--output", type=str, required=True, help="Calibration file to write (YAML).")
@click.option("--json", "as_json", is_flag=True, help="Print the calibration as JSON on stdout.")
def calibrate_command(profile_file, gpu_name, model_name, attention, output, as_json) -> None:
    """Fit the analytic model's efficiencies for one GPU type to a measured profile.

    \b
    Example:
      planner profile --model llama-3-8b --device cuda --seq-len 4096 -o h100.json
      planner calibrate h100.json --gpu H100-SXM5-80GB -o h100-calib.yaml
      planner plan --model llama-3-8b --cluster my.yaml --calibration h100-calib.yaml
    """
    import yaml

    from .calibrate import fit
    from .io import parse_structured, read_text
    from .measured import measured_from_profile
    from .outfile import write_output

    inputs = _input_files(profile_file, model_name)
    check_output(output, inputs)
    data = parse_structured(read_text(profile_file, "profile file"), profile_file)
    catalog = {name.lower(): gpu for name, gpu in load_catalog().items()}
    gpu = catalog.get(gpu_name.lower())
    if gpu is None:
        raise BadInput(f"unknown GPU {gpu_name!r} (see `planner gpus`)", "--gpu")
    measured = measured_from_profile(data, gpu.name, profile_file)
    model = load_model(model_name or measured.model)
    dtype = measured.dtype if measured.dtype in ("fp32", "fp16", "bf16") else "bf16"
    result = fit(model, gpu, measured, dtype, attention)
    report = result.to_json(profile_file)
    write_output(output, yaml.safe_dump(report, sort_keys=False), inputs=inputs)
    if as_json:
        click.echo(json_text(report))
    else:
        _stdout().print(f"{gpu.name}: " + ", ".join(f"{k} {v:.3f}" for k, v in report["params"].items())
                        + f"; RMS log error {result.error_before:.3f} -> {result.error_after:.3f} over "
                        f"{result.points} measurements; written to {esc(output)}")


def load_calibrations(files: tuple[str, ...], cluster: Cluster, base: dict) -> dict:
    """`--calibration FILE` (repeatable): per GPU type, the fitted efficiencies over `base`."""
    from .calibrate import params_from_calibration
    from .cost import DEFAULT_PARAMS
    from .io import load_mapping

    out = dict(base)
    for path in files:
        name, overrides = params_from_calibration(load_mapping(path, "calibration file"), path)
        gpu = next((g for g in cluster.gpu_types if g.name.lower() == name.lower()), None)
        if gpu is None:
            raise BadInput(f"calibrates {name}, which is not a GPU type of cluster {cluster.name}", path, "gpu")
        out[gpu.name] = out.get(gpu.name, DEFAULT_PARAMS).with_updates(**overrides)
    return out


# commands that live in their own modules
from .sweep import add_commands as _add_sweep  # noqa: E402
from .export import add_commands as _add_export  # noqa: E402
from .show import add_commands as _add_show  # noqa: E402
from .validate import add_commands as _add_validate  # noqa: E402

_add_sweep(main)
_add_validate(main)
_add_export(main)
_add_show(main)


if __name__ == "__main__":
    main()
