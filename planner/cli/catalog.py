"""`planner gpus`, `planner models` and `planner inspect`: the built-in catalogs and what the
planner reads from one model (planner.api), as tables or JSON. The tables fit 80 columns:
every column wraps (long names fold onto the next line) instead of ending in an ellipsis."""

from __future__ import annotations

import textwrap

import click
from rich import box
from rich.table import Table

from ..api import gpu_catalog, model_catalog
from ..api.model_info import inspect_model
from ..core.errors import BadInput
from ..core.io import json_text
from ..core.markup import esc
from .output import bad_input_exit, stdout

WIDTH = 80  # the narrowest terminal the tables are laid out for


def _table(title: str, columns: tuple[str, ...], left: tuple[str, ...]) -> Table:
    """A table in the style of planner.report.tables: a rule under the header, columns one
    space apart."""
    table = Table(title=title, box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 0))
    for col in columns:
        table.add_column(col, justify="left" if col in left else "right", overflow="fold")
    return table


def _billions(count: int) -> str:
    return f"{count / 1e9:.2f}B"


@click.command("gpus")
@click.option("--json", "as_json", is_flag=True, help="Print JSON on stdout.")
def gpus(as_json: bool) -> None:
    """List the GPU catalog with data-sheet figures and sources.

    \b
    Example:
      planner gpus --json | jq '.[] | select(.name=="H100-SXM5-80GB")'
    """
    rows = gpu_catalog()
    if as_json:
        click.echo(json_text(rows))
        return
    table = _table("GPU catalog (dense peaks)",
                   ("name", "GiB", "bf16 TF", "fp16 TF", "fp32 TF", "HBM GB/s", "intra-node\nGB/s", "board\nW",
                    "$/GPU-h"), ("name",))
    for r in rows:
        pk = r["peak_tflops"]
        table.add_row(esc(r["name"]), f"{r['memory_GiB']:g}", f"{pk['bf16']:g}" if "bf16" in pk else "-",
                      f"{pk.get('fp16', 0):g}", f"{pk.get('fp32', 0):g}", f"{r['hbm_GBps']:g}",
                      f"{r['intra_node']['bandwidth_GBps']:g}",
                      "-" if r["power_W"] is None else f"{r['power_W']['board']:g}",
                      "-" if r["price_per_gpu_hour"] is None else f"{r['price_per_gpu_hour']:.2f}")
    stdout().print(table)


@click.command("models")
@click.option("--json", "as_json", is_flag=True, help="Print JSON on stdout.")
def models(as_json: bool) -> None:
    """List the built-in model catalog with parameter counts; for a mixture of experts, the
    active parameters (those one token passes through) and experts/top-k. `--json` adds each
    model's model_type; `planner inspect NAME` shows everything read from one.

    \b
    Example:
      planner models --json
    """
    rows = model_catalog()
    if as_json:
        click.echo(json_text(rows))
        return
    table = _table("Model catalog (parameters in billions; active: per token)",
                   ("name", "params", "active", "experts\n/top-k", "layers", "hidden", "heads\n/kv", "ffn", "vocab"),
                   ("name",))
    table.columns[0].min_width = max(len(r["name"]) for r in rows)  # a catalog name is what `--model` takes: whole
    for r in rows:
        moe = r["experts"] > 1
        table.add_row(esc(r["name"]), f"{r['params'] / 1e9:.2f}",
                      f"{r['active_params'] / 1e9:.2f}" if moe else "-",
                      f"{r['experts']}/{r['experts_top_k']}" if moe else "-", str(r["layers"]), str(r["hidden"]),
                      f"{r['heads']}/{r['kv_heads']}", str(r["ffn_hidden"]), str(r["vocab"]))
    stdout().print(table)


# --- inspect -------------------------------------------------------------------------------------

# what `planner inspect` prints, in order: (label, key of inspect_model's answer)
INSPECT_FIELDS = (("name", "name"), ("catalog entry", "catalog"), ("file", "file"), ("format", "format"),
                  ("model_type", "model_type"), ("decoder layers", "layers"), ("hidden", "hidden"),
                  ("heads", "heads"), ("kv heads", "kv_heads"), ("head dim", "head_dim"),
                  ("ffn (an expert's in MoE layers)", "ffn_hidden"), ("ffn of dense layers", "dense_ffn_hidden"),
                  ("vocab", "vocab"), ("max positions", "max_positions"), ("experts", "experts"),
                  ("experts per token", "experts_top_k"), ("MoE layers", "moe_layers"),
                  ("latent expert width", "expert_width"),
                  ("tied embeddings", "tied_embeddings"), ("latent attention (MLA)", "mla"),
                  ("sliding-window layers", "sliding_window_layers"),
                  ("chunked-attention layers", "chunked_attention_layers"), ("Mamba-2 layers", "mamba_layers"),
                  ("multi-token-prediction modules", "mtp_layers"), ("one MTP module repeated", "mtp_repeated"))


def _number(count: int) -> str:
    return f"{count:,} ({_billions(count)})"


def inspect_lines(info: dict) -> list[str]:
    """The human view of inspect_model's answer, WIDTH columns at most."""
    lines = []
    label_width = max(len(label) for label, _ in INSPECT_FIELDS)
    for label, key in INSPECT_FIELDS:
        value = info.get(key)
        if value is None:
            continue
        text = str(value).lower() if isinstance(value, bool) else str(value)
        lines += textwrap.wrap(text, WIDTH, initial_indent=f"{label:<{label_width}}  ",
                               subsequent_indent=" " * (label_width + 2), break_on_hyphens=False)
    lines.append(f"{'params':<{label_width}}  {_number(info['params'])}")
    if info.get("mtp_params"):
        lines.append(f"{'of them, MTP modules':<{label_width}}  {_number(info['mtp_params'])}")
    if info["active_params"] != info["params"]:
        lines.append(f"{'active params (per token)':<{label_width}}  {_number(info['active_params'])}")
    for title, keys in (("keys read", info["read_keys"]), ("keys ignored (not read)", info["ignored_keys"])):
        lines.append(f"{title} ({len(keys)}):")
        lines += textwrap.wrap(", ".join(keys) or "none", WIDTH, initial_indent="  ", subsequent_indent="  ",
                               break_on_hyphens=False)
    return lines


@click.command("inspect")
@click.argument("model", metavar="MODEL")
@click.option("--json", "as_json", is_flag=True, help="Print JSON on stdout.")
def inspect_command(model: str, as_json: bool) -> None:
    """Show what the planner reads from MODEL (a catalog name, an HF config.json or a layer
    profile), without planning: its dimensions, parameters, active parameters for a mixture
    of experts, and which keys of the config it reads and which it ignores.

    A key is read when its value changes what the planner takes from the config (the
    dimensions it prices, the rotary and norm settings the exports write, the name); an
    ignored key changes nothing (hidden_act, torch_dtype, router loss settings, ...).

    \b
    Example:
      planner inspect path/to/config.json
      planner inspect mixtral-8x7b --json | jq .ignored_keys
    """
    try:
        info = inspect_model(model)
    except BadInput as exc:
        bad_input_exit(exc)
    if as_json:
        click.echo(json_text(info))
        return
    for line in inspect_lines(info):
        click.echo(line)
