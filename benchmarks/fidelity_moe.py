"""The published MoE runs (profiles/reference/moe-runs.yaml, Megatron-Bridge's performance
summaries) as plans the planner can price, or the planner's own reason why one cannot be.

Each row is mapped as fidelity_runs.py maps the measured runs: its hf_config to a model, its
DGX system to a cluster, its parallel degrees to a Megatron-core plan. A row is skipped with the
message of the planner's typed error (planner.core.errors.BadInput) raised while building it,
or with the runtime's first capability violation; the facts the source leaves unstated get one
assumption for the whole source (ASSUMPTION, printed by fidelity.py --assumptions).
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from pathlib import Path

import yaml

from fidelity_runs import Case, _read, cluster_from_spec
from planner.api.load import check_training_inputs, resolve_dtype
from planner.core.errors import BadInput
from planner.cost.recompute import PRICED_MODULES
from planner.cost.runtimes.capability import model_problem, violations
from planner.inputs.hardware import GB, US, load_catalog
from planner.inputs.model import MODELS_DIR, Model, build_layers, config_from_hf, with_bf16_layers
from planner.plan import Training, uniform_plan
from planner.schedules import search_schedule

MOE = Path(__file__).resolve().parent.parent / "profiles" / "reference" / "moe-runs.yaml"

SOURCE = "megatron-bridge-moe"
RUNTIME = "megatron"
ASSUMPTION = (
    "Megatron-Bridge performance summaries (NeMo containers 25.09-26.08): Megatron-core with "
    "Transformer Engine. Interconnect 'not quantified in source': the catalog's links of the GPU "
    "(its DGX system's NVLink and NICs), 8 GPUs per node on DGX H100/B200/B300; on DGX GB200/GB300 "
    "NVL72 a node per rack (its 72 GPUs share one NVLink Switch domain, the catalog's intra_node), "
    "64 GPUs of each rack used (16 of its 18 trays: the largest power of two a rack holds), the "
    "racks joined by the used GPUs' share of the rack's NICs (the catalog's inter_node x 64/72). "
    "Precision 'FP8-CS' as fp8 under Transformer Engine's current scaling (--fp8-recipe te-current); "
    "'FP8' alike (the rows' note: the H100 recipes use FP8 current scaling or blockwise; the planner "
    "has no blockwise recipe), and 'not stated' (25.09, whose footnote calls it an 8-bit recipe); "
    "MXFP8 and NVFP4 as the dtypes mxfp8 and nvfp4 (Transformer Engine's MXFP8BlockScaling and "
    "NVFP4BlockScaling). Recompute 'not stated' (no recipe matched "
    "the row) as none, or where its plan does not fit without recompute, as the first of selective and full "
    "that fits (the run ran, so it fit: Case.unstated_recompute); Megatron's module recompute (recompute_modules) as selective recomputing those "
    "modules (CostParams.selective_recompute) where the planner prices each of them (core_attn, layernorm, "
    "moe, moe_act), else as none unless it names core_attn (then selective: core-attention recompute); the distributed "
    "optimizer (ZeRO-1: the table's FSDP 0, or not in the table) with bf16 gradient buffers and reduction "
    "(the performance scripts' grad_reduce_in_fp32 False at every tag); sequence parallel with TP; etp "
    "not stated as tp (Megatron-core's default); the interleaved schedule where vp > 1; flash "
    "attention; force-balanced, dropless routing as the section note states, the '(tokendrop)' "
    "rows alike (with balanced routing no expert exceeds its capacity): every expert gets its mean "
    "share of the tokens (CostParams.moe_imbalance 1.0; the section note: \"In MoE training benchmarks, "
    "we force-balance the token distribution among experts and all benchmarks are token-dropless.\"); "
    "Megatron-core's flex token dispatcher (CostParams.moe_dispatcher 'flex', a token sent once per "
    "other node holding one of its experts) where the row's matched recipe states "
    "moe_flex_dispatcher_backend (hybridep), the alltoall dispatcher where no recipe matched; the step "
    "as one CUDA graph (CostParams.full_iteration_cuda_graph: no host time per layer) and the EP "
    "all-to-all under the other micro-batch's compute (CostParams.moe_a2a_overlap) where the matched "
    "recipe states cuda_graph_impl full_iteration and moe_a2a_overlap, and for the 26.08 rows whose "
    "v0.6.0 recipe calls the helper that sets both (FULL_ITERATION_RECIPES); rows the table footnotes "
    "as a known performance regression skipped (FLAGGED_REGRESSION); the "
    "rows the table's notes match to no recipe are matched here once Megatron-Bridge's "
    "WorkloadBaseConfig defaults (tp 1, pp 1, vp None, mbs 1; scripts/performance/utils/utils.py) are "
    "applied (MISSED_RECIPES: Qwen3-30B-A3B on 16 H100, tags v0.3.0-v0.5.1; the 26.08 Nemotron 3 Super "
    "rows, v0.6.0's perf_recipes/nemotronh, with their expert TP 1); Nemotron 3 Super, whose rows give no "
    "hf_config, as the catalog's nemotron-3-super (its parameter count the checkpoint's) with the two MTP "
    "depths its recipes train, one module run twice (CATALOG_MODELS; Nemotron 3.5 Lightning alike, as nemotron-3.5-lightning), its MTP module and under NVFP4 its first layer and last 14 kept "
    "in bf16 as its recipes keep them (RECIPE_MTP, KEPT_IN_BF16); another row without hf_config is skipped (model dimensions "
    "not verified).")

# Megatron-Bridge's performance configs keep bf16 gradient buffers and reduce them in bf16
# (CostParams.bf16_fp32_grads False) at every tag the table's containers ran: grad_reduce_in_fp32:
# false in scripts/performance/configs/qwen3/*.yaml (v0.1.0rc4); cfg.mixed_precision and cfg.ddp
# grad_reduce_in_fp32 = False in configs/qwen3/qwen3_llm_pretrain.py and configs/gpt_oss/
# gpt_oss_llm_pretrain.py (v0.2.0-v0.5.1); perf_recipes/_common.py _benchmark_common (v0.6.0)
GRAD_REDUCE_SOURCE = "Megatron-Bridge scripts/performance: grad_reduce_in_fp32 False"
# the section note every row quotes: routing force-balanced over the experts (moe_imbalance 1.0)
FORCE_BALANCED = "we force-balance the token distribution among experts"
# a matched recipe's stated setting that selects Megatron-core's flex token dispatcher
# (TransformerConfig.moe_flex_dispatcher_backend: deepep, hybridep or ncclep)
FLEX_BACKEND = re.compile(r'"moe_flex_dispatcher_backend": "(deepep|hybridep|ncclep)"')
# a footnote by which the table itself marks a row's value as a regression it will fix (the 26.06.01
# GPT-OSS rows: "Performance regression in GPT-OSS 120B pre-training is a known issue", cudnn-frontend
# issue 256, the fused grouped dGLU kernel 10x slower in cudnn-frontend 1.24): skipped as a value
# the source flags, as fidelity_runs.skip_reason skips the measured runs' flagged values
FLAGGED_REGRESSION = re.compile(r"performance regression .{0,80}known issue", re.IGNORECASE)
FLAGGED_REASON = "source flags the value as a known performance regression"
# a matched recipe's stated settings that remove host time and hide the expert-parallel all-to-all:
# the step as one CUDA graph (CostParams.full_iteration_cuda_graph) and Megatron-core's EP
# communication overlap (CostParams.moe_a2a_overlap; the 26.06 recipes' moe_a2a_overlap sets
# CommOverlapConfig.overlap_moe_expert_parallel_comm)
FULL_ITERATION = re.compile(r'"cuda_graph_impl": "full_iteration"')
A2A_OVERLAP = re.compile(r'"moe_a2a_overlap": true')
# the v0.6.0 recipes the 26.08 rows' notes name (their flat values only): each calls a helper that
# sets moe_token_dispatcher_type "flex" with moe_flex_dispatcher_backend "hybridep", cuda_graph_impl
# "full_iteration" and overlap_moe_expert_parallel_comm True: _enable_hybridep_full_iteration_mxfp8
# (src/megatron/bridge/perf_recipes/qwen/common.py @ v0.6.0, with the recipe's own flex/hybridep)
# and _apply_gpt_oss_120b_full_iter_fp8mx_configs (perf_recipes/gpt_oss/common.py @ v0.6.0)
FULL_ITERATION_RECIPES = ("qwen3_30b_a3b_pretrain_8gpu_gb200_fp8mx_config",
                          "qwen3_30b_a3b_pretrain_8gpu_gb300_fp8mx_config",
                          "gpt_oss_120b_pretrain_64gpu_gb200_fp8mx_config",
                          "gpt_oss_120b_pretrain_64gpu_gb300_fp8mx_config")
V060_RECIPE = re.compile(r"perf_recipes/\S+ @ v0\.6\.0 \((\w+)\)")
# the recipe tag a row's notes name ("No workload/perf recipe at tag v0.5.0 matched ...")
UNMATCHED_TAG = re.compile(r"No workload/perf recipe at tag (v[0-9.]+) matched")

# Megatron-Bridge recipes that match rows the notes call unmatched: the notes' matcher compared the
# recipe's own fields only, not the WorkloadBaseConfig defaults it inherits (tp 1, pp 1, vp None,
# mbs 1). (file and recipe, tags, model, table system, GPUs, gbs, mbs, tp, pp, vp, ep) -> its
# moe_flex_dispatcher_backend and moe_a2a_overlap, as the recipe file states them at those tags.
QWEN3_RECIPES = "scripts/performance/configs/qwen/qwen3_workload_base_configs.py"
SUPER_RECIPES = "src/megatron/bridge/perf_recipes/nemotronh"
MISSED_RECIPES = (
    # num_gpus=16, global_batch_size=1024, expert_model_parallel_size=16, moe_a2a_overlap=False,
    # moe_flex_dispatcher_backend="hybridep"
    (f"{QWEN3_RECIPES} QWEN3_30B_A3B_PRETRAIN_CONFIG_H100_FP8_CS_V1", ("v0.3.1", "v0.4.0", "v0.4.1", "v0.4.2",
     "v0.5.0", "v0.5.1"), "Qwen3_30B_a3B", "H100", 16, 1024, 1, 1, 1, None, 16, ("hybridep", False, 0)),
    # num_gpus=16, global_batch_size=1024, pipeline_model_parallel_size=2,
    # virtual_pipeline_model_parallel_size=12, moe_a2a_overlap=True, moe_flex_dispatcher_backend="deepep"
    # (ep 8: the base config's)
    (f"{QWEN3_RECIPES} QWEN3_30B_A3B_PRETRAIN_CONFIG_H100_FP8_CS_V1", ("v0.3.0",), "Qwen3_30B_a3B", "H100", 16,
     1024, 1, 1, 2, 12, 8, ("deepep", True, 0)),
    # the 26.08 Nemotron 3 Super rows: v0.6.0's nemotron_3_super_pretrain_64gpu_{gb300,gb200}_{fp8mx,nvfp4}_config
    # (global_batch_size 512, micro_batch_size 1, expert_model_parallel_size 64, expert_tensor_parallel_size 1,
    # moe_token_dispatcher_type "flex" with moe_flex_dispatcher_backend "hybridep"; no EP overlap)
    (f"{SUPER_RECIPES}/gb300/nemotronh.py", ("v0.6.0",), "Nemotron_3_Super", "GB300", 64, 512, 1, 1, 1, None, 64,
     ("hybridep", False, 1)),
    (f"{SUPER_RECIPES}/gb200/nemotronh.py", ("v0.6.0",), "Nemotron_3_Super", "GB200", 64, 512, 1, 2, 1, None, 64,
     ("hybridep", False, 1)),
    # the 26.08 Nemotron 3.5 Lightning row: v0.6.0's nemotron_3_5_lightning_pretrain_8gpu_gb200_fp8mx_config, Nano's
    # GB200 MXFP8 recipe (global_batch_size 512, micro_batch_size 2, expert_model_parallel_size 8,
    # moe_flex_dispatcher_backend "hybridep") with the MTP block
    (f"{SUPER_RECIPES}/gb200/nemotronh.py", ("v0.6.0",), "Nemotron_3_5_Lightning", "GB200", 8, 512, 2, 1, 1, None, 8,
     ("hybridep", False, 0)),
)
# rows without hf_config whose model the planner's catalog holds, its config checked against the checkpoint
# (the parameter count equals the checkpoint's element count: profiles/models/published_params.yaml),
# with the config changes the rows' recipes train: every Nemotron 3 Super recipe (recipes/nemotronh
# nemotron_3_super.py, v0.4.0-v0.6.0) trains mtp_num_layers 2 with mtp_use_repeated_layer, its one MTP
# module run twice (ModelConfig.mtp_repeated), kept in bf16 (keep_mtp_spec_in_bf16 True: the Super recipes
# v0.4.0-v0.6.0, Lightning's v0.6.0 gb200 recipe; ModelConfig.mtp_bf16)
RECIPE_MTP = {"num_nextn_predict_layers": 2, "mtp_use_repeated_layer": True, "keep_mtp_spec_in_bf16": True}
CATALOG_MODELS = {"Nemotron_3_Super": ("nemotron-3-super", RECIPE_MTP),
                  # its v0.6.0 perf recipes alike (perf_recipes/nemotronh/gb200/nemotronh.py)
                  "Nemotron_3_5_Lightning": ("nemotron-3.5-lightning", RECIPE_MTP)}
# the decoders a model's recipes keep in bf16 under a quantized dtype (ModelConfig.bf16_layers): the
# Nemotron 3 Super recipes' NVFP4 precision, training/mixed_precision.py nemotron_3_super_bf16_with_nvfp4_mixed (v0.4.0-v0.6.0),
# sets first_last_layers_bf16 with num_layers_at_end_in_bf16 14 beside megatron-core's default
# num_layers_at_start_in_bf16 1; the MXFP8 one (bf16_with_mxfp8_mixed) keeps none
KEPT_IN_BF16 = {"Nemotron_3_Super": {"nvfp4": (1, 14)}}


def missed_recipe(run: dict) -> tuple[str, bool, int]:
    """(flex backend, moe_a2a_overlap, expert TP: 0 not stated) of the MISSED_RECIPES entry matching a
    row its notes call unmatched; ('', False, 0) where none does."""
    tag = UNMATCHED_TAG.search(" ".join(" ".join(map(str, run.get("notes", ()))).split()))
    if tag is None:
        return "", False, 0
    p = run["parallel"]
    vp = p.get("vp") if isinstance(p.get("vp"), int) and p.get("vp") > 1 else None
    row = (run["model"]["name"], run["hardware"]["gpus"][0]["type"], run["hardware"]["total_gpus"],
           run["global_batch"], run["micro_batch"], p.get("tp"), p.get("pp"), vp, p.get("ep"))
    return next((stated for _, tags, *fields, stated in MISSED_RECIPES
                 if tag.group(1) in tags and tuple(fields) == row), ("", False, 0))


def names_full_iteration_recipe(run: dict) -> bool:
    """Whether the row's notes name a v0.6.0 recipe of FULL_ITERATION_RECIPES."""
    recipe = V060_RECIPE.search(" ".join(str(n) for n in run.get("notes", ())))
    return recipe is not None and recipe.group(1) in FULL_ITERATION_RECIPES


def missed_recipe_backend(run: dict) -> str:
    """The flex backend of the MISSED_RECIPES entry matching a row its notes call unmatched ('': none)."""
    return missed_recipe(run)[0]

# the table's system names -> planner GPU catalog names (the catalog decides whether it knows them)
GPUS = {"H100": "H100-SXM5-80GB", "B200": "B200", "B300": "B300", "GB200": "GB200", "GB300": "GB300"}
# the table's NVL72 systems; an NVL72 rack's GPUs (the catalog's node), the GPUs a job uses of one
NVL72 = {"GB200", "GB300"}
RACK_GPUS, USED_PER_RACK = 72, 64
# the table's precision -> Training.dtype
DTYPES = {"bf16": "bf16", "fp8": "fp8", "fp8-cs": "fp8", "mxfp8": "mxfp8", "nvfp4": "nvfp4"}
# the fp8 rows' scaling (ASSUMPTION): Transformer Engine's current scaling
FP8_RECIPE = "te-current"


def load_moe_runs(path: Path = MOE) -> list[dict]:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return yaml.load(path.read_text(), Loader=loader)["runs"]


def reason(error: BadInput) -> str:
    """The planner's message for a skipped row, without the list of supported values or the
    `see ...` hint that follows it (the table groups the rows by it)."""
    return error.message.split("; supported")[0].split(" (see `")[0]


def catalog_config(table_name: str) -> dict | None:
    """The config.json of the catalog model CATALOG_MODELS gives a row's model, with its recipes'
    changes (None: none)."""
    entry = CATALOG_MODELS.get(table_name)
    if entry is None:
        return None
    name, changes = entry
    return json.loads((MODELS_DIR / f"{name}.json").read_text()) | changes


@lru_cache(maxsize=None)
def _model(name: str, config_yaml: str, bf16_layers: tuple[int, int] = (0, 0)) -> Model:
    config = yaml.safe_load(config_yaml)
    c = config_from_hf(config, name, "moe-runs")
    return with_bf16_layers(Model(c.name, c, build_layers(c), raw=config), bf16_layers)


def _dtype(run: dict) -> str:
    precision = str(run["precision"]).lower()
    return "fp8" if precision.startswith("not stated") else DTYPES.get(precision, precision)


# the module list a row's recompute states ("selective, recompute_modules=['layernorm', 'moe_act'] (...)")
RECOMPUTE_MODULES = re.compile(r"recompute_modules=\[([^\]]*)\]")


def stated_modules(run: dict) -> tuple[str, ...]:
    """The Megatron-core recompute_modules a row's selective recompute states (sorted; () if none)."""
    text = " ".join(str(run["recompute"]).split())
    found = RECOMPUTE_MODULES.search(text) if text.startswith("selective") else None
    return tuple(sorted(m.strip(" '\"") for m in found.group(1).split(",") if m.strip())) if found else ()


def priced_modules(run: dict) -> str:
    """The row's stated modules as CostParams.selective_recompute ("layernorm+moe_act") when the
    planner prices every one of them (recompute.PRICED_MODULES), else ''."""
    modules = stated_modules(run)
    return "+".join(modules) if modules and set(modules) <= set(PRICED_MODULES) else ""


def _recompute(run: dict) -> str:
    text = str(run["recompute"])
    if priced_modules(run):
        return "selective"
    return "selective" if text.startswith("selective") and "core_attn" in text else "none"


def _degree(value) -> int:
    return value if isinstance(value, int) else 1  # 'n/a', null: not used


def nvl72_spec(gpu: str, gpus: int) -> dict:
    """A cluster spec of `gpus` NVL72 GPUs: a node per rack (one NVLink Switch domain) of up to
    USED_PER_RACK GPUs, with those GPUs' share of the rack's NICs between racks."""
    per_node = min(USED_PER_RACK, gpus)
    nic = load_catalog()[gpu].inter_node
    inter = {"bandwidth_GBps": nic.bandwidth_bytes_per_s / GB * per_node / RACK_GPUS, "latency_us": nic.latency_s / US}
    return {"name": "moe-nvl72", "node_groups": [{"name": "rack", "gpu": gpu, "nodes": gpus // per_node,
                                                  "gpus_per_node": per_node, "inter_node": inter}]}


def _build(run: dict) -> tuple[object, str]:
    """(plan, '') or (None, the planner's reason it cannot price the row)."""
    md = run["model"]
    config = md.get("hf_config") or catalog_config(md["name"])
    if not config:
        return None, "model dimensions not stated (no hf_config)"
    name = md["name"].split(" (")[0].lower().replace(" ", "-")
    kept = KEPT_IN_BF16.get(md["name"], {})
    bf16_layers = kept.get(_dtype(run), (0, 0))
    model = _model(name, yaml.safe_dump(config, sort_keys=True), bf16_layers)
    problem = model_problem(RUNTIME, model)
    if problem:
        return None, problem
    table_gpu = run["hardware"]["gpus"][0]["type"]
    gpus = run["hardware"]["total_gpus"]
    gpu = GPUS.get(table_gpu, table_gpu)
    spec = nvl72_spec(gpu, gpus) if table_gpu in NVL72 else {
        "name": "moe", "node_groups": [{"name": "g", "gpu": gpu, "nodes": gpus // min(8, gpus),
                                        "gpus_per_node": min(8, gpus)}]}
    cluster = cluster_from_spec(spec, "moe-runs")
    p = run["parallel"]
    tp, pp, cp, vp, ep = (_degree(p.get(k)) for k in ("tp", "pp", "cp", "vp", "ep"))
    dtype = resolve_dtype(cluster, _dtype(run), RUNTIME)
    # the EP overlap with virtual stages is Megatron-core's combined 1F1B (planner.schedules.combined_1f1b)
    combined = pp > 1 and vp > 1 and dict(run_settings(run)).get("moe_a2a_overlap", False)
    training = Training(run["global_batch"], run["seq_len"], dtype, run["micro_batch"],
                        "combined-1f1b" if combined else search_schedule(vp).name,
                        vp, "flash", runtime=RUNTIME, fp8_recipe=FP8_RECIPE if dtype == "fp8" else "",
                        bf16_layers=bf16_layers)
    check_training_inputs(model, training)
    etp = _degree(p.get("etp")) if p.get("etp") else missed_recipe(run)[2]
    plan = uniform_plan(model, cluster, training, tp=tp, pp=pp, dp=gpus // (tp * pp * cp), zero=1,
                        recompute=_recompute(run), sequence_parallel=tp > 1, cp=cp, ep=ep, etp=etp)
    problems = violations(plan, RUNTIME)
    return (None, problems[0]) if problems else (plan, "")


def run_settings(run: dict) -> tuple[tuple[str, object], ...]:
    """The CostParams fields the row's own notes state (Case.settings): force-balanced routing
    (the section note), bf16 gradient buffers (GRAD_REDUCE_SOURCE), the flex dispatcher (a matched recipe's moe_flex_dispatcher_backend, or
    a MISSED_RECIPES one's), a whole-step CUDA graph and the EP communication overlap (a matched recipe's
    cuda_graph_impl full_iteration and moe_a2a_overlap, or a FULL_ITERATION_RECIPES one), the recompute modules its recipe states when all are priced."""
    notes = " ".join(str(n) for n in run.get("notes", ()))
    settings: tuple[tuple[str, object], ...] = (("bf16_fp32_grads", False),)  # GRAD_REDUCE_SOURCE
    if FORCE_BALANCED in " ".join(notes.split()):
        settings += (("moe_imbalance", 1.0),)
    full_iteration_recipe = names_full_iteration_recipe(run)
    missed_backend, missed_overlap, _ = missed_recipe(run)
    if FLEX_BACKEND.search(notes) or missed_backend or full_iteration_recipe:
        settings += (("moe_dispatcher", "flex"),)
    if FULL_ITERATION.search(notes) or full_iteration_recipe:
        settings += (("full_iteration_cuda_graph", True),)
    if A2A_OVERLAP.search(notes) or full_iteration_recipe or missed_overlap:
        settings += (("moe_a2a_overlap", True),)
    if priced_modules(run):
        settings += (("selective_recompute", priced_modules(run)),)
    if "precision" in run and _dtype(run) == "fp8":
        settings += (("fp8_recipe", FP8_RECIPE),)
    return settings


def moe_case(run: dict) -> Case:
    m = run["measured"]
    table_gpu = run["hardware"]["gpus"][0]["type"]
    common = dict(id=run["id"], source=SOURCE, runtime=RUNTIME, metric=m["metric"], published=float(m["value"]),
                  gpus=(GPUS.get(table_gpu, table_gpu),))
    if FLAGGED_REGRESSION.search(" ".join(" ".join(map(str, run.get("notes", ()))).split())):
        return Case(**common, skip=FLAGGED_REASON)
    try:
        plan, skip = _build(run)
    except BadInput as error:
        plan, skip = None, reason(error)
    if skip:
        return Case(**common, skip=skip)
    t = plan.training
    unstated = ("selective", "full") if str(run["recompute"]) == "not stated" and not priced_modules(run) else ()
    return Case(**common, plan=plan, read=_read(m["metric"], t.global_batch * t.seq_len, len(plan.used_ranks())),
                settings=run_settings(run), unstated_recompute=unstated)


def moe_cases(path: Path = MOE) -> list[Case]:
    return [moe_case(run) for run in load_moe_runs(path)]
