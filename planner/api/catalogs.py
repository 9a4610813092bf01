"""`planner gpus --json` and `planner models --json`: the built-in catalogs as rows."""

from __future__ import annotations

from ..inputs.hardware import GIB
from ..inputs.model import load_model


def gpu_catalog() -> list[dict]:
    """`planner gpus --json`: the GPU catalog with data-sheet figures and sources."""
    from ..inputs.hardware import GB, TFLOPS, US, load_catalog

    return [{"name": name, "vendor": g.vendor, "memory_GiB": g.memory_bytes / GIB,
             "peak_tflops": {d: f / TFLOPS for d, f in g.peak_flops},
             "hbm_GBps": g.hbm_bandwidth_bytes_per_s / GB,
             "intra_node": {"kind": g.intra_node.kind, "bandwidth_GBps": g.intra_node.bandwidth_bytes_per_s / GB,
                            "latency_us": g.intra_node.latency_s / US},
             "inter_node": {"kind": g.inter_node.kind, "bandwidth_GBps": g.inter_node.bandwidth_bytes_per_s / GB,
                            "latency_us": g.inter_node.latency_s / US},
             "source": g.source,
             "power_W": None if g.power is None else {"board": g.power.board_W, "idle": g.power.idle_W,
                                                      **({"min_cap": g.power.min_cap_W} if g.power.min_cap_W else {})},
             "power_source": "" if g.power is None else g.power.source,
             "price_per_gpu_hour": None if g.price_usd_per_gpu_s is None else g.price_usd_per_gpu_s * 3600,
             "price_source": g.price_source} for name, g in load_catalog().items()]


def model_catalog() -> list[dict]:
    """`planner models --json`: the built-in models with parameter counts (`active_params`: those
    one token passes through, fewer than `params` for a mixture of experts) and shapes."""
    from ..inputs.model import catalog_names
    from .model_info import active_params

    rows = []
    for name in catalog_names():
        m = load_model(name)
        c = m.config
        rows.append({"name": name, "model_type": c.model_type, "params": m.params, "active_params": active_params(m),
                     "layers": c.num_layers, "hidden": c.hidden, "heads": c.num_heads,
                     "kv_heads": c.num_kv_heads, "ffn_hidden": c.ffn_hidden, "vocab": c.vocab,
                     "experts": c.num_experts, "experts_top_k": c.experts_top_k})
    return rows
