"""The seeded tiny instances the solver is checked on against the brute-force oracle
(planner.verify.oracle): random clusters of 2-3 GPU types, pipelines forced by memory, per-replica TP,
nodes of two GPU types and TP groups across them."""

from __future__ import annotations

import random

from ..inputs.hardware import cluster_from_spec
from ..inputs.model import model_from_dict
from ..plan import Training

GPU_CHOICES = ["A100-SXM4-80GB", "V100-SXM2-32GB", "T4", "RTX-4090", "H100-SXM5-80GB"]
TINY_OPTIONS = dict(micro_batches=(1, 2), tp_degrees=(1, 2), recompute_modes=("none", "full"),
                    virtual_stages=(1, 2), offload=False,  # offload: tests/test_memsave.py
                    zero_bubble=False)  # ZB-H1: tests/test_zero_bubble_search.py


def tiny_instance(seed: int):
    """2-3 GPU types, at most 3 nodes (<= 6 GPUs), at most 7 layers, memory that binds."""
    rng = random.Random(seed)
    blocks = rng.randint(1, 5)
    hidden = rng.choice([256, 1024, 2048])
    config = {"model_type": "llama", "hidden_size": hidden, "num_hidden_layers": blocks,
              "num_attention_heads": 8, "num_key_value_heads": rng.choice([2, 8]),
              "intermediate_size": hidden * rng.choice([2, 4]), "vocab_size": rng.choice([4096, 32000])}
    model = model_from_dict(config, f"tiny-{seed}")
    seq_len = rng.choice([1024, 4096])
    need = model.params * 16 + blocks * seq_len * config["hidden_size"] * 160
    types = rng.sample(GPU_CHOICES, rng.randint(2, 3))
    groups, gpus, nodes_left = [], {}, 3
    for i, gpu in enumerate(types):
        nodes = 1 if nodes_left - 1 < len(types) - i else rng.randint(1, nodes_left - (len(types) - i - 1))
        nodes = min(nodes, 2)
        nodes_left -= nodes
        # the 2 GiB reserve plus a random fraction of the whole model's needs
        gpus[gpu] = {"memory_GiB": 2.0 + rng.uniform(0.2, 1.2) * need / 2**30}
        groups.append({"name": f"g{i}", "gpu": gpu, "nodes": nodes, "gpus_per_node": rng.choice([1, 2]),
                       "inter_node": {"bandwidth_GBps": rng.choice([10, 100, 400]),
                                      "latency_us": rng.choice([5, 50])}})
    cluster = cluster_from_spec({"name": f"tiny-{seed}", "gpus": gpus, "node_groups": groups})
    # runtime: any (per-stage TP and DP, uneven shares); tests of a runtime replace it
    return model, cluster, Training(rng.choice([2, 3, 4]), seq_len, "fp16", 1, runtime="any")


def _small_llama(rng: random.Random, name: str, blocks: int, kv_heads: tuple[int, ...] = (8,)):
    """(model, sequence length, bytes the model needs at TP 1: states and activations) of a llama of 8 heads
    and `blocks` blocks, its hidden size, KV heads (one of `kv_heads`) and sequence drawn from `rng`."""
    hidden = rng.choice([1024, 2048])
    config = {"model_type": "llama", "hidden_size": hidden, "num_hidden_layers": blocks,
              "num_attention_heads": 8,
              "num_key_value_heads": rng.choice(kv_heads) if len(kv_heads) > 1 else kv_heads[0],
              "intermediate_size": hidden * 4, "vocab_size": 4096}
    model = model_from_dict(config, name)
    seq_len = rng.choice([1024, 2048])
    return model, seq_len, model.params * 16 + blocks * seq_len * hidden * 160


def pipeline_instance(seed: int):
    """Two GPU types, 2-3 one-GPU nodes with fast links, memory for about half the model and
    few micro-batches: pipelines are forced and the interleaved schedule's smaller bubble
    competes with 1F1B's fewer sends."""
    rng = random.Random(1000 + seed)
    model, seq_len, need = _small_llama(rng, f"pipe-{seed}", rng.choice([4, 6]))
    types = rng.sample(GPU_CHOICES, 2)
    gpus = {g: {"memory_GiB": 2.0 + rng.uniform(0.45, 0.7) * need / 2**30} for g in types}
    nodes = rng.choice([(1, 1), (2, 1), (1, 2)])
    groups = [{"name": f"g{i}", "gpu": g, "nodes": n, "gpus_per_node": 1,
               "inter_node": {"bandwidth_GBps": 400, "latency_us": 5}} for i, (g, n) in enumerate(zip(types, nodes))]
    cluster = cluster_from_spec({"name": f"pipe-{seed}", "gpus": gpus, "node_groups": groups})
    return model, cluster, Training(rng.choice([2, 3, 4]), seq_len, "fp16", 1, runtime="any")


def per_replica_tp_instance(seed: int):
    """Two GPU types on nodes of two GPUs, one of them with memory for the model at TP 2 only, few
    layers and micro-batches: one stage over both types whose replicas want different TP degrees (the
    small type at TP 2 beside the large one at TP 1) competes with uniform stages and pipelines."""
    rng = random.Random(2000 + seed)
    model, seq_len, need = _small_llama(rng, f"prtp-{seed}", rng.choice([2, 3]), kv_heads=(2, 8))
    small, large = rng.sample(GPU_CHOICES, 2)
    gpus = {small: {"memory_GiB": 2.0 + rng.uniform(0.35, 0.6) * need / 2**30},
            large: {"memory_GiB": 2.0 + rng.uniform(1.2, 2.0) * need / 2**30}}
    groups = [{"name": f"g{i}", "gpu": g, "nodes": 1, "gpus_per_node": 2,
               "intra_node": {"bandwidth_GBps": rng.choice([25, 50]), "latency_us": 3},
               "inter_node": {"bandwidth_GBps": rng.choice([100, 400]), "latency_us": 5}}
              for i, g in enumerate((small, large))]
    cluster = cluster_from_spec({"name": f"prtp-{seed}", "gpus": gpus, "node_groups": groups})
    return model, cluster, Training(rng.choice([3, 4, 6]), seq_len, "fp16", 1, runtime="any")


def mixed_node_instance(seed: int):
    """Nodes that hold two GPU types (one mixed node group, formats.md section 1), one or two such nodes,
    an NVLink-like bridge between two GPUs of one type or none, sometimes a third one-type group beside
    them, few layers: the types of a node pipeline or replicate over its fabric or over the NIC."""
    rng = random.Random(3000 + seed)
    model, seq_len, need = _small_llama(rng, f"mixed-{seed}", rng.choice([2, 3]))
    fast, slow = rng.sample(GPU_CHOICES, 2)
    gpus = {g: {"memory_GiB": 2.0 + rng.uniform(0.4, 1.5) * need / 2**30} for g in (fast, slow)}
    local = rng.choice([[fast, slow], [fast, fast, slow], [fast, slow, slow], [fast, fast, slow, slow]])
    nodes = 1 if len(local) > 2 else rng.choice([1, 2])
    mixed = {"name": "box", "gpu": local, "nodes": nodes,
             "intra_node": {"bandwidth_GBps": rng.choice([12, 25]), "latency_us": 10},
             "inter_node": {"bandwidth_GBps": rng.choice([1.25, 12.5]), "latency_us": 50}}
    if local.count(slow) == 2 and rng.random() < 0.5:
        pair = [j for j, g in enumerate(local) if g == slow]
        mixed["bridges"] = [{"between": pair, "bandwidth_GBps": 56, "latency_us": 3}]
    groups = [mixed]
    if len(local) * nodes < 4 and rng.random() < 0.5:
        groups.append({"name": "extra", "gpu": fast, "nodes": 1, "gpus_per_node": 1,
                       "inter_node": {"bandwidth_GBps": 12.5, "latency_us": 50}})
    cluster = cluster_from_spec({"name": f"mixed-{seed}", "gpus": gpus, "node_groups": groups})
    return model, cluster, Training(rng.choice([2, 3, 4]), seq_len, "fp16", 1, runtime="any")


def across_types_instance(seed: int):
    """One node of two GPU types (one or two of each) on a fast fabric, memory for about half the model per GPU
    and few micro-batches: TP groups across the types, with their heads and FFN columns split unevenly,
    compete with pipelines over the types and TP within each."""
    rng = random.Random(4000 + seed)
    model, seq_len, need = _small_llama(rng, f"across-{seed}", rng.choice([2, 3]), kv_heads=(4, 8))
    fast, slow = rng.sample(GPU_CHOICES, 2)
    gpus = {g: {"memory_GiB": 2.0 + rng.uniform(0.45, 0.9) * need / 2**30} for g in (fast, slow)}
    local = rng.choice([[fast, slow], [fast, fast, slow, slow]])
    box = {"name": "box", "gpu": local, "nodes": 1,
           "intra_node": {"bandwidth_GBps": rng.choice([25, 50, 150]), "latency_us": rng.choice([3, 10])},
           "inter_node": {"bandwidth_GBps": 12.5, "latency_us": 50}}
    cluster = cluster_from_spec({"name": f"across-{seed}", "gpus": gpus, "node_groups": [box]})
    return model, cluster, Training(rng.choice([1, 2, 4]), seq_len, "fp16", 1, runtime="any")


def three_type_node_instance(seed: int):
    """One node of three GPU types (one, two and one GPUs) on a fast fabric, memory for about half the model
    per GPU: TP groups over every type of the node, split three ways, compete with pipelines and TP within a
    type (solved with TP degrees up to 4)."""
    rng = random.Random(9000 + seed)
    model, seq_len, need = _small_llama(rng, f"tri-{seed}", rng.choice([2, 3]), kv_heads=(4, 8))
    first, second, third = rng.sample(GPU_CHOICES, 3)
    gpus = {g: {"memory_GiB": 2.0 + rng.uniform(0.3, 0.8) * need / 2**30} for g in (first, second, third)}
    box = {"name": "box", "gpu": [first, second, second, third], "nodes": 1,
           "intra_node": {"bandwidth_GBps": rng.choice([50, 150]), "latency_us": 3},
           "inter_node": {"bandwidth_GBps": 12.5, "latency_us": 50}}
    cluster = cluster_from_spec({"name": f"tri-{seed}", "gpus": gpus, "node_groups": [box]})
    return model, cluster, Training(rng.choice([1, 2]), seq_len, "fp16", 1, runtime="any")


def lead_instance(seed: int):
    """A tiny DeepSeek-V3 (multi-latent attention, MoE blocks after one or two dense ones: Model.decoder_lead)
    on 2-3 one-GPU nodes of one or two types, memory for about a third of it per GPU: pipelines are forced,
    and the dense blocks may share the embedding's stage or stages of their own."""
    rng = random.Random(6000 + seed)
    hidden = rng.choice([512, 1024])
    blocks = rng.choice([3, 4])
    config = {"model_type": "deepseek_v3", "hidden_size": hidden, "num_hidden_layers": blocks,
              "first_k_dense_replace": rng.choice([1, 2]), "intermediate_size": hidden * 4,
              "moe_intermediate_size": hidden // 2, "n_routed_experts": 8, "num_experts_per_tok": 2,
              "n_shared_experts": 1, "n_group": 1, "topk_group": 1, "num_attention_heads": 8,
              "num_key_value_heads": 8, "q_lora_rank": hidden // 2, "kv_lora_rank": hidden // 4,
              "qk_nope_head_dim": 64, "qk_rope_head_dim": 32, "v_head_dim": 64, "vocab_size": 8192,
              "num_nextn_predict_layers": 0}
    model = model_from_dict(config, f"lead-{seed}")
    seq_len = rng.choice([1024, 2048])
    need = model.params * 16 + blocks * seq_len * hidden * 160
    types = rng.sample(GPU_CHOICES, rng.choice([1, 2]))
    gpus = {g: {"memory_GiB": 2.0 + rng.uniform(0.3, 0.5) * need / 2**30} for g in types}
    counts = [rng.choice([2, 3])] if len(types) == 1 else rng.choice([[1, 1], [1, 2], [2, 1]])
    groups = [{"name": f"g{i}", "gpu": g, "nodes": n, "gpus_per_node": 1,
               "inter_node": {"bandwidth_GBps": rng.choice([25, 400]), "latency_us": 5}}
              for i, (g, n) in enumerate(zip(types, counts))]
    cluster = cluster_from_spec({"name": f"lead-{seed}", "gpus": gpus, "node_groups": groups})
    return model, cluster, Training(rng.choice([2, 4]), seq_len, "fp16", 1, runtime="any")
