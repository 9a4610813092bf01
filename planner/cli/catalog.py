"""`planner gpus` and `planner models`: the built-in catalogs (planner.api), as tables or JSON."""

from __future__ import annotations

import click
from rich.table import Table

from ..api import gpu_catalog, model_catalog
from ..core.io import json_text
from .output import stdout


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
    table = Table(title="GPU catalog (dense peaks)")
    for col in ("name", "GiB", "bf16 TF", "fp16 TF", "fp32 TF", "HBM GB/s", "intra-node GB/s"):
        table.add_column(col, justify="left" if col == "name" else "right")
    for r in rows:
        pk = r["peak_tflops"]
        table.add_row(r["name"], f"{r['memory_GiB']:g}", f"{pk['bf16']:g}" if "bf16" in pk else "-",
                      f"{pk.get('fp16', 0):g}", f"{pk.get('fp32', 0):g}", f"{r['hbm_GBps']:g}",
                      f"{r['intra_node']['bandwidth_GBps']:g}")
    stdout().print(table)


@click.command("models")
@click.option("--json", "as_json", is_flag=True, help="Print JSON on stdout.")
def models(as_json: bool) -> None:
    """List the built-in model catalog with parameter counts.

    \b
    Example:
      planner models --json
    """
    rows = model_catalog()
    if as_json:
        click.echo(json_text(rows))
        return
    table = Table(title="Model catalog")
    for col in ("name", "type", "params", "layers", "hidden", "heads/kv", "ffn", "vocab"):
        table.add_column(col, justify="left" if col in ("name", "type") else "right")
    for r in rows:
        table.add_row(r["name"], r["model_type"], f"{r['params'] / 1e9:.2f}B", str(r["layers"]),
                      str(r["hidden"]), f"{r['heads']}/{r['kv_heads']}", str(r["ffn_hidden"]), str(r["vocab"]))
    stdout().print(table)
