"""Integration: the exports loaded by the real trainers on CPU (the `integration` extra).

* DeepSpeed: the `--to deepspeed` config goes through `deepspeed.runtime.config.DeepSpeedConfig`
  with DeepSpeed's own pipeline grid as `mpu` (as its PipelineEngine passes it), then
  `deepspeed.initialize` builds the engine: a `PipelineModule` cut at `planner_pipeline.parts`
  (its `_partition_layers` overridden, as docs/runtimes-and-exports.md says) when pp > 1, else a plain
  module with the grid as `mpu`.
* torchtitan 0.2.2: the `--to torchtitan` TOML and the `--to torchtitan-cli` overrides go through
  `torchtitan.config.ConfigManager` and must give the same JobConfig. Then the trainer's own steps
  run for every pipeline rank: `ParallelDims` for the world size, the llama3 `TrainSpec` and its
  model on the meta device, the batch rule of `Trainer.__init__`, `pipeline_llm` (stage split and
  schedule) and `parallelize_llama` (TP, activation checkpointing, the FSDP / DDP choice).

Each runs in a world of the exported size made by torch's "fake" process-group backend (rank r,
no communication). Two leaves are stubbed because they need more than a CPU: the shared-memory
all-reduce kernel that DeepSpeed's CPU backend compiles with a C++ compiler when it starts (never
used here), and torchtitan's `apply_fsdp` / `apply_ddp` (FSDP takes its device from a CUDA mesh);
what torchtitan passes to them is checked instead. DeepSpeed's CPU accelerator has no fp16, so the
fp16 export is checked up to `DeepSpeedConfig` only.

Skipped without deepspeed / torchtitan; a failure when PLANNER_REQUIRE_INTEGRATION is set (as
`make test` does).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import shlex
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from planner.inputs.hardware import cluster_from_spec, load_cluster
from planner.inputs.model import load_model
from planner.api import nearest_form
from planner.core.errors import BadInput
from planner.export import TARGET_RUNTIMES, runtime_problems
from planner.plan import Training, plan_to_json, uniform_plan
from planner.verify.plan_checks import load_plan_file

from .conftest import invoke, require

pytestmark = pytest.mark.integration
REQUIRE = "PLANNER_REQUIRE_INTEGRATION"

# Plans the solver makes (`planner plan`): model, cluster, global batch, sequence length.
SOLVED = {
    "dgx-8b": ("llama-3-8b", "dgx-a100", 256, 4096),
    "dgx-70b": ("llama-3-70b", "dgx-a100", 256, 4096),
    "mixed-a100-v100": ("llama-3-8b", "a100-v100-mix", 512, 4096),  # fp16 (V100), lossy
    "mixed-3090-4090": ("llama-3-8b", "consumer-3090-4090", 64, 4096),  # bf16, lossy
}
# Layouts set by hand (llama-3-8b on dgx-a100), for what the solver does not pick there; made for
# runtime `any` (ZeRO-3, GPipe, ZeRO-2 with pipelines: each target gets its runnable form, nearest_form).
UNIFORM = {
    "pp2-zero1-selective": (Training(256, 4096, "bf16", 1, runtime="any"),
                            dict(tp=4, pp=2, dp=4, zero=1, recompute="selective", sequence_parallel=True)),
    "zero3-full": (Training(256, 4096, "bf16", 2, runtime="any"),
                   dict(tp=2, pp=1, dp=16, zero=3, recompute="full", sequence_parallel=True)),
    "zero2-pp2": (Training(256, 4096, "bf16", 1, runtime="any"), dict(tp=4, pp=2, dp=4, zero=2, sequence_parallel=True)),
    "interleaved-zero0": (Training(256, 4096, "bf16", 1, "interleaved", 2, runtime="any"),
                          dict(tp=4, pp=4, dp=2, sequence_parallel=True)),
    "gpipe-zero0": (Training(128, 2048, "bf16", 2, "gpipe", 1, runtime="any"),
                    dict(tp=2, pp=2, dp=8, zero=0, sequence_parallel=True)),
    "ddp": (Training(64, 2048, "bf16", 1, runtime="any"), dict(tp=1, pp=1, dp=32, zero=0), "b200"),
}
# unsharded llama-3-8b states (about 128 GiB) need bigger GPUs than dgx-a100's
CLUSTERS = {"b200": {"name": "b200-x4", "node_groups": [{
    "name": "b200", "gpu": "B200", "nodes": 4, "gpus_per_node": 8,
    "intra_node": {"bandwidth_GBps": 900, "latency_us": 3}, "inter_node": {"bandwidth_GBps": 50, "latency_us": 5}}]}}
CASES = [*SOLVED, *UNIFORM]
# `planner plan --runtime torchtitan`: exported as planned, no lossy form (torchtitan tests only)
TITAN_SOLVED = {"titan-dgx-8b": ("llama-3-8b", "dgx-a100", 256, 4096)}
TITAN_CASES = [*CASES, *TITAN_SOLVED]
BF16_CASES = [c for c in CASES if c != "mixed-a100-v100"]

TITAN_SCHEDULE = {"1f1b": "1F1B", "interleaved": "Interleaved1F1B", "gpipe": "GPipe"}
TITAN_FLAVOR = {"llama-3-8b": "8B", "llama-3-70b": "70B"}
RECOMPUTE = ["none", "selective", "full"]


# --- plans and what they say ---------------------------------------------------------------


@pytest.fixture(scope="module")
def runnable_plan_file(tmp_path_factory):
    """(name, export target) -> a plan file the target runs exactly: the case's plan when it does,
    else its nearest form the target runs (planner.api.nearest_form: the layouts stay diverse, where
    `export --lossy` would plan the target's own optimum)."""
    made: dict[str, Path] = {}

    def get(name: str, target: str) -> Path:
        key = f"{name}-{TARGET_RUNTIMES[target][0]}"
        if key in made:
            return made[key]
        plan = load_plan_file(str(case_plan(name)))
        if name in TITAN_SOLVED and target.startswith("torchtitan"):
            assert runtime_problems(plan, target) == []  # torchtitan's own plan: exact, never a lossy form
        if runtime_problems(plan, target):
            try:
                form = nearest_form(plan, target)
            except BadInput as exc:  # e.g. DeepSpeed's even block split at a depth that does not divide the blocks
                pytest.skip(f"{target} runs no form of the {name} plan: {exc}")
            if not form.fits:  # `export --lossy` writes it all the same; a plan file must fit
                pytest.skip(f"{target}'s nearest form of the {name} plan does not fit in memory")
            plan = form.plan
        path = tmp_path_factory.mktemp("plans") / f"{key}.json"
        path.write_text(json.dumps(plan_to_json(plan)))
        made[key] = path
        return path

    def case_plan(name: str) -> Path:
        if name not in made:
            path = tmp_path_factory.mktemp("plans") / f"{name}.json"
            if name in SOLVED or name in TITAN_SOLVED:
                model, cluster, global_batch, seq_len = SOLVED.get(name) or TITAN_SOLVED[name]
                runtime = "torchtitan" if name in TITAN_SOLVED else "megatron"
                # (torchtitan's case: micro-batch 1, which its optimum has, to keep the search short)
                extra = ("--micro-batch", 1) if name in TITAN_SOLVED else ()
                result = invoke("plan", "--model", model, "--cluster", cluster, "--global-batch", global_batch,
                                "--seq-len", seq_len, "--runtime", runtime, *extra, "-o", path)
                assert result.exit_code == 0, result.stderr
            else:
                training, layout, *other = UNIFORM[name]
                cluster = cluster_from_spec(CLUSTERS[other[0]]) if other else load_cluster("dgx-a100")
                plan = uniform_plan(load_model("llama-3-8b"), cluster, training, **layout)
                path.write_text(json.dumps(plan_to_json(plan)))
            made[name] = path
        return made[name]

    return get


def facts(plan: dict) -> SimpleNamespace:
    """What the plan itself says, independently of the exporter."""
    t, stages = plan["training"], plan["stages"]
    n = plan["model"]["num_layers"]  # embedding, decoder blocks, norm + head
    pp = 1 + max(s["pipeline_rank"] for s in stages)
    uniform = (len({(s["tp"], s["dp"]) for s in stages}) == 1
               and all(len({r["batch_share"] for r in s["replicas"]}) == 1 for s in stages))
    gpus_per_prank = {}
    for s in stages:
        gpus_per_prank.setdefault(s["pipeline_rank"], s["tp"] * s["dp"])
    layers_per_prank = [sum(s["layers"][1] - s["layers"][0] for s in stages if s["pipeline_rank"] == r)
                        for r in range(pp)]
    return SimpleNamespace(
        name=plan["model"]["name"], n_layers=n, pp=pp, tp=max(s["tp"] for s in stages),
        dp=stages[0]["dp"] if uniform else None, uniform=uniform, fewest_gpus=min(gpus_per_prank.values()),
        global_batch=t["global_batch"], micro=t["micro_batch"], seq_len=t["seq_len"], dtype=t["dtype"],
        schedule=t["schedule"], num_microbatches=t["num_microbatches"], zero=max(s["zero"] for s in stages),
        recompute=max((s["recompute"] for s in stages), key=RECOMPUTE.index),
        stage_layers=[tuple(s["layers"]) for s in stages],
        decoders=[b - a - (a == 0) - (b == n) for a, b in (s["layers"] for s in stages)],
        parts=[sum(layers_per_prank[:r]) for r in range(pp + 1)])


def export(path: Path, target: str) -> tuple[str, str]:
    """The export of a plan the target runs: exact, so without a single warning."""
    result = invoke("export", path, "--to", target)
    assert result.exit_code == 0, result.stderr
    assert "warning" not in result.stderr, result.stderr
    return result.stdout, result.stderr


def check_layout(f: SimpleNamespace, tp: int, pp: int, dp: int, warnings: str) -> None:
    """The exported degrees are the plan's, or the stated reduction of a non-uniform plan."""
    assert (tp, pp) == (f.tp, f.pp)
    if f.uniform:
        assert dp == f.dp
        assert "differ" not in warnings and "mixed GPU types" not in warnings, warnings
    else:
        assert 1 <= dp and tp * dp <= f.fewest_gpus
        assert "differ" in warnings or "mixed GPU types" in warnings, warnings
    assert f.global_batch % (f.micro * dp) == 0


@contextlib.contextmanager
def fake_world(world_size: int, rank: int = 0):
    """torch.distributed of `world_size` ranks seen from `rank`, with no communication."""
    import torch.distributed as dist

    dist.init_process_group("fake", rank=rank, world_size=world_size)
    try:
        yield
    finally:
        dist.destroy_process_group()


# --- DeepSpeed -----------------------------------------------------------------------------


@pytest.fixture
def ds_world(monkeypatch):
    """A context manager: a fake world with DeepSpeed's communication backend on it."""
    deepspeed = require("deepspeed", REQUIRE)
    # the CPU TorchBackend JIT-compiles a shared-memory all-reduce (a minute of g++) at start
    monkeypatch.setattr(sys.modules["deepspeed.comm.torch"], "build_shm_op", lambda: None)
    monkeypatch.setenv("LOCAL_RANK", "0")
    comm = sys.modules["deepspeed.comm.comm"]

    @contextlib.contextmanager
    def world(size: int, rank: int = 0):
        monkeypatch.setattr(comm, "cdb", None)
        with fake_world(size, rank):
            deepspeed.init_distributed(dist_backend="fake", auto_mpi_discovery=False, verbose=False)
            yield deepspeed

    return world


def ds_expected_zero(f: SimpleNamespace) -> int:
    return min(f.zero, 1) if f.pp > 1 else f.zero  # the pipeline engine takes ZeRO-0/1 only


@pytest.mark.parametrize("case", CASES)
def test_deepspeed_config_parses_to_the_plan(case, runnable_plan_file, ds_world):
    path = runnable_plan_file(case, "deepspeed")
    f = facts(json.loads(path.read_text()))
    text, warnings = export(path, "deepspeed")
    ds = json.loads(text)
    pipe = ds["planner_pipeline"]
    tp, pp, dp = pipe["tensor_parallel_size"], pipe["num_stages"], pipe["data_parallel_size"]
    check_layout(f, tp, pp, dp, warnings)
    assert pipe["parts"] == f.parts and pipe["parts"][-1] == f.n_layers

    with ds_world(tp * pp * dp):
        from deepspeed.runtime.config import DeepSpeedConfig
        from deepspeed.runtime.pipe.topology import PipeModelDataParallelTopology, PipelineParallelGrid

        grid = PipelineParallelGrid(topology=PipeModelDataParallelTopology(num_pp=pp, num_mp=tp, num_dp=dp))
        config = DeepSpeedConfig(ds, mpu=grid)  # asserts train = micro x accumulation x DP world
    assert config.world_size == dp
    assert config.train_batch_size == f.global_batch
    assert config.train_micro_batch_size_per_gpu == f.micro
    assert config.gradient_accumulation_steps == f.global_batch // (f.micro * dp)
    if f.uniform:
        assert config.gradient_accumulation_steps == f.num_microbatches
    assert config.zero_optimization_stage == ds_expected_zero(f)
    assert config.bfloat16_config.enabled == (f.dtype == "bf16")
    assert config.float16_config.enabled == (f.dtype == "fp16")
    if f.dtype == "fp16":
        assert config.float16_config.loss_scale == 0  # dynamic loss scaling
    ac = config.activation_checkpointing_config
    if f.recompute != "none":
        assert "activation_checkpointing" in ds and ac.partition_activations == (tp > 1)
        assert pipe["activation_checkpoint_interval"] == 1
    else:
        assert "activation_checkpointing" not in ds and pipe["activation_checkpoint_interval"] == 0


def _planned_pipeline_module():
    from deepspeed.pipe import PipelineModule

    class PlannedPipeline(PipelineModule):
        """PipelineModule cut at the exported `parts` (the recipe in planner/export/deepspeed.py)."""

        def __init__(self, parts, **kwargs):
            self.planned_parts = list(parts)
            super().__init__(**kwargs)

        def _partition_layers(self, method="uniform"):
            if method != "custom":  # DeepSpeed's own partitioning must give the plan's parts
                super()._partition_layers(method)
                assert list(self.parts) == self.planned_parts
                return
            self.parts = self.planned_parts
            self._set_bounds(start=self.parts[self.stage_id], stop=self.parts[self.stage_id + 1])

    return PlannedPipeline


@pytest.mark.parametrize("case", BF16_CASES)
def test_deepspeed_engine_starts_from_the_export(case, runnable_plan_file, ds_world):
    import torch
    from torch import nn

    path = runnable_plan_file(case, "deepspeed")
    f = facts(json.loads(path.read_text()))
    ds = json.loads(export(path, "deepspeed")[0])
    pipe = ds["planner_pipeline"]
    tp, pp, dp = pipe["tensor_parallel_size"], pipe["num_stages"], pipe["data_parallel_size"]
    world = tp * pp * dp
    accumulation = f.global_batch // (f.micro * dp)

    def optimizer(params):
        return torch.optim.AdamW(params, lr=1e-4)

    for prank in range(pp):
        with ds_world(world, rank=prank * dp * tp) as deepspeed:  # rank (pipe, data 0, model 0)
            from deepspeed.runtime.pipe.topology import PipeModelDataParallelTopology, PipelineParallelGrid

            topology = PipeModelDataParallelTopology(num_pp=pp, num_mp=tp, num_dp=dp)
            if pp > 1:
                from deepspeed.pipe import LayerSpec

                class TransformerLayer(nn.Linear):  # a decoder block, named as Megatron-DeepSpeed's are
                    pass

                # a plan of DeepSpeed's runtime splits the blocks evenly: DeepSpeed's own partitioning runs it
                assert pipe["partition_method"] == "type:transformer"

                kinds = [nn.Linear] + [TransformerLayer] * (f.n_layers - 2) + [nn.Linear]
                model = _planned_pipeline_module()(
                    pipe["parts"], layers=[LayerSpec(kind, 4, 4) for kind in kinds],
                    topology=topology, loss_fn=nn.MSELoss(), partition_method=pipe["partition_method"],
                    activation_checkpoint_interval=pipe["activation_checkpoint_interval"])
                assert (model.stage_id, model._local_start, model._local_stop) == \
                    (prank, f.parts[prank], f.parts[prank + 1])
                mpu = None
            else:
                model = nn.Sequential(*(nn.Linear(4, 4) for _ in range(f.n_layers)))
                mpu = PipelineParallelGrid(topology=topology)
            if prank > 0:
                continue  # the engine once (rank 0): the stages above are the per-rank part
            if "offload_optimizer" in ds["zero_optimization"]:
                # ZeRO-Offload: Megatron-DeepSpeed hands the engine DeepSpeedCPUAdam (--cpu-optimizer),
                # this harness torch's AdamW, which the engine refuses by default
                ds = dict(ds, zero_force_ds_cpu_optimizer=False)
            engine, _, _, _ = deepspeed.initialize(model=model, config=ds, mpu=mpu, optimizer=optimizer,
                                                   model_parameters=list(model.parameters()))
            assert type(engine).__name__ == ("PipelineEngine" if pp > 1 else "DeepSpeedEngine")
            assert engine.train_batch_size() == f.global_batch
            assert engine.train_micro_batch_size_per_gpu() == f.micro
            assert engine.gradient_accumulation_steps() == accumulation
            assert engine.dp_world_size == dp
            assert engine.zero_optimization_stage() == ds_expected_zero(f)
            assert engine.bfloat16_enabled()
            if pp > 1:
                assert engine.num_stages == pp and engine.micro_batches == accumulation
                assert engine.is_first_stage()


# --- torchtitan ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def titan():
    require("torchtitan", REQUIRE)
    from torchtitan.config import ConfigManager

    return ConfigManager


def flat(config, prefix: str = "") -> dict:
    out = {}
    for field in dataclasses.fields(config):
        value = getattr(config, field.name)
        if dataclasses.is_dataclass(value):
            out.update(flat(value, f"{prefix}{field.name}."))
        else:
            out[prefix + field.name] = value
    return out


def titan_configs(case, runnable_plan_file, titan, tmp_path):
    path = runnable_plan_file(case, "torchtitan")
    toml_text, warnings = export(path, "torchtitan")
    cli_text, cli_warnings = export(path, "torchtitan-cli")
    assert cli_warnings.replace("torchtitan-cli:", "torchtitan:") == warnings
    job = tmp_path / "job.toml"
    job.write_text(toml_text)
    from_toml = titan().parse_args(["--job.config_file", str(job)])
    from_cli = titan().parse_args(shlex.split(cli_text))
    return facts(json.loads(path.read_text())), from_toml, from_cli, warnings


@pytest.mark.parametrize("case", TITAN_CASES)
def test_torchtitan_config_manager_parses_to_the_plan(case, runnable_plan_file, titan, tmp_path):
    f, config, from_cli, warnings = titan_configs(case, runnable_plan_file, titan, tmp_path)
    a, b = flat(config), flat(from_cli)
    assert a.pop("job.config_file") and b.pop("job.config_file") is None
    assert a == b  # the TOML and the command-line overrides are one configuration

    assert (config.model.name, config.model.flavor) == ("llama3", TITAN_FLAVOR[f.name])
    t, p = config.training, config.parallelism
    assert (t.global_batch_size, t.seq_len) == (f.global_batch, f.seq_len)
    dp = p.data_parallel_replicate_degree * p.data_parallel_shard_degree
    check_layout(f, p.tensor_parallel_degree, p.pipeline_parallel_degree, dp, warnings)
    assert p.context_parallel_degree == 1 and p.expert_parallel_degree == 1
    if f.pp > 1:
        assert t.local_batch_size == f.global_batch // dp
        assert p.pipeline_parallel_microbatch_size == f.micro
        assert p.pipeline_parallel_schedule == TITAN_SCHEDULE[f.schedule]
        fqns = p.module_fqns_per_model_part
        assert len(fqns) == len(f.stage_layers)  # one model part per plan stage (chunk)
        for names, (first, end), decoders in zip(fqns, f.stage_layers, f.decoders):
            assert [n for n in names if n.startswith("layers.")] == \
                [f"layers.{i - 1}" for i in range(max(first, 1), min(end, f.n_layers - 1))]
            assert len(names) == decoders + (first == 0) + 2 * (end == f.n_layers)
        assert fqns[0][0] == "tok_embeddings" and fqns[-1][-2:] == ["norm", "output"]
        if f.uniform:
            assert t.local_batch_size // f.micro == f.num_microbatches
    else:
        assert t.local_batch_size == f.micro and p.module_fqns_per_model_part is None
        if f.uniform:
            assert f.global_batch // (t.local_batch_size * dp) == f.num_microbatches
    if f.zero == 0 and (dp == 1 or (f.tp == 1 and f.pp == 1)):  # DDP, or no DP at all
        assert (p.data_parallel_replicate_degree, p.data_parallel_shard_degree) == (dp, 1)
    else:
        assert p.data_parallel_replicate_degree == 1
        assert p.fsdp_reshard_after_forward == ("always" if f.zero == 3 else "never")
    assert config.activation_checkpoint.mode == f.recompute
    assert f.dtype != "fp16"  # torchtitan has none: its plans are bf16 or fp32
    assert t.mixed_precision_param == {"bf16": "bfloat16", "fp32": "float32"}[f.dtype]


# a pipeline part lacks the modules of the other parts, whose TP plan keys torchtitan then skips
@pytest.mark.filterwarnings("ignore:Parallelize plan key:UserWarning")
@pytest.mark.parametrize("case", TITAN_CASES)
def test_torchtitan_trainer_builds_the_plan(case, runnable_plan_file, titan, tmp_path, monkeypatch):
    """The trainer's steps up to the parallelized model, on every pipeline rank."""
    import torch

    import torchtitan.models.llama3.infra.parallelize as llama_parallelize
    from torchtitan.distributed import ParallelDims
    from torchtitan.protocols.train_spec import get_train_spec

    f, config, _, _ = titan_configs(case, runnable_plan_file, titan, tmp_path)
    calls = []
    monkeypatch.setattr(llama_parallelize, "apply_fsdp", lambda model, mesh, **kw: calls.append(
        ("fsdp", mesh.size(), kw["reshard_after_forward_policy"], kw["pp_enabled"])))
    monkeypatch.setattr(llama_parallelize, "apply_ddp", lambda model, mesh, **kw: calls.append(
        ("ddp", mesh.size())))

    p, t = config.parallelism, config.training
    pp = p.pipeline_parallel_degree
    dims = dict(dp_replicate=p.data_parallel_replicate_degree, dp_shard=p.data_parallel_shard_degree,
                cp=p.context_parallel_degree, tp=p.tensor_parallel_degree, pp=pp,
                ep=p.expert_parallel_degree, etp=p.expert_tensor_parallel_degree)
    dp = dims["dp_replicate"] * dims["dp_shard"]
    world = dp * dims["tp"] * pp
    spec = get_train_spec(config.model.name)
    model_args = copy.deepcopy(spec.model_args[config.model.flavor])
    model_args.update_from_config(config)
    assert model_args.n_layers == f.n_layers - 2
    stages_seen = []
    for prank in range(pp):
        with fake_world(world, rank=prank * (world // pp)):  # the mesh is [pp, dp, tp]: pp outermost
            dims_ = ParallelDims(**dims, world_size=world)
            dims_.build_mesh()
            batch_degree = dims_.get_mesh("batch").size() if dims_.dp_enabled else 1
            assert batch_degree == dp
            # Trainer.__init__: "global batch size must be multiple of local batch size times
            # data-parallel degree"
            assert t.global_batch_size % (t.local_batch_size * batch_degree) == 0
            accumulation = t.global_batch_size // (t.local_batch_size * batch_degree)
            assert accumulation * t.local_batch_size * dp == f.global_batch
            with torch.device("meta"):
                model = spec.model_cls(model_args)
            # torchtitan's model of the exported flavour is the planner's: the same parameter count
            assert sum(p.numel() for p in model.parameters()) == load_model(f.name).params
            loss_fn = spec.build_loss_fn(config, parallel_dims=dims_)
            if pp == 1:
                spec.parallelize_fn(model, dims_, config)
                continue
            assert accumulation == 1  # the pipeline schedule runs the micro-batches
            schedule, parts, has_first, has_last = spec.pipelining_fn(
                model, dims_, config, torch.device("meta"), model_args, spec.parallelize_fn, loss_fn)
            stages = getattr(schedule, "_stages", None) or [schedule._stage]
            assert schedule._n_microbatches == t.local_batch_size // p.pipeline_parallel_microbatch_size
            assert has_first == (prank == 0) and has_last == (prank == pp - 1)
            for stage, part in zip(stages, parts):
                i = stage.stage_index
                stages_seen.append(i)
                assert i % pp == prank  # looped schedules: rank r runs stages r, r + pp, ...
                assert len(part.layers) == f.decoders[i]
                assert (part.tok_embeddings is not None) == (i == 0)
                assert (part.output is not None) == (part.norm is not None) == (i == len(f.decoders) - 1)
    if pp > 1:
        assert sorted(stages_seen) == list(range(len(f.stage_layers)))
    # the data-parallel wrapper torchtitan chose, once per model part
    if dims["dp_shard"] > 1:
        assert {c[:3] for c in calls} == {("fsdp", dims["dp_shard"], p.fsdp_reshard_after_forward)}
    elif dims["dp_replicate"] > 1:
        assert set(calls) == {("ddp", dp)}
    else:
        assert calls == []
