"""The public measured runs (profiles/reference/measured-runs.yaml) as plans the planner can
price, or the reason one cannot be.

Each source's unstated facts get ONE stated assumption for the whole source (never a per-run
knob); `ASSUMPTIONS` lists them and fidelity.py prints them with --assumptions.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Callable

import yaml

from planner.inputs import hardware
from planner.inputs.hardware import Cluster
from planner.inputs.hardware import cluster_from_spec as _cluster_from_spec
from planner.inputs.model import Model, build_layers, config_from_hf, load_model
from planner.plan import Plan, Replica, Stage, Training, uniform_plan
from planner.schedules import search_schedule

MEASURED = Path(__file__).resolve().parent.parent / "profiles" / "reference" / "measured-runs.yaml"

# source key -> (runtime, the assumptions made for every run of the source)
ASSUMPTIONS = {
    "amp-t4": ("deepspeed", "AMP (Li et al. 2022) on 4 AWS g4dn.12xlarge: Megatron-LM v1.1.5 + DeepSpeed pipeline "
               "engine, fp16, standard (unfused) attention, no activation checkpointing and ZeRO-0 (the runtime's "
               "defaults; the ds_config has no zero section), 4 T4 per node on the 50 Gb/s intra- (PCIe) and "
               "inter-node (Ethernet) links the source states, dropout 0.1 (Megatron default)."),
    "sailor-mit": ("deepspeed", "Sailor (Strati et al. 2025), MIT Titan-RTX + RTX-2080 VMs of 4 GPUs (the "
                   "RTX-2080 an RTX 2080 Ti: 11 GiB in Sailor's cluster config): Megatron-DeepSpeed "
                   "fork, fp32 (precision not stated; Megatron's default, as in Sailor's Clariden scripts), selective "
                   "recompute (not stated; of none/selective/full the setting whose predicted peak memory is nearest "
                   "the max_mem the runs logged, `fidelity.py --memory`: median |error| 17 % against 81 % for none, "
                   "under which 7 of the 9 runs would not fit, and 44 % for full), ZeRO-0, the stages and replicas of the plan file, the batch split equally over a "
                   "stage's replicas, PCIe 3.0 inside a VM and 25 Gb/s Ethernet between (the catalog default: "
                   "link speeds not stated)."),
    "sailor-gh200": ("deepspeed", "Sailor on CSCS Clariden (4 GH200 per node): Megatron-DeepSpeed fork, fp32 (no "
                     "--fp16/--bf16 in run_opt.slurm; PyTorch keeps TF32 off for matmuls), no recompute, ZeRO-0, "
                     "the plan file's stages, batch split equally over replicas, the catalog's Alps node links; "
                     "GPT-Neo-2.7B as a dense GPT (its local attention is ignored)."),
    "llm-foundry": ("fsdp1", "MosaicML llm-foundry MPT benchmarks (A100-40GB, 1600 Gb/s RoCE per node): FSDP1 "
                    "FULL_SHARD (ZeRO-3), bf16, flash attention, 8 GPUs per node (not stated; DGX-style nodes), "
                    "MPT as a GPT without dropout (ALiBi: no position parameters beyond a 2048 table), "
                    "'activation checkpointing' = full recompute."),
    "torchtitan": ("torchtitan", "torchtitan tables (Liang et al. 2024, repo docs): FSDP2 over dp_shard (ZeRO-3; "
                   "with PP, whose default never reshards after forward and which reduce-scatters once per step, "
                   "ZeRO-1), "
                   "bf16, flash (SDPA) attention, sequence parallel with TP, seq_len 8192 where not stated "
                   "(the train_configs default), global batch = local batch x dp_shard (no gradient "
                   "accumulation, the default); 'selective' is per-op SAC (selective_ac_option 'op', the "
                   "train_configs default), as the torchtitan runtime prices it; 'selective layer' (selective_ac_option "
                   "'2') as block recomputation of every second block; runs with float8 linears "
                   "as torchao's dynamic tensorwise recipe, those the table names 'float8 rowwise' as its "
                   "rowwise recipe (planner.cost.fp8, --fp8-recipe torchao-rowwise); "
                   "async TP runs with the SP collectives fused with their forward GEMMs (CostParams.tp_async); "
                   "the Aug 2024 performance doc's Float8 rows with FSDP's fp8 all-gather, as its 405B preset "
                   "sets (--fp8-all-gather, Training.fp8_all_gather); "
                   "runs under torch.compile (the id, table title or command line says so) with "
                   "TorchInductor's fused elementwise kernels (CostParams.torch_compile), the others eager; "
                   "with PP the micro-batches are the number of stages (pipeline_parallel_microbatches unset)."),
    "bloom": ("deepspeed", "BLOOM-176B (BigScience tr11): Megatron-DeepSpeed, bf16, full recompute, ZeRO-1 "
              "(its bf16 optimizer shards the states), 8 A100-80GB per node on the catalog NVLink, 4 Omni-Path "
              "100 Gb/s links per node, no dropout, ALiBi (a GPT with a 2048 position table)."),
    "nemo": ("megatron", "NeMo 24.07 DGX-H100 performance tables (NeMo docs/source/performance/"
             "performance_summary.md): Megatron-Core with Transformer Engine fp8 (hybrid, delayed scaling), "
             "the model dimensions of the NeMo-Framework-Launcher recipes (conf/training/gpt3/{5b,20b,175b}: "
             "GPT-3 with learned positions, GeLU, vocab 50304; conf/training/nemotron/{8b,22b,340b}: RoPE, "
             "squared-ReLU MLP, untied 256k vocab; the Llama 2 catalog configs), flash attention, "
             "sequence parallel with TP, the distributed optimizer (ZeRO-1), no recomputation (the recipes "
             "set none), no dropout, the interleaved schedule with the table's VP, the catalog DGX H100 links; "
             "the two Llama 3 runs with Megatron-core's ring context parallelism (cp 2, --cp-comm-type p2p); "
             "bf16 gradient buffers and sync (the recipes' distributed_fused_adam with grad_sync_dtype bf16, "
             "stated in the GPT-3 fp8 performance recipes, assumed for the others: with Megatron-LM's fp32 "
             "buffers the GPT-3 20B and Llama 3 8B runs would not fit their 80 GB)."),
    "opt": ("fsdp1", "OPT-175B: the TP degree is not stated."),
}

# the sources whose fp8 runs are priced (planner.cost.fp8: their runtimes' fp8 recipes)
FP8_SOURCES = ("torchtitan", "nemo")

# the MIT runs' unstated recompute setting (see ASSUMPTIONS["sailor-mit"] and fidelity.py --memory)
SAILOR_MIT_RECOMPUTE = "selective"

# Sailor's "RTX-2080" is an RTX 2080 Ti: its cluster config gives it 11 GiB (sailor/Planner/simulations/
# configs/basic_cluster_config.json, "RTX-2080": mem_per_gpu 11811160064; the RTX 2080 has 8 GB, the 2080 Ti
# 11), and its authors' OPT-350 layer profiles time it 1.06x the TITAN RTX's (baselines/Metis/profiles/
# OPT-350/*/mbs1_tmp1.json: 29.7 against 28.1 ms), the ratio of their TU102 cores (4,608 / 4,352)
CATALOG = {"t4": "T4", "titan-rtx": "TITAN-RTX", "rtx-2080": "RTX-2080-Ti", "gh-96": "GH200-96GB",
           "a100_40gb": "A100-SXM4-40GB", "a100 80gb": "A100-SXM4-80GB", "h200": "H200-SXM-141GB",
           "h100 sxm hbm2e 96gb (500w power limit)": "H100-SXM5-96GB",
           "h100 (94gb, hbm2e lower-tdp sxm per footnote)": "H100-SXM5-96GB", "h100 (dgx-h100)": "H100-SXM5-80GB"}

LLAMA = {"llama 3.1 8b": "llama-3-8b", "llama 3.1 70b": "llama-3-70b", "llama 3.1 405b": "llama-3.1-405b",
         "llama 2 13b": "llama-2-13b", "llama 2 70b": "llama-2-70b"}


@dataclass(frozen=True)
class Case:
    """One run: its plan and how to read the prediction in the run's metric, or why it is skipped."""

    id: str
    source: str
    runtime: str
    metric: str
    published: float
    plan: Plan | None = None
    skip: str = ""
    read: Callable | None = None  # Estimate -> the metric
    # CostParams fields the run's stated software options set (not fitted): e.g. async TP
    settings: tuple[tuple[str, object], ...] = ()
    max_mem_bytes: float | None = None  # the peak memory the run logged, where it did
    gpus: tuple[str, ...] = ()  # the GPUs' catalog names (as written where the catalog lacks one)
    # the recompute modes to try, in order, where the source does not state the run's and its plan
    # does not fit without: the run ran, so it fit (fidelity.price)
    unstated_recompute: tuple[str, ...] = ()


def source_of(run: dict) -> str:
    repo, rid = str(run["source"].get("repo", run["source"])), run["id"]
    if "AMP" in repo:
        return "amp-t4"
    if "sailor" in repo:
        return "sailor-mit" if rid.startswith("sailor-mit") else "sailor-gh200"
    if "llm-foundry" in repo:
        return "llm-foundry"
    if "torchtitan" in repo:
        return "torchtitan"
    if "bigscience" in repo:
        return "bloom"
    if rid.startswith("nemo"):
        return "nemo"
    return "opt"


@lru_cache(maxsize=None)
def _cached_cluster(spec_json: str, where: str) -> Cluster:
    catalog = hardware.load_catalog_data()
    real, hardware.load_catalog_data = hardware.load_catalog_data, lambda: catalog
    try:  # one parse of the catalog for all the replay's clusters
        return _cluster_from_spec(json.loads(spec_json), where)
    finally:
        hardware.load_catalog_data = real


def cluster_from_spec(spec: dict, where: str) -> Cluster:
    """planner.inputs.hardware.cluster_from_spec, once per distinct spec (it reads the catalog each time)."""
    return _cached_cluster(json.dumps(spec, sort_keys=True), where)


@lru_cache(maxsize=None)
def gpt(name: str, hidden: int, heads: int, layers: int, vocab: int, positions: int, dropout: bool) -> Model:
    rate = 0.1 if dropout else 0.0
    config = {"model_type": "gpt2", "n_embd": hidden, "n_head": heads, "n_layer": layers, "vocab_size": vocab,
              "n_positions": positions, "resid_pdrop": rate, "attn_pdrop": rate, "embd_pdrop": rate}
    c = config_from_hf(config, name, "measured-runs")
    return Model(c.name, c, build_layers(c), raw=config)


def _cluster(gpu: str, gpus: int, per_node: int, intra: dict | None = None, inter: dict | None = None) -> dict:
    per_node = min(per_node, gpus)
    group = {"name": "g", "gpu": gpu, "nodes": gpus // per_node, "gpus_per_node": per_node}
    if intra:
        group["intra_node"] = intra
    if inter:
        group["inter_node"] = inter
    return {"name": "run", "node_groups": [group]}


def skip_reason(run: dict, source: str) -> str:
    p, precision = run["parallel"], str(run["precision"]).lower()
    if source not in FP8_SOURCES and ("fp8" in precision or "float8" in precision):
        return "fp8 (not modelled for this source)"
    if (p.get("ep") or 1) > 1:
        return "expert parallelism"
    if not isinstance(p.get("tp"), int):
        return "parallel degrees not stated"
    if "do not use" in " ".join(run.get("notes") or []) or "suspect" in " ".join(run.get("notes") or []):
        return "source flags the value as suspect"
    if _async_tp(run) and source != "torchtitan":
        return "async TP (not modelled)"
    if source == "torchtitan" and (p.get("pp") or 1) > 1 and "interleaved" in run["id"].lower():
        return "interleaved pipeline: stages per rank not stated"
    return ""


def _compiled(run: dict) -> bool:
    """The run's model ran under torch.compile: its id (torchtitan's "+ torch.compile" rows), its
    table's title or command line (Table 2/4/5/6 "+ torch.compile", --training.compile) or its
    framework field says so."""
    words = " ".join((run["id"], str(run.get("quote", "")), str(run.get("framework", "")))).lower()
    return "torchcompile" in words or "torch.compile" in words or "--training.compile" in words


def _async_tp(run: dict) -> bool:
    """The run fuses its TP collectives with their GEMMs (torchtitan enable_async_tensor_parallel)."""
    return bool(run["parallel"].get("async_tp")) or run["id"].lower().endswith("-asynctp")


# torchtitan's Aug 2024 performance doc (docs/performance.md at 3faaa1a0): its 405B preset of the
# same commit, train_configs/llama3_405b.toml, defines the "Float8" rows' float8 section:
# enable_float8_linear, enable_fsdp_float8_all_gather and precompute_float8_dynamic_scale_for_fsdp true
TITAN_FP8_ALL_GATHER_DOCS = ("docs/performance.md (Aug 2024 version)",)


def _fp8_all_gather(run: dict) -> bool:
    """The run's FSDP all-gathers its float8 linears' weights in fp8 (Training.fp8_all_gather,
    `--fp8-all-gather`): its source's stated float8 settings enable it."""
    return _dtype(run) == "fp8" and run["source"].get("path") in TITAN_FP8_ALL_GATHER_DOCS


def _dtype(run: dict, default: str = "bf16") -> str:
    """fp8 where the run's precision names fp8 or float8 linears, else `default`."""
    precision = str(run["precision"]).lower()
    return "fp8" if "fp8" in precision or "float8" in precision else default


def _fp8_recipe(run: dict) -> str:
    """torchao's rowwise recipe where the run names float8 rowwise scaling, else the runtime's default."""
    return "torchao-rowwise" if "rowwise" in str(run["precision"]).lower() else ""


def _read(metric: str, tokens_per_step: float, gpus: int) -> Callable:
    if metric == "iteration_time":
        return lambda est: est.step_time_s
    if metric == "tokens_per_s_per_gpu":
        return lambda est: tokens_per_step / est.step_time_s / gpus
    raise ValueError(metric)


def case(run: dict) -> Case:
    source = source_of(run)
    runtime = ASSUMPTIONS[source][0]
    m = run["measured"]
    metric, published = m["metric"], float(m["value"])
    if m.get("unit") == "ms/iteration":
        published /= 1e3
    gpus = tuple(sorted({CATALOG.get(g["type"].lower(), g["type"]) for g in run["hardware"]["gpus"]}))
    reason = skip_reason(run, source)
    if reason:
        return Case(run["id"], source, runtime, metric, published, skip=reason, gpus=gpus)
    # priced as the source's runtime runs it (its pipeline sends: Runtime.pipeline_p2p), with the
    # float8 FSDP all-gather its stated preset sets (Training.fp8_all_gather)
    plan = BUILDERS[source](run)
    plan = replace(plan, training=replace(plan.training, runtime=runtime, fp8_all_gather=_fp8_all_gather(run)))
    t = plan.training
    settings = (("tp_async", True),) if _async_tp(run) else ()
    if t.fp8_all_gather:  # the training's setting (training_params applies it for a plan's own runtime)
        settings += (("fp8_all_gather", True),)
    if _compiled(run):  # TorchInductor's fused elementwise kernels (CostParams.torch_compile)
        settings += (("torch_compile", True),)
    if t.fp8_recipe:  # the recipe the run states (stack_params applies it for a plan's own runtime)
        settings += (("fp8_recipe", t.fp8_recipe),)
    if source == "nemo":
        # NeMo 24.07's recipes train with Apex's distributed_fused_adam, not megatron-core's DDP,
        # and sync bf16 gradients: launcher_scripts/conf/training/gpt3/*_fp8_performance.yaml
        # optim.grad_sync_dtype: bf16, as the launcher's H100 fp8 examples pass
        # (+training.model.optim.grad_sync_dtype=bf16); not Megatron-LM's fp32 buffers
        # (CostParams.bf16_fp32_grads)
        settings += (("bf16_fp32_grads", False),)
    return Case(run["id"], source, runtime, metric, published, plan,
                read=_read(metric, t.global_batch * t.seq_len, len(plan.used_ranks())),
                max_mem_bytes=m.get("max_mem_bytes"), settings=settings, gpus=gpus)


def _gpu(run: dict, index: int = 0) -> str:
    return CATALOG[run["hardware"]["gpus"][index]["type"].lower()]


def _amp(run: dict) -> Plan:
    md, p = run["model"], run["parallel"]
    model = gpt("gpt2-amp", md["hidden"], md["heads"], md["layers"], md["vocab"], run["seq_len"], True)
    # AMP's cluster_info: 50 Gb/s both ways; inside a node that is the T4s' PCIe path
    intra = {"kind": "PCIe 3.0 (AMP's cluster_info: 50 Gb/s)", "bandwidth_GBps": 6.25, "latency_us": 10}
    inter = {"kind": "50 Gb/s Ethernet (AMP's cluster_info)", "bandwidth_GBps": 6.25, "latency_us": 10}
    cluster = cluster_from_spec(_cluster("T4", 16, 4, intra=intra, inter=inter), "amp")
    training = Training(run["global_batch"], run["seq_len"], "fp16", run["micro_batch"], "1f1b", 1, "standard")
    # uniform_plan lays ranks out TP-innermost, then DP, then PP: DeepSpeed's default order
    return uniform_plan(model, cluster, training, tp=p["tp"], pp=p["pp"], dp=p["dp"])


def _sailor(run: dict) -> Plan:
    md, p = run["model"], run["parallel"]
    model = gpt(md["name"], md["hidden"], md["heads"], md["layers"], md["vocab"], run["seq_len"], True)
    counts = {CATALOG[g["type"].lower()]: g["count"] for g in run["hardware"]["gpus"]}
    per_node = 4
    groups = [{"name": f"g{i}", "gpu": gpu, "nodes": n // per_node, "gpus_per_node": per_node}
              for i, (gpu, n) in enumerate(counts.items())]
    cluster = cluster_from_spec({"name": "sailor", "node_groups": groups}, "sailor")
    next_rank = {g.gpu.name: g.first_rank for g in cluster.groups}
    stages = []
    tp = p["tp"]
    # MIT runs: recompute not stated; "selective" is the setting whose predicted peak memory is
    # nearest the max_mem these runs logged (SAILOR_MIT_RECOMPUTE). Clariden: run_opt.slurm has none.
    recompute = SAILOR_MIT_RECOMPUTE if run["id"].startswith("sailor-mit") else "none"
    for k, st in enumerate(p["stages"]):
        first, last = (int(x) for x in st["layer_ids"].split("-"))
        reps = st["replicas"]
        share = run["global_batch"] // len(reps)
        replicas = []
        for d, rep in enumerate(reps):
            gpu = CATALOG[rep["gpu_type"].lower()]
            ranks = tuple(range(next_rank[gpu], next_rank[gpu] + tp))
            next_rank[gpu] += tp
            replicas.append(Replica(d, share, ranks))
        stages.append(Stage(k, (first, last + 1), tp, 0, recompute, tuple(replicas), k))
    mb = min(run["micro_batch"], run["global_batch"])
    training = Training(run["global_batch"], run["seq_len"], "fp32", mb, "1f1b", 1, "standard")
    return Plan(model, cluster, training, tuple(stages))


def _foundry(run: dict) -> Plan:
    md = run["model"]
    model = gpt(md["name"], md["hidden"], md["heads"], md["layers"], md["vocab"], max(2048, run["seq_len"]), False)
    gpus = run["hardware"]["total_gpus"]
    cluster = cluster_from_spec(_cluster("A100-SXM4-40GB", gpus, 8), "llm-foundry")
    recompute = "full" if "checkpoint" in str(run["recompute"]) else "none"
    mb = run["micro_batch"]
    global_batch = mb * (run["grad_accum"] or 1) * gpus
    training = Training(global_batch, run["seq_len"], "bf16", mb, "1f1b", 1, "flash")
    return uniform_plan(model, cluster, training, tp=1, pp=1, dp=gpus, zero=3, recompute=recompute)


def _titan(run: dict) -> Plan:
    p = run["parallel"]
    model = _load_model(LLAMA[run["model"]["name"].lower()])
    gpus = run["hardware"]["total_gpus"]
    cluster = cluster_from_spec(_cluster(_gpu(run), gpus, 8), "torchtitan")
    rc = str(run["recompute"]).lower()
    recompute = "full" if rc.startswith("full") else "selective" if rc.startswith("selective") else "none"
    every_other = "selective layer" in rc or run["id"].endswith("selectivelayer")
    layers = model.config.num_layers if model.config else 0
    if every_other:  # selective_ac_option "2": every second block fully checkpointed
        recompute = "block"
    dp = p["dp_shard"]
    local = run["micro_batch"]
    # pipeline_parallel_microbatches: the number of stages unless set (torchtitan 9dec370 config_manager)
    mb = local // p["pp"] if p["pp"] > 1 else local
    training = Training(local * dp, run["seq_len"] or 8192, _dtype(run), mb, "1f1b", 1, "flash",
                        fp8_recipe=_fp8_recipe(run))
    # context parallelism: torchtitan's ring attention (parallelism.context_parallel_degree);
    # the local batch is per dp_shard rank, the cp ranks share its sequences
    # FSDP2 is ZeRO-3 without PP; with PP, fsdp_reshard_after_forward "default" is "never"
    # (torchtitan models/llama3/infra/parallelize.py apply_fsdp: reshard_after_forward = not
    # pp_enabled) and torch.distributed.pipelining reduce-scatters the accumulated unsharded
    # gradients once per step: ZeRO-1's memory and traffic (runtimes/capability.py, torchtitan's
    # zero_stages_with_pp)
    zero = 1 if p["pp"] > 1 else 3
    return uniform_plan(model, cluster, training, tp=p["tp"], pp=p["pp"], dp=dp, zero=zero, recompute=recompute,
                        sequence_parallel=p["tp"] > 1, cp=p.get("cp") or 1,
                        recompute_layers=layers // (2 * p["pp"]) if every_other else 0)


def _bloom(run: dict) -> Plan:
    md, p = run["model"], run["parallel"]
    model = gpt("bloom-176b", md["hidden"], md["heads"], md["layers"], md["vocab"], run["seq_len"], False)
    opa = {"kind": "4x Omni-Path 100 Gb/s", "bandwidth_GBps": 50, "latency_us": 5}
    cluster = cluster_from_spec(_cluster("A100-SXM4-80GB", run["hardware"]["total_gpus"], 8, inter=opa), "bloom")
    training = Training(run["global_batch"], run["seq_len"], "bf16", run["micro_batch"], "1f1b", 1, "standard")
    return uniform_plan(model, cluster, training, tp=p["tp"], pp=p["pp"], dp=p["dp"], zero=1, recompute="full")


_load_model = lru_cache(maxsize=None)(load_model)

# NeMo-Framework-Launcher recipes (launcher_scripts/conf/training/): layers, hidden, FFN, heads, KV heads
NEMO_MODELS = {"gpt3-5b": (24, 4096, 16384, 32, 32), "gpt3-20b": (44, 6144, 24576, 48, 48),
               "gpt3-175b": (96, 12288, 49152, 96, 96), "nemotron-8b": (32, 4096, 16384, 32, 32),
               "nemotron-22b": (40, 6144, 24576, 48, 48), "nemotron-340b": (96, 18432, 73728, 96, 8)}

# the optimizer a recipe states: nemotron_340b.yaml sets optim.dtype: bf16 (Apex DistributedFusedAdam's
# state dtype: parameter shard, momentum and variance in bf16), in both stored versions of the file
# (one with distributed_fused_adam, one with mcore_distributed_optim); the other recipes keep fp32 states
NEMO_OPTIMIZERS = {"nemotron-340b": "adamw-bf16"}


@lru_cache(maxsize=None)
def _nemo_model(name: str, seq_len: int) -> Model:
    if name.startswith("llama2") or name.startswith("llama3"):  # the catalog's Llama 2 and Llama 3 configs
        return _load_model(name.replace("llama2", "llama-2").replace("llama3", "llama-3"))
    layers, hidden, ffn, heads, kv = NEMO_MODELS[name]
    if name.startswith("gpt3"):
        config = {"model_type": "gpt2", "n_embd": hidden, "n_head": heads, "n_layer": layers, "vocab_size": 50304,
                  "n_positions": seq_len, "n_inner": ffn, "resid_pdrop": 0.0, "attn_pdrop": 0.0, "embd_pdrop": 0.0}
    else:  # Nemotron: a GPT-NeoX-shaped block (RoPE, LayerNorm, one-matrix MLP), untied embeddings
        config = {"model_type": "gpt_neox", "hidden_size": hidden, "num_attention_heads": heads,
                  "num_key_value_heads": kv, "num_hidden_layers": layers, "intermediate_size": ffn,
                  "vocab_size": 256000, "max_position_embeddings": seq_len, "tie_word_embeddings": False}
    c = config_from_hf(config, name, "measured-runs")
    return Model(c.name, c, build_layers(c), raw=config)


def _nemo(run: dict) -> Plan:
    p = run["parallel"]
    model = _nemo_model(run["model"]["name"].lower(), run["seq_len"])
    gpus = run["hardware"]["total_gpus"]
    cluster = cluster_from_spec(_cluster("H100-SXM5-80GB", gpus, 8), "nemo")
    vp = p.get("vp") or 1
    cp = p.get("cp") or 1  # Megatron-core context parallelism (ring, --cp-comm-type p2p)
    dp = gpus // (p["tp"] * p["pp"] * cp)
    schedule = search_schedule(vp).name
    optimizer = NEMO_OPTIMIZERS.get(run["model"]["name"].lower(), "adamw")
    training = Training(run["global_batch"], run["seq_len"], _dtype(run), run["micro_batch"], schedule, vp, "flash",
                        optimizer=optimizer)
    return uniform_plan(model, cluster, training, tp=p["tp"], pp=p["pp"], dp=dp, zero=1, recompute="none",
                        sequence_parallel=p["tp"] > 1, cp=cp)

BUILDERS = {"amp-t4": _amp, "sailor-mit": _sailor, "sailor-gh200": _sailor, "llm-foundry": _foundry,
            "torchtitan": _titan, "bloom": _bloom, "nemo": _nemo}


def load_runs(path: Path = MEASURED) -> list[dict]:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return yaml.load(path.read_text(), Loader=loader)["runs"]


def measured_cases(path: Path = MEASURED) -> list[Case]:
    return [case(run) for run in load_runs(path)]
