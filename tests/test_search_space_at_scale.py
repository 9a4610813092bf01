"""What the search space holds on large and mixed clusters: selective recompute where some GPU runs
attention without flash, interleaved uniform plans whose chunks split the blocks unevenly, and
pipelines deeper than 16 ranks."""

from __future__ import annotations

from planner.api import PlanRequest, search_inputs
from planner.cost.runtimes.capability import violations
from planner.inputs.hardware import cluster_from_spec
from planner.inputs.model import load_model
from planner.plan import Training
from planner.search.pricing.stage_configs import cluster_recompute_modes
from planner.search.pricing.stage_types import SearchContext, SolverOptions
from planner.search.uniform import UniformSpace, uniform_candidates


def group(name: str, gpu: str, nodes: int) -> dict:
    return {"name": name, "gpu": gpu, "nodes": nodes, "gpus_per_node": 8}


def test_selective_recompute_is_searched_where_some_gpu_runs_standard_attention():
    # Megatron-LM runs standard attention before Ampere (cost.attention_kernels): there selective
    # recompute saves the s^2 scores and prices apart from none; on A100s alone it is none's twin
    a100 = cluster_from_spec({"name": "a", "node_groups": [group("a100", "A100-SXM4-80GB", 1)]})
    mixed = cluster_from_spec({"name": "m", "node_groups": [group("a100", "A100-SXM4-80GB", 1),
                                                            group("v100", "V100-SXM2-32GB", 1)]})
    space = UniformSpace(tp_degrees=(8,), micro_batches=(1,), recompute_modes=("selective",), zero_stages=(1,),
                         virtual_stages=(1,))
    found = {}
    for name, cluster in (("a100", a100), ("mixed", mixed)):
        model, cluster, training, options = search_inputs(PlanRequest(
            model="llama-3-8b", cluster=cluster, global_batch=64, seq_len=4096, dtype="fp16"))
        found[name] = (cluster_recompute_modes(options, training, cluster.groups),
                       list(uniform_candidates(SearchContext(model, cluster, training, options), space)))
    assert "selective" not in found["a100"][0] and not found["a100"][1]
    assert found["mixed"][0] == ["none", "selective", "full", "block"] and found["mixed"][1]


def test_interleaved_uniform_plans_may_split_the_blocks_unevenly():
    # llama-3.1-405b's 126 blocks over 2 ranks x 2 chunks (126 % 4 = 2), which Megatron-LM runs
    cluster = cluster_from_spec({"name": "h", "node_groups": [group("h100", "H100-SXM5-80GB", 2)]})
    context = SearchContext(load_model("llama-3.1-405b"), cluster, Training(64, 4096, "bf16", 1), SolverOptions())
    space = UniformSpace(tp_degrees=(8,), micro_batches=(1,), recompute_modes=("full",), zero_stages=(1,),
                         virtual_stages=(2,))
    plans = [p for p in uniform_candidates(context, space) if p.training.virtual_stages == 2 and len(p.stages) == 4]
    assert plans and not violations(plans[0], "megatron")
    blocks = [stage.decoder_blocks(plans[0].model) for stage in plans[0].stages]
    assert sum(blocks) == 126 and len(set(blocks)) > 1


def test_pipelines_may_be_deeper_than_16_ranks():
    # Megatron-LM's largest published pipeline is 64 ranks (Narayanan et al. 2021, Table 1)
    assert SolverOptions().max_stages == 64
