"""The best published MFU per GPU architecture and precision: planner/data/mfu_ceilings.yaml,
which `plan`, `evaluate` and `show` compare a predicted MFU with (planner.inputs.mfu_ceilings).

    python benchmarks/mfu_ceilings.py            # every run's MFU, best per architecture and precision
    python benchmarks/mfu_ceilings.py --write    # regenerate planner/data/mfu_ceilings.yaml
    python benchmarks/mfu_ceilings.py --check    # exit 1 when the shipped file differs

Runs: the project's published sets, profiles/reference/measured-runs.yaml (as fidelity_runs.py
maps them to plans), Narayanan et al. SC'21 Table 1 (profiles/reference/published-runs.yaml,
source A) and, where the project holds it, profiles/reference/moe-runs.yaml (as fidelity_moe.py
maps it). Their MFU is computed the planner's way (basis "measured"): the measured throughput
(tokens per second over the used GPUs, or global batch x sequence per measured step; SC'21's
TFLOP/s per GPU converted back to a step time with the paper's own FLOP count) times the
planner's model FLOPs per token (planner.cost.flops: causal attention, no recomputation),
over the catalog peak of the dtype the planner divides MFU by (formulas.mfu_peak_dtype, under
the run's runtime). So a ceiling compares like with like with the MFU `plan` prints. An MoE run
the planner cannot map counts with the model TFLOP/s per GPU its source states over the catalog
peak of its precision (basis "stated_tflops": the source's FLOP count). A run whose GPUs span two
architectures, and a measured run that fidelity_runs.py cannot turn into a plan, gives none.

Architectures the project's sets hold no run of take the best MFU a primary source states
(basis "stated", CITED below, each with its quote): their FLOP convention is the source's.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from fidelity_runs import Case, cluster_from_spec, gpt, measured_cases  # noqa: E402
from planner.cost.flops import model_flops_per_sample  # noqa: E402
from planner.cost.formulas import mfu_peak_dtype  # noqa: E402
from planner.cost.runtimes import stack_params  # noqa: E402
from planner.inputs.devices import peak_key  # noqa: E402
from planner.inputs.hardware import ARCHITECTURES, load_catalog  # noqa: E402
from planner.inputs.mfu_ceilings import CEILINGS_PATH, FORMAT  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "profiles" / "reference" / "published-runs.yaml"
MOE = ROOT / "profiles" / "reference" / "moe-runs.yaml"

# Published MFUs, as their sources state them, for architectures without a run in the project's sets.
CITED = (
    {"run": "deepspeed-bert-large-seq128-v100", "architecture": "volta", "precision": "fp16", "mfu": 0.52,
     "gpu": "V100", "source": "DeepSpeed, \"The Fastest and Most Efficient BERT Training through Optimized "
     "Transformer Kernels\" (2020), https://www.deepspeed.ai/2020/05/18/bert-record.html",
     "quote": "reaching a staggering performance of 66 teraflops per V100 GPU, which is 52% of the hardware peak"},
    {"run": "megatron-lm-v1.0-gpt2-1.2b-v100", "architecture": "volta", "precision": "fp16", "mfu": 0.48,
     "gpu": "V100 (DGX-2H)", "source": "NVIDIA ADLR, \"MegatronLM's Supercharged V1.0\" (2019), "
     "https://nv-adlr.github.io/MegatronLMV1",
     "quote": "our baseline model with 1.2 billion parameters now achieves 62.4 teraFLOPs which is 48% of the "
     "theoretical peak FLOPS for a single GPU in a DGX2-H server"},
)

PRECISIONS = ("fp32", "tf32", "fp16", "bf16", "fp8")


def citation(run: dict) -> str:
    """A run's source: its paper (else its repository), the file and the table it was read from."""
    s = run["source"]
    head = s.get("paper") or s.get("repo") or ""
    where = ", ".join(x for x in ((s["repo"] if s.get("paper") and s.get("repo") else ""), s.get("path") or "",
                                  f"table '{s['table']}'" if s.get("table") else "") if x)
    return f"{head} ({where})" if where else head


def _tokens_per_s(c: Case) -> float:
    """The run's measured tokens per second over all its used GPUs."""
    t = c.plan.training
    if c.metric == "iteration_time":
        return t.global_batch * t.seq_len / c.published
    if c.metric == "tokens_per_s_per_gpu":
        return c.published * len(c.plan.used_ranks())
    raise ValueError(c.metric)


def peak_of(plan, runtime: str) -> tuple[set[str], set[str], float]:
    """(architectures, MFU peak dtypes, summed peak FLOP/s) of the plan's used ranks."""
    t = plan.training
    archs, dtypes, peak = set(), set(), 0.0
    for rank in plan.used_ranks():
        gpu = plan.cluster.group_of_rank(rank).gpu
        dtype = mfu_peak_dtype(gpu, t.dtype, stack_params(gpu, runtime, tf32_matmul=t.tf32_matmul))
        archs.add(gpu.architecture)
        dtypes.add(dtype)
        peak += gpu.peak(dtype)
    return archs, dtypes, peak


def case_row(c: Case, cite: str) -> dict | None:
    """The run's MFU the planner's way, or None (no plan; GPUs of two architectures)."""
    if c.plan is None:
        return None
    archs, dtypes, peak = peak_of(c.plan, c.runtime)
    if len(archs) != 1 or len(dtypes) != 1 or "" in archs:
        return None
    t = c.plan.training
    flops_per_token = model_flops_per_sample(c.plan.model, t.seq_len) / t.seq_len
    gpus = sorted({c.plan.cluster.device(r).gpu for r in c.plan.used_ranks()})
    return {"run": c.id, "architecture": archs.pop(), "precision": dtypes.pop(),
            "mfu": _tokens_per_s(c) * flops_per_token / peak, "basis": "measured", "gpu": "+".join(gpus),
            "source": cite}


def sc21_rows() -> list[dict]:
    """Narayanan et al. SC'21 Table 1: TFLOP/s per GPU under their FLOP count (eq. 3, with
    recomputation) back to a step time, then the planner's MFU of that step."""
    ref = yaml.safe_load(REFERENCE.read_text())["source_a_megatron_sc21_table1"]
    s, vocab, gpu_name = ref["seq_len"], ref["vocab"], ref["gpu"]
    gpu = cluster_from_spec({"name": "dgx", "node_groups": [{"name": "g", "gpu": gpu_name, "nodes": 1,
                                                              "gpus_per_node": 8}]}, "reference").groups[0].gpu
    rows = []
    for run in ref["runs"]:
        h, l, B, n = run["hidden"], run["layers"], run["global_batch"], run["gpus"]
        model = gpt(f"gpt-{h}x{l}", h, run["heads"], l, vocab, s, True)
        paper_flops = 96 * B * s * l * h * h * (1 + s / (6 * h) + vocab / (16 * l * h))
        step_s = paper_flops / (run["tflops_per_gpu"] * 1e12 * n)
        mfu = model_flops_per_sample(model, s) * B / step_s / (n * gpu.peak("fp16"))
        rows.append({"run": f"megatron-sc21-table1-{run['params_B']}B-{n}gpu", "architecture": gpu.architecture,
                     "precision": "fp16", "mfu": mfu, "basis": "measured", "gpu": gpu_name,
                     "source": "Narayanan et al., \"Efficient Large-Scale Language Model Training on GPU Clusters "
                               "Using Megatron-LM\", SC'21, Table 1 (profiles/reference/published-runs.yaml)"})
    return rows


def moe_rows() -> list[dict]:
    """The MoE runs, where the project holds moe-runs.yaml (fidelity_moe maps them); a run it
    cannot map, from the model TFLOP/s per GPU its source states (stated_tflops_row)."""
    if not MOE.exists():
        return []
    from fidelity_moe import load_moe_runs, moe_case

    catalog = load_catalog()
    rows = []
    for run in load_moe_runs(MOE):
        c = moe_case(run)
        row = case_row(c, citation(run)) if c.plan is not None else stated_tflops_row(run, catalog)
        if row:
            rows.append(row)
    return rows


def stated_tflops_row(run: dict, catalog: dict) -> dict | None:
    """basis "stated_tflops": the model TFLOP/s per GPU the source states (its own FLOP count) over
    the catalog peak of the run's precision (its format's: fp8 for MXFP8, fp4 for NVFP4); None where
    the source states none, the GPU is not in the catalog or lacks the format, or the precision is
    not a planner dtype (not stated)."""
    from fidelity_moe import DTYPES, GPUS

    tflops = run["measured"].get("model_tflops_per_gpu")
    table_gpu = run["hardware"]["gpus"][0]["type"]
    gpu = catalog.get(GPUS.get(table_gpu, table_gpu))
    dtype = DTYPES.get(str(run["precision"]).lower())
    if not tflops or gpu is None or dtype is None or not gpu.supports(dtype) or not gpu.architecture:
        return None
    precision = peak_key(dtype)  # MXFP8 at the fp8 peak, NVFP4 at the fp4 peak, as a plan's MFU divides
    return {"run": run["id"], "architecture": gpu.architecture, "precision": precision,
            "mfu": tflops * 1e12 / gpu.peak(precision), "basis": "stated_tflops", "gpu": gpu.name,
            "source": citation(run)}


def all_rows() -> list[dict]:
    """Every run's MFU (measured basis) and the cited figures (stated basis)."""
    runs = {r["id"]: r for r in yaml.load((ROOT / "profiles/reference/measured-runs.yaml").read_text(),
                                          Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))["runs"]}
    rows = [row for c in measured_cases() if (row := case_row(c, citation(runs[c.id])))]
    rows += sc21_rows() + moe_rows()
    rows += [{**c, "basis": "stated"} for c in CITED]
    return rows


def _order(key: tuple[str, str]) -> tuple[int, int, str]:
    arch, precision = key
    return (ARCHITECTURES.index(arch) if arch in ARCHITECTURES else len(ARCHITECTURES),
            PRECISIONS.index(precision) if precision in PRECISIONS else len(PRECISIONS), precision)


def ceilings(rows: list[dict]) -> list[dict]:
    """The highest-MFU row per (architecture, precision), in architecture then precision order;
    ties go to the first run in the sets' order."""
    best: dict[tuple[str, str], dict] = {}
    for row in rows:
        key = (row["architecture"], row["precision"])
        if key not in best or row["mfu"] > best[key]["mfu"]:
            best[key] = row
    return [best[k] for k in sorted(best, key=_order)]


HEADER = """\
# The best published MFU per GPU architecture and precision. Generated by
# benchmarks/mfu_ceilings.py (--write); do not edit by hand. `plan`, `evaluate` and `show` flag
# a predicted MFU above the ceiling of its plan's architecture and precision (planner.inputs.mfu_ceilings).
# basis "measured": the run's measured throughput x the planner's model FLOPs per token (causal
# attention, no recomputation) / the catalog peak of the dtype the planner divides MFU by, so it
# compares like with like with a predicted MFU; "stated_tflops": a run the planner cannot map, its
# source's model TFLOP/s per GPU (its FLOP convention) over the catalog peak of its precision;
# "stated": the MFU as the source states it, for an architecture the project's run sets hold no run of.
"""


def render(best: list[dict]) -> str:
    entries = [{"architecture": r["architecture"], "precision": r["precision"], "mfu": round(r["mfu"], 4),
                "basis": r["basis"], "run": r["run"], "gpu": r["gpu"], "source": r["source"],
                **({"quote": r["quote"]} if r.get("quote") else {})} for r in best]
    body = yaml.safe_dump({"format": FORMAT, "ceilings": entries}, sort_keys=False, width=110, allow_unicode=True)
    return HEADER + body


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--write", action="store_true", help=f"write {CEILINGS_PATH.relative_to(ROOT)}")
    parser.add_argument("--check", action="store_true", help="exit 1 when the shipped file differs")
    args = parser.parse_args()
    rows = all_rows()
    best = ceilings(rows)
    text = render(best)
    if args.write:
        CEILINGS_PATH.write_text(text)
    if args.check:
        sys.exit(0 if CEILINGS_PATH.read_text() == text else 1)
    counts: dict[tuple[str, str], int] = {}
    for row in rows:
        counts[(row["architecture"], row["precision"])] = counts.get((row["architecture"], row["precision"]), 0) + 1
    print(f"{'architecture':12} {'precision':9} {'runs':>4} {'best MFU':>8}  basis     run")
    for r in best:
        print(f"{r['architecture']:12} {r['precision']:9} {counts[(r['architecture'], r['precision'])]:4} "
              f"{r['mfu']:8.1%}  {r['basis']:9} {r['run']}")


if __name__ == "__main__":
    main()
