"""`planner profile` on CPU with toy models (needs torch).

Each distinct layer is timed forward and backward for micro-batches 1, 2, 4 at seq-len 64;
the file must follow formats.md section 3 and load back with `load_model`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

if os.environ.get("PLANNER_REQUIRE_TORCH"):  # `make test` installs torch: a missing one is a failure
    import torch
else:
    torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.torch, pytest.mark.usefixtures("one_thread")]

from planner.inputs.model import DTYPE_BYTES, load_model  # noqa: E402

from .conftest import assert_bad_input, invoke  # noqa: E402

SEQ = 64
REPO = Path(__file__).resolve().parent.parent

TINY = {
    "llama": {"model_type": "llama", "hidden_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
              "num_key_value_heads": 2, "intermediate_size": 256, "vocab_size": 1000,
              "max_position_embeddings": 256},
    "gpt2": {"model_type": "gpt2", "n_embd": 128, "n_layer": 2, "n_head": 4, "n_positions": 128,
             "vocab_size": 1000},
    "mixtral": {"model_type": "mixtral", "hidden_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
                "num_key_value_heads": 2, "intermediate_size": 256, "vocab_size": 1000,
                "max_position_embeddings": 256, "num_local_experts": 4, "num_experts_per_tok": 2},
}
TOP_KEYS = {"format", "model", "dtype", "seq_len", "source", "device", "date", "layers"}
LAYER_KEYS = {"name", "kind", "params", "fwd_flops_per_sample", "act_bytes_per_sample",
              "out_bytes_per_sample", "measured"}
MEASURED_KEYS = {"micro_batch", "tp", "fwd_s", "bwd_s", "saved_bytes_per_sample", "by_tp"}


def tiny_config(tmp_path: Path, kind: str, **changes) -> Path:
    cfg = dict(TINY[kind], **changes)
    path = tmp_path / f"tiny-{kind}.json"
    path.write_text(json.dumps(cfg))
    return path


def profile(tmp_path: Path, kind: str, *extra: str, out: str = "profile.json", **changes):
    model = tiny_config(tmp_path, kind, **changes)
    out_path = tmp_path / out
    result = invoke("profile", "--model", model, "--seq-len", SEQ, "--micro-batch", "1,2,4",
                    "--repeats", 3, "-o", out_path, *extra)
    return model, out_path, result


@pytest.fixture(scope="module")
def llama_profile(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("llama")
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        # wide enough that a block's work, not per-call overhead, sets its time: the growth
        # with the micro-batch must show on a loaded 2-core machine too
        model, out, result = profile(tmp, "llama", hidden_size=512, intermediate_size=1024)
    finally:
        torch.set_num_threads(before)
    assert result.exit_code == 0, (result.output, result.stderr, result.exception)
    return model, json.loads(out.read_text())


# --- format ------------------------------------------------------------------------------------


def test_profile_file_follows_formats_md(llama_profile):
    model_path, data = llama_profile
    assert TOP_KEYS <= set(data)
    assert data["format"] == "planner.profile/v1"
    assert data["source"] == "measured"
    assert data["dtype"] == "fp32" and data["seq_len"] == SEQ
    assert isinstance(data["device"], str) and data["device"]
    assert len(data["date"]) == 10 and data["date"][4] == "-"
    model = load_model(str(model_path))
    assert [e["name"] for e in data["layers"]] == [la.name for la in model.layers]
    for entry, layer in zip(data["layers"], model.layers):
        assert LAYER_KEYS <= set(entry), entry.keys()
        assert entry["kind"] == layer.kind
        assert entry["params"] == layer.params
        assert entry["fwd_flops_per_sample"] == pytest.approx(layer.fwd_flops_per_sample(SEQ))
        assert entry["act_bytes_per_sample"] == pytest.approx(
            layer.act_bytes_per_sample(SEQ, recompute="none", tp=1, dtype_bytes=DTYPE_BYTES["fp32"]))
        assert entry["out_bytes_per_sample"] == pytest.approx(layer.out_bytes_per_sample(SEQ, 4))
        m = entry["measured"]
        assert MEASURED_KEYS <= set(m)
        assert m["micro_batch"] == [1, 2, 4] and m["tp"] == [1]
        for key in ("fwd_s", "bwd_s", "saved_bytes_per_sample"):
            assert len(m[key]) == 3
            assert m["by_tp"]["1"][key] == m[key]


def test_times_are_positive(llama_profile):
    _, data = llama_profile
    for entry in data["layers"]:
        m = entry["measured"]
        assert all(t > 0 for t in m["fwd_s"] + m["bwd_s"]), entry["name"]


class WorkClock:
    """An injected clock: a call takes 1 ns per element of its argument (the input forward,
    the output's gradient backward), and calls 0 and 1 of every 8 (the warm-up forward and
    backward) and call 4 (one timed forward) take 100 s more."""

    SPIKE_S = 100.0

    def __init__(self, torch_module, dev):
        self.cuda = False
        self.calls = 0

    def sync(self):
        pass

    def __call__(self, fn, *args):
        spike = self.SPIKE_S if self.calls % 8 in (0, 1, 4) else 0.0
        self.calls += 1
        return args[0].numel() * 1e-9 + spike, fn(*args)


def test_profile_keeps_the_median_of_the_timed_runs_per_micro_batch(tmp_path):
    from planner.calibrate.profile_inputs import ProfileOptions
    from planner.calibrate.profiler import profile_model

    model = load_model(str(tiny_config(tmp_path, "llama")))
    options = ProfileOptions(seq_len=SEQ, micro_batches=(1, 2, 4), warmup=1, repeats=3)
    data = profile_model(model, options, make_timer=WorkClock)
    hidden, vocab = TINY["llama"]["hidden_size"], TINY["llama"]["vocab_size"]
    per_sample = {"embedding": (SEQ, SEQ * hidden), "decoder": (SEQ * hidden, SEQ * hidden),
                  "head": (SEQ * hidden, SEQ * vocab)}
    for entry in data["layers"]:
        m = entry["measured"]
        fwd_elems, bwd_elems = per_sample[entry["kind"]]
        # the warm-up run and the one slow timed run are dropped; the rest grows with the batch
        assert m["fwd_s"] == pytest.approx([b * fwd_elems * 1e-9 for b in (1, 2, 4)]), entry["name"]
        assert m["bwd_s"] == pytest.approx([b * bwd_elems * 1e-9 for b in (1, 2, 4)]), entry["name"]


def test_every_block_carries_the_one_block_measurement(llama_profile):
    _, data = llama_profile
    blocks = [e for e in data["layers"] if e["kind"] == "decoder"]
    assert len(blocks) == 2
    assert blocks[0]["measured"] == blocks[1]["measured"]
    assert all(b > 0 for b in blocks[0]["measured"]["saved_bytes_per_sample"])


def test_profile_loads_back_as_a_model(llama_profile, tmp_path):
    _, data = llama_profile
    path = tmp_path / "again.json"
    path.write_text(json.dumps(data))
    model = load_model(str(path))
    assert model.source == "profile"
    assert model.num_layers == 4
    analytic = load_model(str(llama_profile[0]))
    assert model.params == analytic.params
    assert model.fwd_flops_per_sample(SEQ) == pytest.approx(analytic.fwd_flops_per_sample(SEQ))
    assert model.layers[1].fixed.measured["micro_batch"] == [1, 2, 4]


# --- options ------------------------------------------------------------------------------------


def test_json_prints_only_json_on_stdout(tmp_path):
    model = tiny_config(tmp_path, "gpt2")
    result = invoke("profile", "--model", model, "--seq-len", SEQ, "--micro-batch", "1",
                    "--warmup", 0, "--repeats", 1, "--json")
    assert result.exit_code == 0, (result.output, result.stderr)
    data = json.loads(result.stdout)
    assert data["format"] == "planner.profile/v1"
    assert [e["kind"] for e in data["layers"]] == ["embedding", "decoder", "decoder", "head"]


def test_gpt2_seq_len_defaults_to_its_learned_positions(tmp_path):
    model = tiny_config(tmp_path, "gpt2", n_positions=32)
    out = tmp_path / "p.json"
    result = invoke("profile", "--model", model, "--micro-batch", "1", "--warmup", 0, "--repeats", 1,
                    "-o", out)
    assert result.exit_code == 0, (result.output, result.stderr)
    data = json.loads(out.read_text())
    assert data["seq_len"] == 32
    assert "profile written to" in result.stdout
    assert load_model(str(out)).num_layers == 4


def test_several_tp_degrees_nest_per_tp_and_by_tp(tmp_path):
    _, out, result = profile(tmp_path, "mixtral", "--tp", "1,2")
    assert result.exit_code == 0, (result.output, result.stderr, result.exception)
    data = json.loads(out.read_text())
    for entry in data["layers"]:
        m = entry["measured"]
        assert m["tp"] == [1, 2]
        assert set(m["by_tp"]) == {"1", "2"}
        for key in ("fwd_s", "bwd_s", "saved_bytes_per_sample"):
            assert len(m[key]) == 2 and all(len(row) == 3 for row in m[key])
            assert m[key][1] == m["by_tp"]["2"][key]
        assert all(t > 0 for row in m["fwd_s"] + m["bwd_s"] for t in row)
    block = data["layers"][1]["measured"]["by_tp"]
    # the tp=2 shard saves fewer activation bytes than the whole block
    assert block["2"]["saved_bytes_per_sample"][0] < block["1"]["saved_bytes_per_sample"][0]
    assert load_model(str(out)).num_layers == 4


@pytest.mark.parametrize("args, needle", [
    (("--tp", "3"), "--tp"),
    (("--micro-batch", "one"), "--micro-batch"),
    (("--micro-batch", "0"), "--micro-batch"),
    (("--repeats", "0"), "--repeats"),
    (("--seq-len", "0"), "--seq-len"),
    (("--device", "tpu"), "--device"),
])
def test_bad_options_are_bad_input(tmp_path, args, needle):
    model = tiny_config(tmp_path, "llama")
    result = invoke("profile", "--model", model, *args, "--json")
    assert_bad_input(result, needle)


def test_seq_len_beyond_learned_positions_is_bad_input(tmp_path):
    model = tiny_config(tmp_path, "gpt2", n_positions=32)
    assert_bad_input(invoke("profile", "--model", model, "--seq-len", 64, "--json"), "--seq-len")


def test_a_layer_profile_is_not_a_model_to_profile(tmp_path, llama_profile):
    path = tmp_path / "p.json"
    path.write_text(json.dumps(llama_profile[1]))
    assert_bad_input(invoke("profile", "--model", path, "--json"), "--model")


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_cuda_without_a_gpu_is_bad_input(tmp_path):
    model = tiny_config(tmp_path, "llama")
    assert_bad_input(invoke("profile", "--model", model, "--device", "cuda", "--json"), "--device")


def test_a_layer_too_big_names_the_layer_and_exits_1(tmp_path, monkeypatch):
    import planner.calibrate.torch_layers as tl

    real = tl.build_layer

    def build(config, kind, *args, **kwargs):
        if kind == "head":
            raise RuntimeError("CUDA out of memory. Tried to allocate 20.00 GiB")
        return real(config, kind, *args, **kwargs)

    monkeypatch.setattr(tl, "build_layer", build)
    model = tiny_config(tmp_path, "llama")
    out = tmp_path / "p.json"
    result = invoke("profile", "--model", model, "--seq-len", SEQ, "--micro-batch", "1",
                    "--warmup", 0, "--repeats", 1, "-o", out)
    assert result.exit_code == 1, (result.output, result.stderr)
    assert "head" in result.stderr and "does not fit" in result.stderr
    assert result.stdout == ""
    assert not out.exists()


def test_without_torch_exit_2_with_an_install_hint(tmp_path):
    model = tiny_config(tmp_path, "llama")
    code = ("import sys; sys.modules['torch'] = None\n"
            "import planner.cli\n"
            f"planner.cli.main(['profile', '--model', {str(model)!r}, '-o', {str(tmp_path / 'p.json')!r}])\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "pip install 'planner[profile]'" in lines[0] and "torch==2.13.0" in lines[0]
    assert "Traceback" not in proc.stderr
    assert proc.stdout == ""
    assert not (tmp_path / "p.json").exists()


def test_cli_imports_without_torch():
    code = ("import sys; sys.modules['torch'] = None\n"
            "import planner.cli, planner.calibrate.profiler\n"
            "print('ok')\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr
