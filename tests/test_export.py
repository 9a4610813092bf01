"""`planner export`: Megatron flags, DeepSpeed config, torchtitan TOML/CLI, rank map."""

from __future__ import annotations

import dataclasses
import json
import shlex
import tomllib

import click
import pytest
from click.testing import CliRunner

from planner.cli.export import add_commands
from planner.export import TARGET_RUNTIMES, titan_cli_args
from planner.inputs.hardware import cluster_from_spec, load_cluster
from planner.inputs.model import load_model
from planner.plan import Training, plan_to_json, uniform_plan
from planner.verify.plan_checks import load_schema

from .conftest import hf_config, mixed_any_result
from .test_export_runnable import layout_counts


@pytest.fixture(scope="module")
def group():
    g = click.Group()
    add_commands(g)
    return g


@pytest.fixture(scope="module")
def homogeneous(tmp_path_factory):
    plan = uniform_plan(load_model("llama-3-8b"), load_cluster("dgx-a100"), Training(256, 4096, "bf16", 1),
                        tp=4, pp=2, dp=4, zero=1, recompute="selective", sequence_parallel=True)
    path = tmp_path_factory.mktemp("export") / "uniform.json"
    path.write_text(json.dumps(plan_to_json(plan)))
    return str(path)


@pytest.fixture(scope="module")
def heterogeneous_data():
    return plan_to_json(mixed_any_result().plan)


def runtime_plan(runtime: str, dtype: str):
    """The plan of `runtime` for heterogeneous_data's inputs: what `export --lossy` writes for it."""
    from planner.api import PlanRequest, plan

    return plan(PlanRequest(model="llama-3-8b", cluster="a100-v100-mix", global_batch=512, seq_len=4096, dtype=dtype,
                            runtime=runtime, jobs=2)).plan


@pytest.fixture(scope="module")
def heterogeneous(heterogeneous_data, tmp_path_factory):
    path = tmp_path_factory.mktemp("export") / "mixed.json"
    path.write_text(json.dumps(heterogeneous_data))
    return str(path)


def as_runtime(path: str, runtime: str, **stage_keys) -> str:
    """A copy of the plan file `path` made for `runtime` (training.runtime), with `stage_keys` set on
    every stage (e.g. zero=3 for torchtitan's FSDP): what `plan --runtime RUNTIME` would record."""
    data = json.loads(open(path).read())
    data["training"]["runtime"] = runtime
    for stage in data["stages"]:
        stage.update(stage_keys)
    out = f"{path[:-5]}-{runtime}-{'-'.join(f'{k}{v}' for k, v in stage_keys.items())}.json"
    with open(out, "w") as handle:
        handle.write(json.dumps(data))
    return out


def run(group, *args):
    result = CliRunner().invoke(group, ["export", *args])
    return result


def megatron_args(text: str) -> dict[str, str | None]:
    lines = [line for line in text.splitlines() if not line.startswith("#")]
    assert all(line.endswith(" \\") for line in lines[:-1]) and not lines[-1].endswith("\\")
    argv = shlex.split(" ".join(line.rstrip("\\").strip() for line in lines))
    out: dict[str, str | None] = {}
    for i, token in enumerate(argv):
        if token.startswith("--"):
            nxt = argv[i + 1] if i + 1 < len(argv) else None
            out[token] = None if nxt is None or nxt.startswith("--") else nxt
    return out


def test_megatron_homogeneous(group, homogeneous):
    result = run(group, homogeneous, "--to", "megatron")
    assert result.exit_code == 0, result.stderr
    assert result.stderr == ""
    a = megatron_args(result.stdout)
    tp, pp, mbs, gbs = (int(a[k]) for k in ("--tensor-model-parallel-size", "--pipeline-model-parallel-size",
                                            "--micro-batch-size", "--global-batch-size"))
    assert (tp, pp, mbs, gbs) == (4, 2, 1, 256)
    dp = 32 // (tp * pp)
    assert gbs % (mbs * dp) == 0 and gbs // (mbs * dp) == 64  # micro-batches per replica
    assert int(a["--num-layers"]) == 32 and int(a["--hidden-size"]) == 4096
    assert int(a["--num-query-groups"]) == 8 and "--group-query-attention" in a
    assert "--sequence-parallel" in a and a["--recompute-granularity"] == "selective"
    assert "--use-distributed-optimizer" in a and "--bf16" in a and "--swiglu" in a
    assert "--untie-embeddings-and-output-weights" in a and a["--normalization"] == "RMSNorm"
    assert "--decoder-first-pipeline-num-layers" not in a  # 16 + 16: even


def test_megatron_refuses_a_plan_it_cannot_run_unless_lossy(group, heterogeneous, heterogeneous_data):
    # the solver's plan on a100-v100-mix gives its stages (or the replicas of one) different TP or DP
    # degrees (runtime: any)
    assert len({(s["tp"], s["dp"]) for s in heterogeneous_data["stages"]}) > 1 or any(
        "tp" in r for s in heterogeneous_data["stages"] for r in s["replicas"])
    result = run(group, heterogeneous, "--to", "megatron")
    assert result.exit_code == 2 and result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "--runtime megatron" in lines[0]
    assert any(f"one {what}" in lines[0] for what in ("TP degree in every stage", "DP degree in every stage",
                                                       "TP degree per stage"))
    assert "--lossy" in lines[0]
    result = run(group, heterogeneous, "--to", "megatron", "--lossy")
    assert result.exit_code == 0, result.stderr
    assert "warning" not in result.stderr  # what is written is exact; the loss is the re-priced time
    lossy = [line for line in result.stderr.splitlines() if "lossy:" in line]
    # the written form priced under megatron; the plan under its own runtime (`any`, Megatron's physics)
    assert len(lossy) == 1 and lossy[0].count("s per step under ") == 2 and "under megatron" in lossy[0]
    a = megatron_args(result.stdout)
    pp, tp = int(a["--pipeline-model-parallel-size"]), int(a["--tensor-model-parallel-size"])
    own = runtime_plan("megatron", "fp16")  # --lossy plans again under megatron: its own plan is written
    assert (tp, pp) == (own.stages[0].tp, own.pp)
    counts = layout_counts(a.get("--pipeline-model-parallel-layout"), pp, int(a["--num-layers"]))
    assert counts == [l1 - l0 - (l0 == 0) - (l1 == 34) for l0, l1 in (s.layers for s in own.stages)]
    dp = next(int(line.split("dp ")[1].split()[0]) for line in result.stdout.splitlines()
              if line.startswith("# planner"))
    assert int(a["--global-batch-size"]) % (int(a["--micro-batch-size"]) * dp) == 0


def test_megatron_refuses_uneven_shares_unless_lossy(group, tmp_path):
    plan = uniform_plan(load_model("llama-3-8b"), load_cluster("dgx-a100"), Training(256, 4096, "bf16", 1),
                        tp=4, pp=2, dp=4, zero=1)
    data = plan_to_json(plan)
    for stage in data["stages"]:
        reps = stage["replicas"]
        reps[0]["batch_share"] += 8
        reps[1]["batch_share"] -= 8
    data["training"]["num_microbatches"] = 72
    data["training"]["runtime"] = "any"  # uneven shares: a plan of the unconstrained runtime
    path = tmp_path / "uneven.json"
    path.write_text(json.dumps(data))
    result = run(group, str(path), "--to", "megatron")
    assert result.exit_code == 2 and "same batch share" in result.stderr and "--runtime megatron" in result.stderr
    result = run(group, str(path), "--to", "megatron", "--lossy")
    assert result.exit_code == 0 and "lossy:" in result.stderr and "warning" not in result.stderr


def test_export_refuses_a_plan_made_for_another_runtime(group, tmp_path):
    plan = uniform_plan(load_model("llama-3-8b"), load_cluster("dgx-a100"), Training(256, 4096, "bf16", 1),
                        tp=4, pp=2, dp=4, zero=1)
    data = plan_to_json(plan)
    data["training"]["runtime"] = "torchtitan"
    for stage in data["stages"]:  # what torchtitan runs with a pipeline: FSDP (ZeRO-1 under PP), sequence parallel TP
        stage.update(zero=1, sequence_parallel=True)
    path = tmp_path / "titan.json"
    path.write_text(json.dumps(data))
    result = run(group, str(path), "--to", "megatron")
    assert result.exit_code == 2 and result.stdout == ""
    assert "made for runtime 'torchtitan'" in result.stderr and "--runtime megatron" in result.stderr
    result = run(group, str(path), "--to", "megatron", "--lossy")
    assert result.exit_code == 0 and "under megatron" in result.stderr and "under torchtitan" in result.stderr
    assert run(group, str(path), "--to", "rankmap").exit_code == 0  # the reference runtime runs any plan


def test_megatron_interleaved_uses_layers_per_virtual_stage(group, tmp_path):
    plan = uniform_plan(load_model("llama-3-8b"), load_cluster("dgx-a100"),
                        Training(256, 4096, "bf16", 1, "interleaved", 2), tp=4, pp=4, dp=2)
    path = tmp_path / "v2.json"
    path.write_text(json.dumps(plan_to_json(plan)))
    result = run(group, str(path), "--to", "megatron")
    assert result.exit_code == 0, result.stderr
    a = megatron_args(result.stdout)
    assert int(a["--num-layers-per-virtual-pipeline-stage"]) == 4
    assert "--num-virtual-stages-per-pipeline-rank" not in a


@pytest.mark.slow
def test_deepspeed(group, homogeneous, heterogeneous):
    result = run(group, as_runtime(homogeneous, "deepspeed"), "--to", "deepspeed")
    assert result.exit_code == 2 and "selective recomput" in result.stderr  # DeepSpeed checkpoints whole layers
    result = run(group, as_runtime(homogeneous, "deepspeed", recompute="full", sequence_parallel=False), "--to",
                 "deepspeed")
    assert result.exit_code == 0, result.stderr
    ds = json.loads(result.stdout)
    dp = ds["planner_pipeline"]["data_parallel_size"]
    assert ds["train_batch_size"] == ds["train_micro_batch_size_per_gpu"] * ds["gradient_accumulation_steps"] * dp
    assert ds["train_batch_size"] == 256 and dp == 4
    assert ds["zero_optimization"]["stage"] == 1 and ds["bf16"]["enabled"]
    assert ds["planner_pipeline"]["parts"] == [0, 17, 34]
    assert "activation_checkpointing" in ds
    assert run(group, heterogeneous, "--to", "deepspeed").exit_code == 2
    # --lossy: the nearest form DeepSpeed's capability model allows (capability.py: the same decoder
    # blocks on every stage, no sequence parallelism), re-priced
    result = run(group, heterogeneous, "--to", "deepspeed", "--lossy")
    assert result.exit_code == 0 and "lossy: deepspeed runs" in result.stderr, result.stderr
    parts = json.loads(result.stdout)["planner_pipeline"]["parts"]
    blocks = [b - a for a, b in zip(parts, parts[1:])]
    assert len(set(blocks)) == 1, parts


def test_deepspeed_lowers_zero2_with_pipelines(group, tmp_path):
    # runtime: any (ZeRO-2 with a pipeline)
    plan = uniform_plan(load_model("llama-3-8b"), load_cluster("dgx-a100"), Training(256, 4096, "bf16", 1, runtime="any"),
                        tp=4, pp=2, dp=4, zero=2)
    path = tmp_path / "z2.json"
    path.write_text(json.dumps(plan_to_json(plan)))
    result = run(group, str(path), "--to", "deepspeed")
    assert result.exit_code == 2 and "ZeRO-2" in result.stderr  # the pipeline engine refuses it
    result = run(group, str(path), "--to", "deepspeed", "--lossy")
    assert result.exit_code == 0 and "lossy:" in result.stderr and "warning" not in result.stderr
    assert json.loads(result.stdout)["zero_optimization"]["stage"] == 1


def test_torchtitan(group, homogeneous, heterogeneous, heterogeneous_data):
    assert run(group, homogeneous, "--to", "torchtitan").exit_code == 2  # made for megatron
    homogeneous = as_runtime(homogeneous, "torchtitan", zero=1)  # FSDP under PP: ZeRO-1 (capability)
    result = run(group, homogeneous, "--to", "torchtitan")
    assert result.exit_code == 0, result.stderr
    cfg = tomllib.loads(result.stdout)
    par = cfg["parallelism"]
    degrees = (par["data_parallel_shard_degree"] * par["data_parallel_replicate_degree"]
               * par["tensor_parallel_degree"] * par["pipeline_parallel_degree"])
    assert degrees == 32
    assert cfg["model"] == {"name": "llama3", "flavor": "8B"}
    assert par["pipeline_parallel_schedule"] == "1F1B"
    parts = par["module_fqns_per_model_part"]
    assert parts[0][0] == "tok_embeddings" and parts[-1][-2:] == ["norm", "output"]
    assert sum(1 for p in parts for n in p if n.startswith("layers.")) == 32
    assert cfg["activation_checkpoint"]["mode"] == "selective"
    assert cfg["training"]["global_batch_size"] == 256 and cfg["training"]["seq_len"] == 4096
    assert run(group, heterogeneous, "--to", "torchtitan").exit_code == 2
    result = run(group, heterogeneous, "--to", "torchtitan", "--lossy")
    assert result.exit_code == 0 and "lossy:" in result.stderr and "warning" not in result.stderr
    par = tomllib.loads(result.stdout)["parallelism"]
    # torchtitan's own plan for the same inputs (--lossy plans again), in fp32: it has no fp16
    assert "planned in fp32" in result.stderr
    own = runtime_plan("torchtitan", "fp32")
    assert [len([n for n in p if n.startswith("layers.")]) for p in par["module_fqns_per_model_part"]] \
        == [l1 - l0 - (l0 == 0) - (l1 == 34) for l0, l1 in (s.layers for s in own.stages)]


def cli_args(text: str) -> dict[str, list[str]]:
    """`--section.key value...` words -> {flag: [values]} (a flag may take several words)."""
    out: dict[str, list[str]] = {}
    for word in shlex.split(text):
        if word.startswith("--"):
            out[word] = values = []
        else:
            values.append(word)
    return out


def test_torchtitan_cli(group, homogeneous):
    homogeneous = as_runtime(homogeneous, "torchtitan", zero=1)  # FSDP under PP: ZeRO-1 (capability)
    result = run(group, homogeneous, "--to", "torchtitan-cli")
    assert result.exit_code == 0, result.stderr
    args = cli_args(result.stdout)
    assert args["--parallelism.tensor_parallel_degree"] == ["4"]
    assert args["--parallelism.pipeline_parallel_degree"] == ["2"]
    assert args["--job.description"] == ["llama-3-8b on dgx-a100 (planner)"]
    # tyro's form of list[list[str]]: one comma-separated word per model part, as in the TOML
    parts = [word.split(",") for word in args["--parallelism.module_fqns_per_model_part"]]
    toml_parts = tomllib.loads(run(group, homogeneous, "--to", "torchtitan").stdout)["parallelism"][
        "module_fqns_per_model_part"]
    assert parts == toml_parts and parts[0][0] == "tok_embeddings" and len(parts) == 2


def test_torchtitan_cli_values_in_tyro_form():
    assert titan_cli_args("checkpoint", "enable", True) == ["--checkpoint.enable"]
    assert titan_cli_args("checkpoint", "enable", False) == ["--checkpoint.no_enable"]
    assert titan_cli_args("model", "converters", ["a", "b"]) == ["--model.converters", "a,b"]
    assert titan_cli_args("p", "m", [["x", "y"], ["z"]]) == ["--p.m", "x,y", "z"]
    assert titan_cli_args("training", "seq_len", 4096) == ["--training.seq_len", "4096"]


# 32 B200s (180 GiB): room for llama-3-8b's unsharded states (about 128 GiB) under plain DDP
B200_SPEC = {"name": "b200-x4", "node_groups": [{
    "name": "b200", "gpu": "B200", "nodes": 4, "gpus_per_node": 8,
    "intra_node": {"bandwidth_GBps": 900, "latency_us": 3}, "inter_node": {"bandwidth_GBps": 50, "latency_us": 5}}]}


def _export_uniform(group, tmp_path, target, training, cluster=None, **layout):
    """A uniform plan made for the target's runtime, exported."""
    cluster = cluster_from_spec(cluster) if cluster else load_cluster("dgx-a100")
    training = dataclasses.replace(training, runtime=TARGET_RUNTIMES[target][0])
    plan = uniform_plan(load_model("llama-3-8b"), cluster, training, **layout)
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan_to_json(plan)))
    return run(group, str(path), "--to", target)


def test_torchtitan_zero0_is_ddp_only_without_tp_and_pp(group, tmp_path):
    result = _export_uniform(group, tmp_path, "torchtitan", Training(256, 4096, "bf16", 1), B200_SPEC,
                             tp=1, pp=1, dp=32)
    assert result.exit_code == 0 and result.stderr == ""
    par = tomllib.loads(result.stdout)["parallelism"]
    assert (par["data_parallel_replicate_degree"], par["data_parallel_shard_degree"]) == (32, 1)
    # torchtitan raises "DDP has not supported > 1D parallelism" for DDP with TP or PP: ZeRO-0 on 8
    # replicas with TP and PP is no torchtitan plan (a plan file of runtime torchtitan with it is
    # invalid); made for `any`, --lossy writes FSDP (ZeRO-1 under PP: one gather per step), re-priced
    plan = uniform_plan(load_model("llama-3-8b"), load_cluster("dgx-a100"),
                        Training(256, 4096, "bf16", 1, runtime="any"), tp=2, pp=2, dp=8)
    path = tmp_path / "any.json"
    path.write_text(json.dumps(plan_to_json(plan)))
    result = run(group, str(path), "--to", "torchtitan")
    assert result.exit_code == 2 and "(ZeRO-0) only when data parallelism is the only parallelism" in result.stderr
    result = run(group, str(path), "--to", "torchtitan", "--lossy")
    assert result.exit_code == 0 and "lossy:" in result.stderr and "warning" not in result.stderr
    par = tomllib.loads(result.stdout)["parallelism"]
    assert par["data_parallel_replicate_degree"] == 1 and par["fsdp_reshard_after_forward"] == "never"
    assert par["data_parallel_shard_degree"] * par["tensor_parallel_degree"] * par["pipeline_parallel_degree"] == 32


def test_torchtitan_refuses_seq_len_not_divisible_by_2tp(group, tmp_path):
    result = _export_uniform(group, tmp_path, "torchtitan", Training(64, 1000, "bf16", 1), tp=8, pp=1, dp=4,
                             zero=3, sequence_parallel=True)
    assert result.exit_code == 2 and "2 x TP = 16" in result.stderr and result.stdout == ""
    result = _export_uniform(group, tmp_path, "torchtitan", Training(64, 1000, "bf16", 1), tp=4, pp=1, dp=8,
                             zero=3, sequence_parallel=True)
    assert result.exit_code == 0, result.stderr


def _export_model(group, tmp_path, model, target="torchtitan"):
    # dp 2: torchtitan's bf16 with TP and PP needs FSDP (capability.mixed_precision_needs_sharding)
    plan = uniform_plan(model, load_cluster("dgx-a100"), Training(256, 4096, "bf16", 1, runtime="torchtitan"),
                        tp=8, pp=2, dp=2, zero=1, recompute="full", sequence_parallel=True)  # room for 70B too
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan_to_json(plan)))
    return run(group, str(path), "--to", target)


@pytest.mark.parametrize("config, named", [("llama-3-8b", "llama-3-70b"), ("llama-3-70b", "llama-3-8b")])
def test_torchtitan_flavour_comes_from_the_dimensions_not_the_name(group, tmp_path, config, named):
    renamed = tmp_path / f"{named}.json"  # one model's config under the other's file name
    data = hf_config(config)
    data.pop("_name_or_path", None)  # the model is named by its file
    renamed.write_text(json.dumps(data))
    model = load_model(str(renamed))
    assert model.name == named
    expected = {"llama-3-8b": "8B", "llama-3-70b": "70B"}[config]
    result = _export_model(group, tmp_path, model)
    assert result.exit_code == 0, result.stderr
    assert tomllib.loads(result.stdout)["model"] == {"name": "llama3", "flavor": expected}
    cli = cli_args(_export_model(group, tmp_path, model, "torchtitan-cli").stdout)
    assert cli["--model.flavor"] == [expected]


@pytest.mark.parametrize("config, edit", [
    ("llama-2-7b", {}),  # a llama, but no torchtitan flavour
    ("mistral-7b", {}),  # llama-3-8b's shape with another vocabulary
    ("llama-3-8b", {"num_hidden_layers": 30}),  # named like a flavour, one of its dimensions differs
])
def test_torchtitan_refuses_a_model_that_is_no_flavour(group, tmp_path, config, edit):
    path = tmp_path / f"{config}.json"
    path.write_text(json.dumps({**hf_config(config), **edit, "_name_or_path": config}))
    result = _export_model(group, tmp_path, load_model(str(path)))
    assert result.exit_code == 2 and result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "is none of its llama3 flavours (debugmodel, 8B, 70B, 405B)" in lines[0]
    assert f"'{config}'" in lines[0] and "--to torchtitan" in lines[0]
    assert _export_model(group, tmp_path, load_model(str(path)), "rankmap").exit_code == 0


def test_titan_flavour_table_is_torchtitans():
    titan = pytest.importorskip("torchtitan.models.llama3")
    import torch
    from torchtitan.models.llama3.model.model import FeedForward

    from planner.inputs.titan_flavors import TITAN_LLAMA3_FLAVORS

    plain = {k: a for k, a in titan.llama3_args.items() if not k.endswith(("_flex_attn", "_varlen_attn",
                                                                            "_flex", "_varlen"))}
    assert set(plain) == set(TITAN_LLAMA3_FLAVORS)
    for name, a in plain.items():
        with torch.device("meta"):
            ffn = FeedForward(a.dim, 4 * a.dim, a.multiple_of, a.ffn_dim_multiplier).w1.out_features
        mine = TITAN_LLAMA3_FLAVORS[name]
        assert (mine.hidden, mine.num_layers, mine.num_heads, mine.num_kv_heads or mine.num_heads,
                mine.ffn_hidden, mine.vocab) == \
            (a.dim, a.n_layers, a.n_heads, a.n_kv_heads or a.n_heads, ffn, a.vocab_size), name


@pytest.mark.parametrize("which", ["homogeneous", "heterogeneous"])
def test_rankmap_lists_every_used_rank_once(group, which, request, tmp_path):
    path = request.getfixturevalue(which)
    out = tmp_path / "rankmap.json"
    result = run(group, path, "--to", "rankmap", "-o", str(out))
    assert result.exit_code == 0 and result.stderr == ""
    data = json.loads(out.read_text())
    plan = json.loads(open(path).read())
    used = sorted({r for s in plan["stages"] for rep in s["replicas"] for r in rep["ranks"]})
    assert [e["rank"] for e in data["ranks"]] == used
    for e in data["ranks"]:
        assert e["rank"] in e["tp_group"] and e["rank"] in e["dp_group"]
    assert sum(len(g["nodes"]) * g["nproc_per_node"] for g in data["launch"]) == len(used)


def test_bad_plan_exits_2(group, tmp_path):
    path = tmp_path / "bad.json"
    path.write_text("{}")
    result = run(group, str(path), "--to", "megatron")
    assert result.exit_code == 2 and len(result.stderr.strip().splitlines()) == 1


def test_a_plan_of_the_unconstrained_runtime_exports_only_lossy(group, homogeneous):
    from planner.cost.runtimes import RUNTIMES

    if "any" not in RUNTIMES and "any" not in json.dumps(load_schema("plan")):
        pytest.skip("no `--runtime any` in this tree yet (issue 13's capability models)")
    path = as_runtime(homogeneous, "any")  # `plan --runtime any`: priced without a runtime's limits
    result = run(group, path, "--to", "megatron")
    assert result.exit_code == 2 and "made for runtime 'any'" in result.stderr and "--runtime megatron" in result.stderr
    result = run(group, path, "--to", "megatron", "--lossy")
    assert result.exit_code == 0, result.stderr
    lossy = next(line for line in result.stderr.splitlines() if "lossy:" in line)
    assert lossy.count("s per step under ") == 2 and "under megatron" in lossy  # `any`: Megatron's physics
