"""Exports of plans their runtime runs (runtime: megatron / torchtitan, one TP and DP, equal shares,
uneven layer splits, stages on GPU types): exact, zero warnings, and the per-node launch scripts
put every GPU where the plan put it."""

from __future__ import annotations

import json
import re
import shlex
import tomllib
from pathlib import Path

import pytest

from planner.api import evaluate_plan
from planner.export import (TARGET_RUNTIMES, launch_scripts, megatron_layout, node_launches, runnable_form,
                             runtime_problems, vocab_divisor)
from planner.inputs.hardware import load_cluster
from planner.inputs.model import load_model
from planner.plan import Plan, Replica, Stage, Training, plan_to_json, uniform_plan

from .conftest import invoke

MODELS = ("llama-3-8b", "llama-3-70b")
CLUSTERS = ("dgx-a100", "a100-v100-mix", "h100-a100-v100")
# (model, cluster) -> tp, dp of a runnable plan that fits (found with `typed_plan` + planner.api.evaluate_plan)
LAYOUTS = {("llama-3-8b", "dgx-a100"): (2, 8), ("llama-3-8b", "a100-v100-mix"): (2, 8),
           ("llama-3-8b", "h100-a100-v100"): (2, 8), ("llama-3-70b", "dgx-a100"): (4, 4),
           ("llama-3-70b", "a100-v100-mix"): (4, 4), ("llama-3-70b", "h100-a100-v100"): (8, 2)}


def typed_plan(model_name: str, cluster_name: str, runtime: str = "megatron", *, zero: int = 1,
               interleave: int = 1, global_batch: int = 512) -> Plan:
    """A plan its runtime runs: one TP and DP everywhere, pipeline rank k on cluster ranks
    [k*tp*dp, (k+1)*tp*dp) (so stages sit on GPU types), decoder layers split in proportion to each
    rank's GPU peak (uneven), equal batch shares, full recompute."""
    model, cluster = load_model(model_name), load_cluster(cluster_name)
    tp, dp = LAYOUTS[(model_name, cluster_name)]
    dtype = "bf16" if all(g.supports("bf16") for g in cluster.gpu_types) else "fp16"
    if runtime == "torchtitan":
        dtype = "bf16" if dtype == "bf16" else "fp32"
    training = Training(global_batch, 4096, dtype, 1, "interleaved" if interleave > 1 else "1f1b", interleave,
                        runtime=runtime)
    pp = cluster.num_gpus // (tp * dp)
    peak = [dict(next(g for g in cluster.gpu_types if g.name == cluster.device(k * tp * dp).gpu).peak_flops)["fp16"]
            for k in range(pp)]
    chunks = pp * interleave
    speed = [peak[c % pp] for c in range(chunks)]
    decoders = [layer.index for layer in model.layers if layer.kind == "decoder"]
    ideal = [len(decoders) * s / sum(speed) for s in speed]
    counts = [max(1, int(x)) for x in ideal]
    while sum(counts) < len(decoders):  # largest remainders first, then the lowest chunk
        counts[max(range(chunks), key=lambda i: (ideal[i] - counts[i], -i))] += 1
    while sum(counts) > len(decoders):
        counts[max(range(chunks), key=lambda i: (counts[i] - ideal[i], -i))] -= 1
    bounds, position = [], decoders[0]
    for c, count in enumerate(counts):
        first = 0 if c == 0 else position
        position += count
        bounds.append((first, model.num_layers if c == chunks - 1 else position))
    share = training.global_batch // dp
    stages = tuple(
        Stage(c, rng, tp, zero, "full",
              tuple(Replica(d, share, tuple((c % pp) * tp * dp + d * tp + i for i in range(tp))) for d in range(dp)),
              c % pp, True) for c, rng in enumerate(bounds))
    return Plan(model, cluster, training, stages)


def write(plan: Plan, path: Path) -> Path:
    path.write_text(json.dumps(plan_to_json(plan)))
    return path


def megatron_flags(text: str) -> dict[str, str | None]:
    argv = shlex.split(" ".join(line.rstrip("\\").strip() for line in text.splitlines() if not line.startswith("#")))
    out: dict[str, str | None] = {}
    for i, word in enumerate(argv):
        if word.startswith("--"):
            nxt = argv[i + 1] if i + 1 < len(argv) else None
            out[word] = None if nxt is None or nxt.startswith("--") else nxt
    return out


def layout_chunks(layout: str) -> list[str]:
    return re.sub(r"(.)\*(\d+)", lambda m: m.group(1) * int(m.group(2)), layout.replace(",", "")).split("|")


def torchrun_ranks(scripts: dict[str, str]) -> dict[tuple[int, int], tuple[int, int]]:
    """(node rank, LOCAL_RANK) -> (global rank, physical GPU) as torchrun + CUDA_VISIBLE_DEVICES give them:
    node rank n's processes follow those of node ranks 0..n-1."""
    nodes = {}
    for text in scripts.values():
        run = next(line for line in text.splitlines() if "torchrun" in line)
        rank = int(re.search(r"--node-rank (\d+)", run).group(1))
        nproc = int(re.search(r"--nproc-per-node (\d+)", run).group(1))
        visible = re.search(r"^export CUDA_VISIBLE_DEVICES=([\d,]+)$", text, re.M)
        devices = [int(x) for x in visible.group(1).split(",")] if visible else list(range(nproc))
        nodes[rank] = devices
    out, base = {}, 0
    for rank in sorted(nodes):
        for j, gpu in enumerate(nodes[rank]):
            out[(rank, j)] = (base + j, gpu)
        base += len(nodes[rank])
    return out


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("cluster", CLUSTERS)
def test_runnable_plan_exports_to_megatron_exactly(model, cluster, tmp_path):
    plan = typed_plan(model, cluster)
    assert evaluate_plan(plan).fits and runtime_problems(plan, "megatron") == []
    out, launch = tmp_path / "megatron.args", tmp_path / "launch"
    result = invoke("export", write(plan, tmp_path / "plan.json"), "--to", "megatron", "-o", out,
                    "--launch-dir", launch)
    assert result.exit_code == 0, result.stderr
    assert "warning" not in result.stderr and "lossy" not in result.stderr
    text = out.read_text()
    a = megatron_flags(text)
    tp, dp = LAYOUTS[(model, cluster)]
    assert (int(a["--tensor-model-parallel-size"]), int(a["--pipeline-model-parallel-size"])) == (tp, plan.pp)
    assert a["--rotary-base"] == "500000" and a["--norm-epsilon"] == "1e-05"
    assert "--untie-embeddings-and-output-weights" in a
    vocab, divisor = plan.model.config.vocab, int(a["--make-vocab-size-divisible-by"])
    assert vocab % (divisor * tp) == 0  # Megatron pads to a multiple of divisor x TP: here not at all
    planned = [sum(1 for i in range(*s.layers) if plan.model.layers[i].kind == "decoder") for s in plan.stages]
    if len(set(planned)) > 1:
        chunks = layout_chunks(a["--pipeline-model-parallel-layout"])
        assert [c.count("t") for c in chunks] == planned
        assert chunks[0][0] == "E" and chunks[-1][-1] == "L" and "".join(chunks).count("E") == 1
    # every GPU gets the stage, replica and TP rank the plan gave it, under Megatron's tp-dp-pp order
    scripts = {p.name: p.read_text() for p in sorted(launch.iterdir())}
    assert len(scripts) == len(node_launches(plan)) == len({(plan.cluster.device(r).group, plan.cluster.device(r).node)
                                                            for r in plan.used_ranks()})
    position = {}
    for s in plan.stages:
        for r in s.replicas:
            for i, rank in enumerate(r.ranks):
                position[rank] = (s.pipeline_rank, r.dp_rank, i)
    by_name = {(name.split("-", 3)[3].rsplit("-", 1)[0], int(name.rsplit("-", 1)[1][:-3])): text
               for name, text in scripts.items()}
    ranks = torchrun_ranks(scripts)
    seen = set()
    for (group, node), script in by_name.items():
        node_rank = int(re.search(r"--node-rank (\d+)", script).group(1))
        for (n, j), (g, gpu) in ranks.items():
            if n != node_rank:
                continue
            g_cluster = plan.cluster.group(group)
            cluster_rank = next(d.rank for d in plan.cluster.devices()
                                if (d.group, d.node, d.local_rank) == (g_cluster.name, node, gpu))
            assert position[cluster_rank] == (g // (tp * dp), g // tp % dp, g % tp)
            seen.add(cluster_rank)
    assert seen == set(position)


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("cluster", CLUSTERS)
def test_runnable_plan_exports_to_torchtitan_exactly(model, cluster, tmp_path):
    plan = typed_plan(model, cluster, "torchtitan", zero=1)  # FSDP under PP: ZeRO-1 (capability)
    assert runtime_problems(plan, "torchtitan") == []
    if not evaluate_plan(plan).fits:
        pytest.skip(f"{model} on {cluster} in {plan.training.dtype} does not fit this layout")
    result = invoke("export", write(plan, tmp_path / "plan.json"), "--to", "torchtitan")
    assert result.exit_code == 0, result.stderr
    assert "warning" not in result.stderr
    cfg = tomllib.loads(result.stdout)
    parts = cfg["parallelism"]["module_fqns_per_model_part"]
    planned = [sum(1 for i in range(*s.layers) if plan.model.layers[i].kind == "decoder") for s in plan.stages]
    assert [sum(n.startswith("layers.") for n in part) for part in parts] == planned
    assert "rotary frequencies" in result.stdout  # Llama 3 has no RoPE scaling; torchtitan's flavour has


def test_interleaved_runnable_plan_uses_a_layout_with_virtual_stages(tmp_path):
    # 576 / dp 8 = 72 micro-batches per replica, a multiple of pp 3 (capability.interleaved_microbatch_multiple)
    plan = typed_plan("llama-3-8b", "a100-v100-mix", interleave=2, global_batch=576)
    result = invoke("export", write(plan, tmp_path / "plan.json"), "--to", "megatron")
    assert result.exit_code == 0 and "warning" not in result.stderr, result.stderr
    a = megatron_flags(result.stdout)
    chunks = layout_chunks(a["--pipeline-model-parallel-layout"])
    assert len(chunks) == 2 * plan.pp  # virtual stages come from the layout's length
    assert "--num-layers-per-virtual-pipeline-stage" not in a and "--num-virtual-stages-per-pipeline-rank" not in a


@pytest.mark.slow
def test_lossy_form_keeps_the_layer_split_and_stage_gpus():
    from planner.search.orchestration.driver import solve

    plan = solve(load_model("llama-3-8b"), load_cluster("a100-v100-mix"),
                 Training(512, 4096, "fp16", 1, runtime="any")).plan
    assert runtime_problems(plan, "megatron")  # per-stage TP (runtime: any)
    for tp in sorted({s.tp for s in plan.stages}):
        form = runnable_form(plan, "megatron", tp)
        assert [s.layers for s in form.stages] == [s.layers for s in plan.stages]
        assert runtime_problems(form, "megatron") == []
        for s, t in zip(plan.stages, form.stages):
            assert {r for rep in t.replicas for r in rep.ranks} <= {r for rep in s.replicas for r in rep.ranks}


def test_targets_name_their_runtimes():
    assert TARGET_RUNTIMES["megatron"][0] == "megatron" and TARGET_RUNTIMES["torchtitan-cli"] == ("torchtitan",)


def _two_stage_plan(ranks0: list[tuple[int, ...]], ranks1: list[tuple[int, ...]]) -> Plan:
    """llama-3-8b on dgx-a100, pp 2, the given TP groups per replica (runtime megatron)."""
    base = typed_plan("llama-3-8b", "dgx-a100")
    tp, share = len(ranks0[0]), base.training.global_batch // len(ranks0)
    stages = tuple(Stage(k, s.layers, tp, 1, "full", tuple(Replica(d, share, g) for d, g in enumerate(groups)), k, True)
                   for k, (s, groups) in enumerate(zip(base.stages, (ranks0, ranks1))))
    return Plan(base.model, base.cluster, base.training, stages)


def test_stages_on_chosen_nodes_take_node_ranks_in_stage_order():
    # stage 0 on nodes 0 and 2, stage 1 on nodes 1 and 3: node ranks 0, 1 go to nodes 0, 2
    plan = _two_stage_plan([tuple(range(0, 8)), tuple(range(16, 24))], [tuple(range(8, 16)), tuple(range(24, 32))])
    assert runtime_problems(plan, "megatron") == []
    assert [(n.node, n.first_rank, n.pipeline_ranks) for n in node_launches(plan)] == \
        [(0, 0, (0,)), (2, 8, (0,)), (1, 16, (1,)), (3, 24, (1,))]


def test_a_node_torchrun_cannot_number_is_refused(tmp_path):
    # node 0 holds stage 0's replica 0 (global ranks 0-3) and stage 1's replica 0 (global ranks 16-19)
    groups0 = [(0, 1, 2, 3)] + [tuple(range(s, s + 4)) for s in range(8, 32, 8)]
    groups1 = [(4, 5, 6, 7)] + [tuple(range(s, s + 4)) for s in range(12, 32, 8)]
    plan = _two_stage_plan(groups0, groups1)
    problems = runtime_problems(plan, "megatron")
    assert len(problems) == 1 and problems[0].startswith("placement: node 0 of group 'a100' holds global ranks")
    result = invoke("export", write(plan, tmp_path / "plan.json"), "--to", "megatron")
    # the plan is a Megatron plan: the refusal names the capability it breaks, not `--runtime`
    assert result.exit_code == 2 and "placement" in result.stderr and "--runtime" not in result.stderr
    assert "--lossy" in result.stderr


def layout_counts(layout: str | None, pp: int, num_layers: int) -> list[int]:
    """Decoder layers per chunk (in chunk order) of a Megatron layout; no layout: Megatron's even split."""
    if layout is None:
        return [num_layers // pp] * pp
    expanded = re.sub(r"(.)\*(\d+)", lambda m: m.group(1) * int(m.group(2)), layout.replace(",", ""))
    return [chunk.count("t") for chunk in expanded.split("|")]


@pytest.mark.parametrize("tp, pp, v", [(4, 2, 1), (2, 4, 2), (1, 4, 1)])
def test_megatron_layout_is_the_plans_split(tp, pp, v):
    model, cluster = load_model("llama-3-8b"), load_cluster("dgx-a100")
    plan = uniform_plan(model, cluster, Training(256, 4096, "bf16", 1, "interleaved" if v > 1 else "1f1b", v),
                        tp=tp, pp=pp, dp=32 // (tp * pp))
    layout = megatron_layout(plan)
    chunks = layout.split("|")
    assert len(chunks) == pp * v and chunks[0].startswith("E") and chunks[-1].endswith("L")
    assert layout_counts(layout, pp, 32) == [sum(1 for i in range(*s.layers) if model.layers[i].kind == "decoder")
                                             for s in plan.stages]


def test_vocab_divisor_keeps_the_vocabulary_unpadded():
    assert vocab_divisor(128256, 1) == 128 and vocab_divisor(128256, 4) == 64 and vocab_divisor(128256, 8) == 32
    assert vocab_divisor(50257, 1) == 1 and vocab_divisor(50257, 2) is None
    for vocab, tp in ((128256, 8), (151936, 4), (32000, 2)):
        d = vocab_divisor(vocab, tp)
        assert vocab % (d * tp) == 0 and (d == 128 or vocab % (2 * d * tp))


def test_launch_script_runs_torchrun_with_the_exported_flags(tmp_path):
    """bash runs a node's script: torchrun (a stand-in that records its argv and CUDA_VISIBLE_DEVICES)
    gets the node rank and every exported flag as one word each, the layout unexpanded."""
    import os
    import shutil
    import subprocess
    import sys

    if shutil.which("bash") is None:
        pytest.skip("no bash")
    plan = typed_plan("llama-3-70b", "h100-a100-v100")
    out, launch = tmp_path / "megatron.args", tmp_path / "launch"
    result = invoke("export", write(plan, tmp_path / "plan.json"), "--to", "megatron", "-o", out, "--launch-dir", launch)
    assert result.exit_code == 0, result.stderr
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "torchrun").write_text(f"#!{sys.executable}\nimport json, os, sys\n"
                                   "print(json.dumps([os.environ.get('CUDA_VISIBLE_DEVICES'), sys.argv[1:]]))\n")
    (fake / "torchrun").chmod(0o755)
    env = {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}", "MASTER_ADDR": "10.0.0.1"}
    flags = megatron_flags(out.read_text())
    for script in sorted(launch.iterdir()):
        done = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        visible, argv = json.loads(done.stdout)
        node_rank = int(argv[argv.index("--node-rank") + 1])
        assert script.name.startswith(f"node-rank-{node_rank:02d}-") and argv[argv.index("--master-addr") + 1] == "10.0.0.1"
        rest = argv[argv.index("./pretrain_gpt.py") + 1:]
        assert megatron_flags(" ".join(shlex.quote(word) for word in rest)) == flags
        assert visible is None  # whole nodes, in order


def test_part_of_a_node_runs_on_the_plans_gpus():
    # stage 0 on GPUs 6, 7, 4, 5 of node 0 (in that TP/DP order), stage 1 on GPUs 0-3 of node 1
    plan = _two_stage_plan([(6, 7), (4, 5)], [(8, 9), (10, 11)])
    assert runtime_problems(plan, "megatron") == []
    first, second = node_launches(plan)
    assert (first.node, first.visible, first.first_rank) == (0, "6,7,4,5", 0)
    assert (second.node, second.visible, second.first_rank) == (1, "0,1,2,3", 4)
    scripts = launch_scripts(plan, "megatron", "megatron.args")
    assert "export CUDA_VISIBLE_DEVICES=6,7,4,5" in scripts["node-rank-00-a100-0.sh"]
    assert "--nproc-per-node 4" in scripts["node-rank-01-a100-1.sh"]


def test_query_groups_that_do_not_split_over_tp_are_refused(tmp_path):
    model = load_model("qwen3-30b-a3b")  # 4 key/value heads
    plan = uniform_plan(model, load_cluster("dgx-a100"), Training(64, 1024, "bf16", 1), tp=8, pp=4, dp=1, zero=1)
    assert any("4 query groups over TP" in p for p in runtime_problems(plan, "megatron"))
    ok = uniform_plan(model, load_cluster("dgx-a100"), Training(64, 1024, "bf16", 1), tp=4, pp=4, dp=2, zero=1)
    assert runtime_problems(ok, "megatron") == []
    # a Megatron plan file with it is invalid (planner.verify: capability.violations); made for `any`, it
    # exports --lossy
    import dataclasses
    free = dataclasses.replace(plan, training=dataclasses.replace(plan.training, runtime="any"))
    lossy = invoke("export", write(free, tmp_path / "p.json"), "--to", "megatron", "--lossy")
    assert lossy.exit_code == 0, lossy.stderr  # tp 8 has no Megatron form; a halving of it has
    assert "megatron runs tp 8" not in lossy.stderr and "query groups" not in lossy.stderr
