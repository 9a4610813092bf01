"""The reference runtime (`planner run`, planner.runner) trains every plan exactly like one
process: per-step losses and final parameters of multi-rank plans (uneven shares, stage DP,
per-stage TP, recompute, ZeRO-1, interleaving) equal a one-rank run on the same data within
1e-5 relative (each layer's parameters as one vector: a tensor whose true gradient is zero,
such as an attention key bias, moves by AdamW-normalised rounding noise alone). CPU, gloo, fp32, tiny llama and gpt2 (4 blocks, hidden 32, seq 16, 2 steps).

Each multi-rank plan runs as forked processes (torch imported once, in this process) meeting
through a file store; rank 0 writes the step records and every rank its whole layers.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
import traceback
from pathlib import Path

import pytest

from planner.inputs.hardware import cluster_from_spec
from planner.inputs.model import model_from_dict
from planner.plan import Plan, Replica, Stage, Training, plan_to_json, uniform_plan

from .conftest import assert_bad_input, invoke, require, small_cluster_spec

torch = require("torch", "PLANNER_REQUIRE_TORCH")
pytestmark = [pytest.mark.torch, pytest.mark.usefixtures("one_thread")]

import torch._dynamo  # noqa: E402,F401  torch.utils.checkpoint's first call imports it: once here, not per rank
from planner.runner import engine  # noqa: E402  (imported before the forks: every rank inherits it)
from planner.runner import layers  # noqa: E402
from planner.runner.launch import Launch, RunOptions, run_plan  # noqa: E402

REPO = Path(__file__).resolve().parent.parent

LLAMA = {"model_type": "llama", "hidden_size": 32, "num_attention_heads": 4, "num_key_value_heads": 2,
         "intermediate_size": 64, "num_hidden_layers": 4, "vocab_size": 64, "max_position_embeddings": 64}
GPT2 = {"model_type": "gpt2", "n_embd": 32, "n_head": 4, "n_layer": 4, "vocab_size": 64, "n_positions": 64,
        "n_inner": 256, "resid_pdrop": 0.0, "attn_pdrop": 0.0, "embd_pdrop": 0.0}  # (FFN: 4 units of 64 columns)
MODELS = {"llama": model_from_dict(LLAMA, "tiny-llama"), "gpt2": model_from_dict(GPT2, "tiny-gpt2")}
CLUSTER = cluster_from_spec(small_cluster_spec(gpus_per_node=8))
# runtime any: the reference runtime (planner run) executes per-stage freedom (uneven shares, per-stage tp)
TRAINING = Training(global_batch=8, seq_len=16, dtype="fp32", micro_batch=2, runtime="any")
STEPS = 2
REL = 1e-5


def stage(index: int, layers: tuple[int, int], shares: list[tuple[int, list[int]]], tp: int = 1, zero: int = 0,
          recompute: str = "none") -> Stage:
    replicas = tuple(Replica(d, share, tuple(ranks)) for d, (share, ranks) in enumerate(shares))
    return Stage(index, layers, tp, zero, recompute, replicas, index)


def hand_plan(model: str, *stages: Stage) -> Plan:
    return Plan(MODELS[model], CLUSTER, TRAINING, stages)


def _worker(plan: Plan, rank: int, world: int, out: str) -> None:
    torch.set_num_threads(1)
    try:
        options = RunOptions(steps=STEPS, seed=7, save_dir=out, timeout_s=60)
        records = list(run_plan(plan, options, 0.0, Launch(rank, world, f"file://{out}/store")))
        if rank == 0:
            Path(out, "records.json").write_text(json.dumps(records))
    except BaseException:
        Path(out, f"error{rank}.txt").write_text(traceback.format_exc())
        os._exit(1)
    os._exit(0)


def run(plan: Plan, out: Path) -> tuple[list[float], list[dict]]:
    """Each rank of `plan` as a forked process: (losses per step, every rank's saved layers)."""
    out.mkdir()
    world = len(plan.used_ranks())
    context = multiprocessing.get_context("fork")
    procs = [context.Process(target=_worker, args=(plan, r, world, str(out))) for r in range(world)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(90)
    for p in procs:
        if p.is_alive():
            p.kill()
    errors = [f.read_text() for f in sorted(out.glob("error*.txt"))]
    assert not errors and all(p.exitcode == 0 for p in procs), "\n".join(errors) or [p.exitcode for p in procs]
    records = json.loads((out / "records.json").read_text())
    assert [r["step"] for r in records] == list(range(1, STEPS + 1))
    saved = [torch.load(out / f"rank{r}.pt") for r in range(world)]
    return [r["loss"] for r in records], saved


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The one-rank run of each model: losses and layers."""
    out = {}
    for name in MODELS:
        losses, saved = run(hand_plan(name, stage(0, (0, 6), [(8, [0])])), tmp_path_factory.mktemp(name) / "run")
        out[name] = losses, saved[0]["layers"]
    return out


def flat(state: dict) -> "torch.Tensor":
    return torch.cat([state[k].reshape(-1) for k in sorted(state)])


def assert_same_training(reference, model: str, plan: Plan, out: Path) -> None:
    ref_losses, ref_layers = reference[model]
    losses, saved = run(plan, out)
    assert losses == pytest.approx(ref_losses, rel=REL)
    covered = set()
    for rank_file in saved:  # every rank's copy of every layer it holds
        for index, state in rank_file["layers"].items():
            covered.add(index)
            assert state.keys() == ref_layers[index].keys()
            assert all(state[k].shape == v.shape for k, v in ref_layers[index].items()), index
            got, expected = flat(state), flat(ref_layers[index])
            error = float((got - expected).norm() / expected.norm())
            assert error <= REL, f"layer {index}: relative error {error:.2e}"
    assert covered == set(ref_layers)
    # and training moved the parameters (a run that trains nothing would also "agree")
    assert losses[1] != losses[0]


CASES = {
    # one stage, two replicas taking 3:1 of the batch (3 and 1 micro-batches)
    "uneven_shares_3_1": lambda: hand_plan("llama", stage(0, (0, 6), [(6, [0]), (2, [1])])),
    # DP 2 (shares 3:1) -> DP 1 -> DP 2 (shares 1:3): micro-batches cross replicas both ways
    "stage_dp_2_1_2_unequal": lambda: hand_plan(
        "llama", stage(0, (0, 2), [(6, [0]), (2, [1])]), stage(1, (2, 4), [(8, [2])]),
        stage(2, (4, 6), [(2, [3]), (6, [4])])),
    # TP 2 then TP 1 (GPT-2's fused QKV cut per head group)
    "per_stage_tp_2_1": lambda: hand_plan("gpt2", stage(0, (0, 3), [(8, [0, 1])], tp=2),
                                          stage(1, (3, 6), [(8, [2])])),
    "gpipe_stage_dp_2_1": lambda: Plan(MODELS["llama"], CLUSTER, Training(8, 16, "fp32", 2, schedule="gpipe"), (
        stage(0, (0, 3), [(2, [0]), (6, [1])]), stage(1, (3, 6), [(8, [2])]))),
    "recompute_full_and_selective": lambda: hand_plan("gpt2", stage(0, (0, 3), [(8, [0])], recompute="full"),
                                                      stage(1, (3, 6), [(8, [1])], recompute="selective")),
    # ZeRO-1 over unequal replicas (the flat vector does not divide evenly: padding)
    "zero1_unequal_shares": lambda: hand_plan("llama", stage(0, (0, 6), [(2, [0]), (6, [1])], zero=1)),
    "interleaved_v2": lambda: uniform_plan(
        MODELS["gpt2"], cluster_from_spec(small_cluster_spec(gpus_per_node=2)),
        Training(8, 16, "fp32", 2, schedule="interleaved", virtual_stages=2), tp=1, pp=2, dp=1),
    # per-replica TP (Replica.tp): a TP-2 replica beside a TP-1 one in one stage (3:1 of the batch), then a
    # stage whose micro-batches come from either; and a uniform stage feeding a mixed one
    "per_replica_tp_2_and_1": lambda: hand_plan(
        "gpt2", Stage(0, (0, 3), 2, 0, "none", (Replica(0, 6, (0, 1)), Replica(1, 2, (2,), tp=1)), 0),
        stage(1, (3, 6), [(8, [3])])),
    "uniform_then_per_replica_tp": lambda: hand_plan(
        "llama", stage(0, (0, 3), [(8, [0])]),
        Stage(1, (3, 6), 1, 0, "none", (Replica(0, 2, (1, 2), tp=2), Replica(1, 6, (3,))), 1)),
    # uneven TP shards (Stage.tp_heads, tp_ffn: HAP): TP position 0 holds 3 of the 4 heads and 192 of the 256
    # FFN columns, position 1 the rest, in two replicas (3:1 of the batch) with ZeRO-1; then TP 1
    "uneven_tp_3_1_dp2_zero1": lambda: hand_plan(
        "gpt2", Stage(0, (0, 3), 2, 1, "none", (Replica(0, 6, (0, 1)), Replica(1, 2, (2, 3))), 0,
                      tp_heads=(3, 1), tp_ffn=(192, 64)),
        stage(1, (3, 6), [(8, [4])])),
    # ... as the search places TP groups across the types of a mixed node: each group a rank of either
    # half of the node, (0, 2) and (1, 3)
    "uneven_tp_across_halves": lambda: hand_plan(
        "gpt2", Stage(0, (0, 3), 2, 0, "none", (Replica(0, 4, (0, 2)), Replica(1, 4, (1, 3))), 0,
                      tp_heads=(3, 1), tp_ffn=(192, 64)),
        stage(1, (3, 6), [(8, [4])])),
    # everything at once on llama: TP 2 x DP 2 (3:1) with ZeRO-1 and full recompute, then TP 1
    "tp2_dp2_zero1_recompute_then_tp1": lambda: hand_plan(
        "llama", stage(0, (0, 3), [(6, [0, 1]), (2, [2, 3])], tp=2, zero=1, recompute="full"),
        stage(1, (3, 6), [(8, [4])])),
}


@pytest.mark.parametrize("case", list(CASES))
def test_multi_rank_plan_trains_like_one_process(case, reference, tmp_path):
    plan = CASES[case]()
    model = "llama" if plan.model.config.model_type == "llama" else "gpt2"
    assert_same_training(reference, model, plan, tmp_path / "run")


# --- the pieces --------------------------------------------------------------------------------


@pytest.mark.parametrize("model", ["llama", "gpt2"])
def test_tp_shards_put_back_together_are_the_whole_layer(model):
    config = MODELS[model].config
    full = layers.init_full(config, 1, seed=3)
    shards = [layers.shard_state(full, config, 2, r) for r in range(2)]
    name = "attn.qkv.weight" if model == "gpt2" else "attn.k_proj.weight"
    assert shards[0][name].shape[0] * 2 == full[name].shape[0]
    if model == "gpt2":  # each shard holds its heads' rows of q, of k and of v
        d = config.head_dim
        q_rows = config.num_heads * d
        assert torch.equal(shards[1]["attn.qkv.weight"][:q_rows // 2], full["attn.qkv.weight"][q_rows // 2:q_rows])
    whole = layers.full_state(shards, config)
    assert whole.keys() == full.keys() and all(torch.equal(whole[k], full[k]) for k in full)


@pytest.mark.parametrize("model, heads, ffn", [("gpt2", (3, 1), (192, 64)), ("llama", (2, 2), (64, 0))])
def test_uneven_tp_shards_hold_their_heads_and_columns_and_put_back_together(model, heads, ffn):
    config = MODELS[model].config
    split = layers.TPSplit.of(config, 2, heads, ffn if all(ffn) else ())
    full = layers.init_full(config, 1, seed=3)
    shards = [layers.shard_state(full, config, 2, r, split) for r in range(2)]
    d = config.head_dim
    if model == "gpt2":  # rank 0: 3 heads' rows of q, k and v each, and 192 FFN columns
        assert shards[0]["attn.qkv.weight"].shape[0] == 3 * 3 * d and shards[1]["attn.qkv.weight"].shape[0] == 3 * d
        assert shards[0]["mlp.down.weight"].shape[1] == 192 and shards[1]["mlp.up.weight"].shape[0] == 64
        assert torch.equal(shards[1]["attn.qkv.weight"][:d], full["attn.qkv.weight"][3 * d:4 * d])
    shapes = layers.shard_shapes(config, 1, 2, split)
    assert [{k: v.shape for k, v in shard.items()} for shard in shards] == shapes
    whole = layers.full_state(shards, config, split)
    assert whole.keys() == full.keys() and all(torch.equal(whole[k], full[k]) for k in full)


def test_initial_weights_do_not_depend_on_the_plan():
    config = MODELS["llama"].config
    a = layers.Chunk(config, (0, 3), layers.TPGroup(), 0, seed=5, recompute="none", device=torch.device("cpu"))
    b = layers.Chunk(config, (2, 4), layers.TPGroup(), 0, seed=5, recompute="full", device=torch.device("cpu"))
    assert all(torch.equal(x, y) for x, y in zip(a.layers[2].parameters(), b.layers[0].parameters()))


@pytest.mark.parametrize("recompute, block_calls, attention_calls", [
    ("none", 2, 2), ("selective", 2, 4), ("full", 4, 4)])
def test_recompute_runs_the_forward_again_in_the_backward(recompute, block_calls, attention_calls, monkeypatch):
    config = MODELS["gpt2"].config
    calls = {"block": 0, "attention": 0}
    real = layers.causal_attention

    def counted(*args):
        calls["attention"] += 1
        return real(*args)

    block_forward = layers.Block.forward

    def counted_block(self, x):
        calls["block"] += 1
        return block_forward(self, x)

    monkeypatch.setattr(layers, "causal_attention", counted)
    monkeypatch.setattr(layers.Block, "forward", counted_block)
    chunk = layers.Chunk(config, (1, 3), layers.TPGroup(), 0, seed=0, recompute=recompute, device=torch.device("cpu"))
    x = torch.randn(2, 8, config.hidden, requires_grad=True)
    chunk(x).sum().backward()
    assert calls == {"block": block_calls, "attention": attention_calls}


def test_adamw_update_is_torchs_adamw():
    settings = engine.AdamWSettings(lr=1e-2, weight_decay=0.1)
    start = torch.randn(50, generator=torch.Generator().manual_seed(0))
    mine, theirs = start.clone(), torch.nn.Parameter(start.clone())
    optimizer = torch.optim.AdamW([theirs], lr=settings.lr, betas=settings.betas, eps=settings.eps,
                                  weight_decay=settings.weight_decay)
    m, v = torch.zeros(50), torch.zeros(50)
    for step in range(1, 4):
        grad = torch.randn(50, generator=torch.Generator().manual_seed(step))
        engine.adamw_update(mine, grad, m, v, step, settings)
        theirs.grad = grad.clone()
        optimizer.step()
    torch.testing.assert_close(mine, theirs.detach(), rtol=1e-6, atol=1e-7)


def test_zero1_keeps_optimizer_state_for_its_piece_only():
    params = [torch.nn.Parameter(torch.zeros(7)), torch.nn.Parameter(torch.zeros(2, 3))]  # 13 numbers
    pieces = [engine.ShardedAdamW(params, None, i, 2, True, engine.AdamWSettings()) for i in range(2)]
    assert [(p.lo, p.hi, p.exp_avg.numel()) for p in pieces] == [(0, 7, 7), (7, 13, 6)]
    whole = engine.ShardedAdamW(params, None, 1, 2, False, engine.AdamWSettings())
    assert (whole.lo, whole.hi) == (0, 13)


# --- the command -------------------------------------------------------------------------------


def write_plan(plan: Plan, path: Path) -> Path:
    path.write_text(json.dumps(plan_to_json(plan)))
    return path


def test_run_trains_a_one_rank_plan_without_torchrun(reference, tmp_path):
    plan = write_plan(hand_plan("llama", stage(0, (0, 6), [(8, [0])])), tmp_path / "plan.json")
    log = tmp_path / "log.jsonl"
    result = invoke("run", plan, "--steps", str(STEPS), "--seed", "7", "--log", log)
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in result.stdout.splitlines()]
    assert [r["loss"] for r in records] == pytest.approx(reference["llama"][0], rel=REL)
    assert all(r["step_time_s"] > 0 and r["predicted_step_time_s"] > 0 for r in records)
    assert log.read_text() == result.stdout


def test_run_refuses_what_it_cannot_run(tmp_path):
    two = write_plan(CASES["uneven_shares_3_1"](), tmp_path / "two.json")
    assert_bad_input(invoke("run", two), "runs on 2 ranks", "--nproc_per_node=2")
    one = write_plan(hand_plan("llama", stage(0, (0, 6), [(8, [0])])), tmp_path / "one.json")
    assert_bad_input(invoke("run", one, "--data", tmp_path / "none.bin"), "no such token file")
    tokens = tmp_path / "tokens.bin"
    tokens.write_bytes(bytes(range(200)) * 2)  # ids up to 51455 > vocab 64
    assert_bad_input(invoke("run", one, "--data", tokens), "outside the model's vocabulary of 64")
    assert_bad_input(invoke("run", one, "--save-params", tmp_path / "missing"), "no such folder")


@pytest.mark.slow
def test_torchrun_runs_a_plan_with_uneven_shares(reference, tmp_path):
    plan = write_plan(CASES["uneven_shares_3_1"](), tmp_path / "plan.json")
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                           "-m", "planner.cli", "run", str(plan), "--steps", str(STEPS), "--seed", "7"],
                          capture_output=True, text=True, env=env, timeout=180, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    records = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert [r["loss"] for r in records] == pytest.approx(reference["llama"][0], rel=REL)
