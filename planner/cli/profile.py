"""`planner profile` (time each layer here, needs torch) and `planner calibrate` (fit the
analytic model's efficiencies to such a profile)."""

from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console

from ..api import input_files, require
from ..core.errors import BadInput
from ..core.io import json_text, yaml_text
from ..core.markup import esc
from ..inputs.model import ATTENTION_KINDS, load_model
from ..core.outfile import check_output
from ..report.views import print_profile
from .output import emit, stdout


@click.command("profile")
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

    from ..calibrate.profile_inputs import (ProfileOptions, check_inputs, default_seq_len, normalize_device,
                                            parse_int_list, require_torch)
    from ..calibrate.profiler import profile_model

    require_torch()
    device = normalize_device(device)
    micro_batches = parse_int_list(micro_batch, "--micro-batch", (1, 2))
    tps = parse_int_list(tp, "--tp", (1,))
    model = load_model(require(model_name, "--model"))
    if seq_len is None:
        seq_len = default_seq_len(model)
    require(seq_len, "--seq-len")
    if dtype is None:
        dtype = "fp32" if device == "cpu" else "bf16"
    if output and not Path(output).resolve().parent.is_dir():
        raise BadInput("cannot write: the folder does not exist", output)
    if output:
        check_output(output, input_files(model_name))
    options = ProfileOptions(device=device, seq_len=seq_len, micro_batches=micro_batches, tps=tps,
                             dtype=dtype, warmup=warmup, repeats=repeats)
    check_inputs(model, options)
    err_console = Console(stderr=True)
    with Progress(console=err_console, transient=True, disable=not err_console.is_terminal) as progress:
        data = profile_model(model, options, progress)
    emit(data, output, as_json, lambda: print_profile(data, stdout()), "profile", input_files(model_name))


@click.command("calibrate")
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
    from ..calibrate.fit import calibrate_file
    from ..core.outfile import write_output

    inputs = input_files(profile_file, model_name)
    check_output(output, inputs)
    report, result = calibrate_file(profile_file, gpu_name, model_name, attention)
    write_output(output, yaml_text(report, sort_keys=False), inputs=inputs)
    if as_json:
        click.echo(json_text(report))
    else:
        stdout().print(f"{result.gpu}: " + ", ".join(f"{k} {v:.3f}" for k, v in report["params"].items())
                       + f"; RMS log error {result.error_before:.3f} -> {result.error_after:.3f} over "
                       f"{result.points} measurements; written to {esc(output)}")

