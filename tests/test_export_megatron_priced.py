"""`planner export --to megatron` writes every flag the megatron runtime's price assumes, in the
combinations Megatron-LM's own argument checks accept.

The priced settings: planner.cost.runtimes.megatron (Runtime.overlap_grad_reduce,
Runtime.overlap_tp_comm) and the plan (ZeRO stage, optimizer offload, TP, CP, sequence
parallelism). Megatron-LM's argument parser is megatron/training/arguments.py of the Megatron-LM
repository, which no pip package ships (megatron-core is only megatron/core), so it is checked
three ways:

* MEGATRON_LM_RULES: the validate_args assertions on these flags, as arguments.py states them;
* megatron-core's own DistributedDataParallelConfig and OptimizerConfig, built from the exported
  flags as Megatron-LM's training loop builds them, whose __post_init__ checks run (the
  `integration` extra);
* Megatron-LM's parse_args + validate_args themselves, in a subprocess, where MEGATRON_LM names a
  checkout of it (skipped otherwise).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from planner.cost.runtimes import get_runtime
from planner.export import export_plan
from planner.inputs.hardware import cluster_from_spec, load_cluster
from planner.inputs.model import load_model
from planner.plan import Training, uniform_plan
from planner.schedules.interleaved import microbatch_group

from .conftest import require, small_cluster_spec
from .test_export_runnable import megatron_flags

DISTRIBUTED_FLAGS = ("--use-distributed-optimizer", "--overlap-grad-reduce", "--overlap-param-gather",
                     "--optimizer-cpu-offload", "--use-precision-aware-optimizer", "--tp-comm-overlap")


def megatron_lm_rules(flags: dict[str, str | None]) -> list[str]:
    """The assertions of Megatron-LM's validate_args (megatron/training/arguments.py) on the flags
    the price depends on, and megatron-core OptimizerConfig.__post_init__'s on the precision-aware
    optimizer; what the export `flags` break."""
    on = flags.__contains__
    rules = [
        (not on("--overlap-param-gather") or on("--use-distributed-optimizer"),
         "--overlap-param-gather only supported with distributed optimizer"),
        (not on("--overlap-param-gather") or on("--overlap-grad-reduce"),
         "Must use --overlap-param-gather with --overlap-grad-reduce"),
        (not on("--optimizer-cpu-offload") or on("--use-precision-aware-optimizer"),
         "The optimizer cpu offload must be used in conjunction with `--use-precision-aware-optimizer`"),
        (not on("--use-precision-aware-optimizer") or flags.get("--optimizer", "adam") == "adam",
         "--use-precision-aware-optimizer only supported with adam"),
        (not on("--use-precision-aware-optimizer") or on("--use-distributed-optimizer"),
         "--use-precision-aware-optimizer only supported with distributed optimizer"),
        (not on("--tp-comm-overlap") or on("--sequence-parallel"),
         "Tensor parallel communication/GEMM overlap can happen only when sequence parallelism is enabled"),
    ]
    return [message for ok, message in rules if not ok]


def usage_line(text: str) -> str:
    return next(line for line in text.splitlines() if line.startswith("# usage:"))


def priced_flags(plan) -> dict[str, bool]:
    """The flags the plan's price under its runtime assumes, by the runtime's fields and the plan."""
    runtime = get_runtime(plan.training.runtime)
    distributed = any(s.zero >= 1 or s.offload for s in plan.stages)
    offload = any(s.offload for s in plan.stages)
    return {"--use-distributed-optimizer": distributed,
            "--overlap-grad-reduce": runtime.overlap_grad_reduce,
            "--overlap-param-gather": runtime.overlap_grad_reduce and distributed,
            "--optimizer-cpu-offload": offload, "--use-precision-aware-optimizer": offload,
            # Transformer Engine userbuffers also hide the forward's TP collectives: priced nowhere
            "--tp-comm-overlap": False}


def connections_needed(plan) -> bool:
    """Megatron-LM's validate_args asserts CUDA_DEVICE_MAX_CONNECTIONS=1 with TP or CP (below
    Blackwell), and the priced TP overlap (Runtime.overlap_tp_comm) rests on it."""
    return any(s.tp > 1 or s.cp > 1 for s in plan.stages)


def export(plan) -> tuple[str, list[str]]:
    warnings: list[str] = []
    return export_plan(plan, "megatron", warnings.append), warnings


def check_priced(plan) -> dict[str, str | None]:
    text, _ = export(plan)
    flags = megatron_flags(text)
    assert {f: f in flags for f in DISTRIBUTED_FLAGS} == priced_flags(plan)
    assert ("CUDA_DEVICE_MAX_CONNECTIONS=1" in usage_line(text)) == connections_needed(plan)
    assert ("--sequence-parallel" in flags) == any(s.sequence_parallel for s in plan.stages)
    assert megatron_lm_rules(flags) == []
    return flags


# (tp, cp, pp, dp, zero, sequence parallel, optimizer offload) on one node of 8 A100s
SETTINGS = [(1, 1, 1, 8, 0, False, False), (1, 1, 1, 8, 1, False, False), (2, 1, 1, 4, 1, True, False),
            (2, 1, 2, 2, 0, False, False), (2, 1, 2, 2, 1, True, False), (4, 1, 1, 2, 2, True, False),
            (4, 1, 1, 2, 3, False, False), (1, 1, 1, 8, 1, False, True), (2, 1, 1, 4, 1, True, True),
            (8, 1, 1, 1, 0, True, True), (2, 2, 1, 2, 1, True, False), (1, 2, 2, 2, 0, False, False)]


def settings_plan(tp, cp, pp, dp, zero, sp, offload):
    cluster = cluster_from_spec(small_cluster_spec(gpus_per_node=8))
    return uniform_plan(load_model("llama-3-8b"), cluster, Training(64, 4096, "bf16", 1), tp=tp, cp=cp, pp=pp,
                        dp=dp, zero=zero, sequence_parallel=sp, offload=offload)


def setting_id(s) -> str:
    return "tp{}-cp{}-pp{}-dp{}-zero{}-sp{:d}-offload{:d}".format(*s)


@pytest.mark.parametrize("setting", SETTINGS, ids=setting_id)
def test_megatron_export_writes_the_flags_its_price_assumes(setting):
    check_priced(settings_plan(*setting))


@pytest.fixture(scope="module")
def readme_plans():
    """The README's Megatron examples, solved: the `make plan` default (llama-3-8b on a100-v100-mix),
    the heterogeneous launch (llama-3-70b on h100-a100-v100), and llama-3-70b on a100-v100-mix,
    whose optimal plan offloads the optimizer."""
    from planner.search.orchestration.driver import solve

    runs = [("llama-3-8b", "a100-v100-mix"), ("llama-3-70b", "h100-a100-v100"), ("llama-3-70b", "a100-v100-mix")]
    return {f"{m} on {c}": solve(load_model(m), load_cluster(c), Training(512, 4096, "fp16", 1)).plan for m, c in runs}


@pytest.mark.slow
def test_readme_plans_export_every_priced_flag_without_a_warning(readme_plans):
    offloaded = []
    for name, plan in readme_plans.items():
        flags = check_priced(plan)
        assert export(plan)[1] == [], name
        offloaded.append("--optimizer-cpu-offload" in flags)
    assert any(offloaded)  # the offload example still offloads: its flags are checked above


def test_an_offload_plan_with_sgd_is_refused_naming_adam():
    from planner.core.errors import BadInput
    import dataclasses

    plan = settings_plan(1, 1, 1, 8, 1, False, True)
    plan = dataclasses.replace(plan, training=dataclasses.replace(plan.training, optimizer="sgd"))
    with pytest.raises(BadInput, match="only Adam"):
        export(plan)


def test_megatron_lm_rules_catch_offload_without_the_precision_aware_optimizer():
    flags = {"--use-distributed-optimizer": None, "--optimizer-cpu-offload": None, "--overlap-param-gather": None}
    assert megatron_lm_rules(flags) == [
        "Must use --overlap-param-gather with --overlap-grad-reduce",
        "The optimizer cpu offload must be used in conjunction with `--use-precision-aware-optimizer`"]


@pytest.mark.integration
@pytest.mark.parametrize("setting", [s for s in SETTINGS if s[4] <= 1], ids=setting_id)
def test_megatron_core_configs_accept_the_exported_flags(setting, monkeypatch):
    """The exported flags as Megatron-LM's training loop passes them to megatron-core
    (training.py get_model: DistributedDataParallelConfig; get_megatron_optimizer_config:
    OptimizerConfig), whose __post_init__ checks run. The precision-aware optimizer asks for
    Transformer Engine's version, which a GPU run has (>= 2.1 here) and this CPU venv lacks."""
    require("megatron.core", "PLANNER_REQUIRE_INTEGRATION")
    from megatron.core.distributed import DistributedDataParallelConfig
    from megatron.core.optimizer import OptimizerConfig, optimizer_config

    monkeypatch.setattr(optimizer_config, "is_te_min_version", lambda version, *args, **kwargs: True)

    plan = settings_plan(*setting)
    flags = check_priced(plan)
    on = flags.__contains__
    ddp = DistributedDataParallelConfig(overlap_grad_reduce=on("--overlap-grad-reduce"),
                                        overlap_param_gather=on("--overlap-param-gather"),
                                        use_distributed_optimizer=on("--use-distributed-optimizer"))
    optimizer = OptimizerConfig(optimizer=flags.get("--optimizer") or "adam", bf16=on("--bf16"),
                                use_distributed_optimizer=on("--use-distributed-optimizer"),
                                optimizer_cpu_offload=on("--optimizer-cpu-offload"),
                                optimizer_offload_fraction=float(flags.get("--optimizer-offload-fraction") or 0.0),
                                use_precision_aware_optimizer=on("--use-precision-aware-optimizer"))
    assert (ddp.overlap_grad_reduce, ddp.overlap_param_gather) == (True, on("--use-distributed-optimizer"))
    assert optimizer.optimizer_cpu_offload == (setting[6] and optimizer.optimizer_offload_fraction == 1.0)


# Megatron-LM's parse_args + validate_args on an export, in a fresh interpreter whose `megatron`
# package is the checkout's. Megatron-LM asks for Python >= 3.12 (typing.override: given from
# typing_extensions on 3.11), and validate_args reads the GPU architecture (as a Hopper here).
VALIDATE = r"""
import json, os, sys, typing
import typing_extensions
typing.override = getattr(typing, "override", typing_extensions.override)
argv, world = json.loads(sys.argv[1])
os.environ.update(WORLD_SIZE=str(world), RANK="0", CUDA_DEVICE_MAX_CONNECTIONS="1")
from megatron.training import arguments
arguments.get_device_arch_version = lambda: 9
sys.argv = ["pretrain_gpt.py", *argv, "--tokenizer-type", "NullTokenizer", "--vocab-size", "1000", "--mock-data",
            "--lr", "1e-4", "--train-iters", "10"]
args = arguments.parse_args()
arguments.validate_args(args, {})
keys = ("use_distributed_optimizer", "overlap_grad_reduce", "overlap_param_gather", "optimizer_cpu_offload",
        "use_precision_aware_optimizer", "tp_comm_overlap", "sequence_parallel")
print("PARSED " + json.dumps({k: getattr(args, k) for k in keys}))
"""


def megatron_lm_checkout() -> str:
    """The Megatron-LM checkout MEGATRON_LM names; the test is skipped without one."""
    checkout = os.environ.get("MEGATRON_LM")
    if not checkout or not (Path(checkout) / "megatron" / "training" / "arguments.py").is_file():
        pytest.skip("MEGATRON_LM does not name a Megatron-LM checkout (megatron/training/arguments.py)")
    return checkout


def megatron_lm_parsed(checkout: str, text: str, world: int, tmp_path, keys=(), capability=None,
                       label: str = "") -> dict:
    """Megatron-LM's parse_args and validate_args (VALIDATE, in a subprocess) on the flags of an exported
    script `text` for `world` ranks: VALIDATE's keys and `keys` as parsed. `capability`: the (major, minor)
    the GPU is said to have (validate_args asks it for --moe-grouped-gemm)."""
    import shlex

    argv = shlex.split(" ".join(line.rstrip("\\") for line in text.splitlines() if not line.startswith("#")))
    script = VALIDATE.replace('"sequence_parallel")', '"sequence_parallel", ' + "".join(f"{k!r}, " for k in keys)
                              + ")")
    if capability is not None:
        script = f"import torch; torch.cuda.get_device_capability = lambda *a: {tuple(capability)!r}\n" + script
    done = subprocess.run([sys.executable, "-c", script, json.dumps([argv, world])], cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": checkout}, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{label}{done.stderr[-2000:]}"
    return json.loads(done.stdout.split("PARSED ", 1)[1])


@pytest.mark.integration
def test_megatron_lm_validate_args_accepts_the_readme_exports(readme_plans, tmp_path):
    checkout = megatron_lm_checkout()
    for name, plan in readme_plans.items():
        text, _ = export(plan)
        parsed = megatron_lm_parsed(checkout, text, len(plan.used_ranks()), tmp_path, label=f"{name}: ")
        priced = priced_flags(plan)
        assert {k: parsed[k] for k in ("use_distributed_optimizer", "overlap_grad_reduce", "overlap_param_gather",
                                       "optimizer_cpu_offload", "use_precision_aware_optimizer", "tp_comm_overlap")} \
            == {k: priced["--" + k.replace("_", "-")] for k in ("use_distributed_optimizer", "overlap_grad_reduce",
                                                              "overlap_param_gather", "optimizer_cpu_offload",
                                                              "use_precision_aware_optimizer", "tp_comm_overlap")}, name


# the export's multi-latent attention and routing flags, as Megatron-LM parses them
MLA_KEYS = {"multi_latent_attention": True, "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_head_dim": 128,
            "qk_pos_emb_head_dim": 64, "v_head_dim": 128, "rotary_scaling_factor": 40.0, "mscale_all_dim": 1.0,
            "moe_router_num_groups": 8, "moe_router_group_topk": 4, "moe_router_topk_scaling_factor": 2.5,
            "num_experts": 256, "expert_model_parallel_size": 8, "tensor_model_parallel_size": 2, "mtp_num_layers": 1}


@pytest.mark.integration
def test_megatron_lm_validate_args_accepts_the_deepseek_v3_export(tmp_path):
    checkout = megatron_lm_checkout()
    plan = uniform_plan(load_model("deepseek-v3"), load_cluster("dgx-h100-2node"), Training(16, 4096, "bf16", 1),
                        tp=2, pp=1, dp=8, ep=8, zero=1)
    text, warnings = export(plan)
    assert warnings == []
    # validate_args asks the GPU's compute capability for --moe-grouped-gemm: a Hopper one here
    parsed = megatron_lm_parsed(checkout, text, 16, tmp_path, MLA_KEYS, capability=(9, 0))
    assert {k: parsed[k] for k in MLA_KEYS} == MLA_KEYS


# the plans issue 34 names: DeepSeek-V3 on 128 nodes of 8 H100 and on four GB200 NVL72 racks,
# Qwen3-30B-A3B on 16 H100 at 8k tokens
ISSUE_PLANS = {"deepseek-v3 on 128 x 8 H100": ("deepseek-v3", "H100-SXM5-80GB", 128, 8, 2048, 4096),
               "deepseek-v3 on 4 GB200 NVL72": ("deepseek-v3", "gb200-nvl72", 4, 72, 2048, 4096),
               "qwen3-30b-a3b on 16 H100": ("qwen3-30b-a3b", "H100-SXM5-80GB", 2, 8, 512, 8192)}


@pytest.mark.integration
@pytest.mark.parametrize("name", list(ISSUE_PLANS))
def test_megatron_lm_validate_args_accepts_the_moe_plans_with_every_degree(name, tmp_path):
    checkout = megatron_lm_checkout()
    from planner.api import PlanRequest, plan as search_plan

    model, gpu, nodes, per_node, batch, seq = ISSUE_PLANS[name]
    if gpu == "gb200-nvl72":  # profiles/clusters/gb200-nvl72.yaml, four racks
        cluster = cluster_from_spec({"name": "gb200-nvl72-x4", "node_groups": [{
            "name": "rack", "gpu": "GB200", "nodes": nodes, "gpus_per_node": per_node,
            "intra_node": {"bandwidth_GBps": 900, "latency_us": 3},
            "inter_node": {"bandwidth_GBps": 3600, "latency_us": 5}}]})
    else:
        cluster = cluster_from_spec({"name": f"{gpu}-x{nodes * per_node}", "node_groups": [
            {"name": "g", "gpu": gpu, "nodes": nodes, "gpus_per_node": per_node}]})
    plan = search_plan(PlanRequest(model=model, cluster=cluster, global_batch=batch, seq_len=seq, dtype="bf16")).plan
    text, warnings = export(plan)
    assert warnings == []
    degrees = ("tensor_model_parallel_size", "pipeline_model_parallel_size", "expert_model_parallel_size",
               "expert_tensor_parallel_size", "data_parallel_size")
    schedule = ("overlap_moe_expert_parallel_comm", "microbatch_group_size_per_vp_stage")
    parsed = megatron_lm_parsed(checkout, text, len(plan.used_ranks()), tmp_path, degrees + schedule, capability=(9, 0))
    stage = plan.stages[0]
    assert [parsed[k] for k in degrees] == [stage.tp, plan.pp, stage.ep, stage.dims.expert_tp, stage.dp]
    # the combined 1F1B schedule and the micro-batch groups it was priced with (schedules.interleaved)
    group = microbatch_group(plan.pp, plan.num_microbatches) if plan.training.virtual_stages > 1 else plan.pp
    assert parsed["overlap_moe_expert_parallel_comm"] == (plan.training.schedule == "combined-1f1b")
    assert parsed["microbatch_group_size_per_vp_stage"] in ((None, group) if group == plan.pp else (group,))


@pytest.mark.integration
def test_megatron_lm_validate_args_accepts_combined_1f1b_without_pipelining(tmp_path):
    """Megatron-Bridge's Qwen3-30B-A3B layout on 8 B200 (tp 1, pp 1, ep 8) with the EP overlap: megatron-core
    runs it as combined_1f1b_schedule_for_no_pipelining."""
    checkout = megatron_lm_checkout()
    cluster = cluster_from_spec({"name": "b200x8", "node_groups": [{"name": "g", "gpu": "B200", "nodes": 1,
                                                                   "gpus_per_node": 8}]})
    training = Training(512, 4096, "bf16", 1, schedule="combined-1f1b")
    plan = uniform_plan(load_model("qwen3-30b-a3b"), cluster, training, tp=1, pp=1, dp=8, zero=1, ep=8)
    text, warnings = export(plan)
    assert warnings == []
    keys = ("pipeline_model_parallel_size", "expert_model_parallel_size", "overlap_moe_expert_parallel_comm",
            "virtual_pipeline_model_parallel_size")
    parsed = megatron_lm_parsed(checkout, text, 8, tmp_path, keys, capability=(10, 0))
    assert [parsed[k] for k in keys] == [1, 8, True, None]


@pytest.mark.integration
def test_megatron_lm_runs_a_muon_export_with_its_layer_wise_distributed_optimizer(tmp_path):
    """--optimizer muon with ZeRO-1's --use-distributed-optimizer: Megatron-LM's validate_args turns the
    pair into its layer-wise distributed optimizer, the sharding planner.cost.muon prices."""
    checkout = megatron_lm_checkout()
    plan = uniform_plan(load_model("llama-3-8b"), load_cluster("dgx-h100-2node"),
                        Training(64, 4096, "bf16", 1, optimizer="muon"), tp=1, pp=1, dp=16, zero=1)
    text, warnings = export(plan)
    assert warnings == []
    parsed = megatron_lm_parsed(checkout, text, 16, tmp_path, ("optimizer", "use_layer_wise_distributed_optimizer"))
    assert (parsed["optimizer"], parsed["use_layer_wise_distributed_optimizer"], parsed["use_distributed_optimizer"]) \
        == ("muon", True, False)
