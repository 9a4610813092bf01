"""Derive torchao's rowwise fp8 GEMM rate (planner.cost.fp8.TORCHAO_ROWWISE_GEMM_RATE) from
torchao's published float8 training table, not from the runs fidelity.py validates.

    python benchmarks/derive_rowwise_rate.py

Source: torchao/float8/README.md, "e2e training benchmarks", NVIDIA H100 (pytorch 2.7.0a0,
torchao 0.10.0): Llama3-8B on one node of 8 H100, local batch 1, sequence 8192, torch.compile,
FSDP2, per-op SAC: bf16 6150, tensorwise (float8 all-gather) 7689.5, rowwise (bf16
all-gather) 6768 median tokens/s. The same table at local batch 2 (pytorch/ao PR #1793):
6019 / 7190 / 6649, printed as a cross-check.

Derivation: the table's run is priced as a plan (as fidelity_runs.py prices torchtitan runs:
FSDP2 = ZeRO-3 over 8 ranks, torch.compile = CostParams.torch_compile, per-op SAC = "selective" under the torchtitan runtime, on the
catalog H100-SXM5-80GB) under torchao's tensorwise recipe and under its rowwise recipe with a
trial forward GEMM rate; the rate is the one (bisection) at which the predicted
rowwise / tensorwise throughput equals the published ratio. Everything else about the rowwise
recipe (its cast and rescale traffic, its cuBLAS backward GEMMs) is priced as
planner.cost.fp8 states it, so the rate carries what those leave out.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from planner.cost import fp8  # noqa: E402
from planner.cost.evaluate import evaluate  # noqa: E402
from planner.cost.runtimes import stack_params  # noqa: E402
from planner.inputs.hardware import cluster_from_spec  # noqa: E402
from planner.inputs.model import load_model  # noqa: E402
from planner.plan import Training, uniform_plan  # noqa: E402

GPUS, SEQ_LEN = 8, 8192
# (label, local batch, bf16, tensorwise, rowwise tokens/s)
TABLES = (("torchao README (torchao 0.10, batch 1)", 1, 6150.0, 7689.5, 6768.0),
          ("torchao PR #1793 (batch 2)", 2, 6019.0, 7190.0, 6649.0))
TRIAL = "rowwise-trial"


def throughput(local_batch: int, dtype: str, recipe: str) -> float:
    """Predicted tokens/s per GPU of the table's run."""
    model = load_model("llama-3-8b")
    spec = {"name": "h100-node", "node_groups": [{"name": "g", "gpu": "H100-SXM5-80GB", "nodes": 1,
                                                  "gpus_per_node": GPUS}]}
    cluster = cluster_from_spec(spec, "derive_rowwise_rate")
    training = Training(local_batch * GPUS, SEQ_LEN, dtype, local_batch, "1f1b", 1, "flash", runtime="torchtitan")
    plan = uniform_plan(model, cluster, training, tp=1, pp=1, dp=GPUS, zero=3, recompute="selective")
    gpu = cluster.gpu_types[0]
    params = stack_params(gpu, "torchtitan").with_updates(fp8_recipe=recipe, torch_compile=True)  # the table ran compiled
    est = evaluate(plan, {gpu.name: params})
    return training.global_batch * SEQ_LEN / est.step_time_s / GPUS


def derive(local_batch: int, ratio: float) -> float:
    """The forward GEMM rate at which predicted rowwise / tensorwise throughput is `ratio`."""
    tensorwise = throughput(local_batch, "fp8", "torchao-tensorwise")

    def predicted_ratio(rate: float) -> float:
        name = f"{TRIAL}-{rate!r}"  # a name per trial: layer prices are cached by their parameters
        fp8.RECIPES[name] = replace(fp8.RECIPES["torchao-rowwise"], name=name, gemm_rate=rate)
        try:
            return throughput(local_batch, "fp8", name) / tensorwise
        finally:
            del fp8.RECIPES[name]

    lo, hi = 0.01, 4.0  # predicted_ratio rises with the rate
    if not predicted_ratio(lo) <= ratio <= predicted_ratio(hi):
        raise SystemExit(f"published ratio {ratio:.4f} outside what rates {lo}..{hi} predict")
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if predicted_ratio(mid) < ratio else (lo, mid)
    return (lo + hi) / 2


def main() -> None:
    for label, batch, bf16, tensorwise, rowwise in TABLES:
        ratio = rowwise / tensorwise
        rate = derive(batch, ratio)
        print(f"{label}: published rowwise/tensorwise {ratio:.4f} (rowwise/bf16 {rowwise / bf16:.4f}); "
              f"predicted bf16 {throughput(batch, 'bf16', ''):.0f}, tensorwise "
              f"{throughput(batch, 'fp8', 'torchao-tensorwise'):.0f} tokens/s/GPU; "
              f"derived forward rowwise GEMM rate {rate:.3f}")
    print(f"planner.cost.fp8.TORCHAO_ROWWISE_GEMM_RATE = {fp8.TORCHAO_ROWWISE_GEMM_RATE}")


if __name__ == "__main__":
    main()
