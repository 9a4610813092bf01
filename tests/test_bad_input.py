"""Bad input (issue "Core", item 9): one line on stderr naming the file (or flag) and the
field, exit 2, never a traceback, never a hang."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planner.core import io
from planner.core.errors import BadInput
from planner.cost.evaluate import evaluate
from planner.inputs.hardware import cluster_from_spec
from planner.plan import Training, plan_from_json, plan_to_json, uniform_plan
from planner.verify.plan_checks import check_plan_data

from .conftest import (SMALL_CLUSTER_YAML, assert_bad_input, evaluate_args, hf_config, invoke,
                       small_cluster_spec)


def write(tmp_path: Path, name: str, content: str | bytes) -> Path:
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    return path


def cluster_yaml(**group_fields) -> str:
    """The small cluster as YAML with node_groups[0] fields replaced (None removes one)."""
    spec = small_cluster_spec()
    group = spec["node_groups"][0]
    for key, value in group_fields.items():
        if value is None:
            group.pop(key, None)
        else:
            group[key] = value
    return json.dumps(spec)  # JSON is YAML


def run_with_cluster(tmp_path: Path, text: str | bytes, name: str = "cluster.yaml", **kwargs):
    path = write(tmp_path, name, text)
    return path, invoke(*evaluate_args(cluster=str(path), **kwargs))


def run_with_model(tmp_path: Path, small_cluster_file: Path, config: dict | str | bytes,
                   name: str = "config.json", **kwargs):
    content = json.dumps(config) if isinstance(config, dict) else config
    path = write(tmp_path, name, content)
    return path, invoke(*evaluate_args(model=str(path), cluster=str(small_cluster_file), **kwargs))


# --- malformed files ----------------------------------------------------------------------


def test_malformed_yaml_cluster_names_file_and_line(tmp_path):
    path, result = run_with_cluster(tmp_path, "node_groups:\n  - name: a\n   gpu: [unclosed\n")
    assert_bad_input(result, path.name, "invalid YAML", "line")


def test_malformed_json_cluster_names_file_and_line(tmp_path):
    path, result = run_with_cluster(tmp_path, '{"node_groups": [}', name="cluster.json")
    assert_bad_input(result, path.name, "invalid JSON", "line 1")


def test_malformed_json_model_config_names_file_and_line(tmp_path, small_cluster_file):
    path, result = run_with_model(tmp_path, small_cluster_file, '{"model_type": "gpt2",\n "n_embd": }')
    assert_bad_input(result, path.name, "invalid JSON", "line 2")


def test_yaml_with_python_tag_is_refused_by_safe_loader(tmp_path):
    path, result = run_with_cluster(tmp_path, "node_groups: !!python/object/apply:os.system ['true']\n")
    assert_bad_input(result, path.name, "invalid YAML")


def test_cluster_file_holding_a_list_is_bad_input(tmp_path):
    path, result = run_with_cluster(tmp_path, "- a\n- b\n")
    assert_bad_input(result, path.name, "mapping")


def test_json_integer_beyond_python_digit_limit_is_bad_input(tmp_path, small_cluster_file):
    text = '{"model_type": "gpt2", "n_embd": ' + "7" * 5000 + "}"
    path, result = run_with_model(tmp_path, small_cluster_file, text)
    assert_bad_input(result, path.name, "invalid JSON")


def test_yaml_integer_beyond_python_digit_limit_is_bad_input(tmp_path):
    path, result = run_with_cluster(tmp_path, SMALL_CLUSTER_YAML.replace("nodes: 1", "nodes: " + "7" * 5000))
    assert_bad_input(result, path.name, "invalid YAML")


def test_deeply_nested_json_is_bad_input(tmp_path, small_cluster_file):
    path, result = run_with_model(tmp_path, small_cluster_file, "[" * 100_000 + "]" * 100_000)
    assert_bad_input(result, path.name, "nested too deeply")


def test_deeply_nested_yaml_is_bad_input(tmp_path):
    path, result = run_with_cluster(tmp_path, "node_groups: " + "[" * 20_000 + "]" * 20_000 + "\n")
    assert_bad_input(result, path.name)


# --- unknown names ------------------------------------------------------------------------


def test_unknown_gpu_names_the_gpu_field(tmp_path):
    path, result = run_with_cluster(tmp_path, cluster_yaml(gpu="Z100-SXM9"))
    assert_bad_input(result, path.name, "node_groups[0].gpu", "Z100-SXM9")


def test_unknown_model_type_names_model_type(tmp_path, small_cluster_file):
    config = hf_config("llama-3-8b") | {"model_type": "bert"}
    path, result = run_with_model(tmp_path, small_cluster_file, config)
    assert_bad_input(result, path.name, "model_type", "bert")


def test_unknown_catalog_model_name_is_bad_input(small_cluster_file):
    result = invoke(*evaluate_args(model="no-such-model-7b", cluster=str(small_cluster_file)))
    assert_bad_input(result, "no-such-model-7b", "not found")


def test_unknown_cluster_name_is_bad_input():
    result = invoke(*evaluate_args(cluster="no-such-cluster"))
    assert_bad_input(result, "no-such-cluster", "not found")


def test_unknown_link_group_names_links_between(tmp_path):
    spec = small_cluster_spec()
    spec["links"] = [{"between": ["g", "elsewhere"], "bandwidth_GBps": 1}]
    path, result = run_with_cluster(tmp_path, json.dumps(spec))
    assert_bad_input(result, path.name, "links[0].between", "elsewhere")


def test_unknown_dtype_in_custom_gpu_names_peak_tflops(tmp_path):
    spec = small_cluster_spec(gpu="MyCard")
    spec["gpus"] = {"MyCard": {"memory_GiB": 24, "peak_tflops": {"int8": 100, 1: 2}, "hbm_GBps": 900}}
    path, result = run_with_cluster(tmp_path, json.dumps(spec))
    assert_bad_input(result, path.name, "gpus.MyCard.peak_tflops")


# --- missing fields -----------------------------------------------------------------------


def test_missing_node_count_names_node_groups_0_nodes(tmp_path):
    path, result = run_with_cluster(tmp_path, cluster_yaml(nodes=None))
    assert_bad_input(result, path.name, "node_groups[0].nodes", "missing")


def test_missing_node_groups_is_bad_input(tmp_path):
    path, result = run_with_cluster(tmp_path, "name: empty\n")
    assert_bad_input(result, path.name, "node_groups")


def test_model_config_missing_hidden_size_names_hidden_size(tmp_path, small_cluster_file):
    config = hf_config("llama-3-8b")
    del config["hidden_size"]
    path, result = run_with_model(tmp_path, small_cluster_file, config)
    assert_bad_input(result, path.name, "hidden_size", "missing")


@pytest.mark.parametrize("key", ["n_embd", "n_layer", "n_head", "vocab_size"])
def test_gpt2_config_missing_dimension_names_it(tmp_path, small_cluster_file, key):
    config = hf_config("gpt2")
    del config[key]
    path, result = run_with_model(tmp_path, small_cluster_file, config)
    assert_bad_input(result, path.name, key)


def test_model_config_missing_model_type_names_model_type(tmp_path, small_cluster_file):
    config = hf_config("llama-3-8b")
    del config["model_type"]
    path, result = run_with_model(tmp_path, small_cluster_file, config)
    assert_bad_input(result, path.name, "model_type")


def test_missing_required_flag_names_the_flag(small_cluster_file):
    args = evaluate_args(cluster=str(small_cluster_file))
    i = args.index("--micro-batch")
    del args[i:i + 2]
    assert_bad_input(invoke(*args), "--micro-batch", "required")


# --- zero, negative and absurd values ------------------------------------------------------


@pytest.mark.parametrize("field,value", [("nodes", 0), ("nodes", -2), ("gpus_per_node", 0),
                                         ("gpus_per_node", -8), ("nodes", 1.5), ("nodes", "two"),
                                         ("nodes", 10**18)])
def test_bad_node_group_count_names_the_field(tmp_path, field, value):
    path, result = run_with_cluster(tmp_path, cluster_yaml(**{field: value}))
    assert_bad_input(result, path.name, f"node_groups[0].{field}")


@pytest.mark.parametrize("link,key,value", [("intra_node", "bandwidth_GBps", 0),
                                            ("inter_node", "bandwidth_GBps", -1),
                                            ("intra_node", "latency_us", -3),
                                            ("inter_node", "latency_us", "fast")])
def test_bad_link_figure_names_the_field(tmp_path, link, key, value):
    spec = small_cluster_spec()
    spec["node_groups"][0][link][key] = value
    path, result = run_with_cluster(tmp_path, json.dumps(spec))
    assert_bad_input(result, path.name, f"node_groups[0].{link}.{key}")


def test_nan_in_json_cluster_is_bad_input(tmp_path):
    text = cluster_yaml().replace('"bandwidth_GBps": 300', '"bandwidth_GBps": NaN')
    path, result = run_with_cluster(tmp_path, text, name="cluster.json")
    assert_bad_input(result, path.name, "node_groups[0].intra_node.bandwidth_GBps", "finite")


def test_negative_custom_gpu_memory_names_the_field(tmp_path):
    spec = small_cluster_spec(gpu="MyCard")
    spec["gpus"] = {"MyCard": {"memory_GiB": -24, "peak_tflops": {"bf16": 100}, "hbm_GBps": 900}}
    path, result = run_with_cluster(tmp_path, json.dumps(spec))
    assert_bad_input(result, path.name, "gpus.MyCard.memory_GiB")


@pytest.mark.parametrize("key,value", [("hidden_size", 0), ("num_hidden_layers", -1),
                                       ("num_attention_heads", 0), ("vocab_size", -32000),
                                       ("intermediate_size", 2.5), ("hidden_size", "4096"),
                                       ("num_key_value_heads", 0), ("hidden_size", 10**20)])
def test_zero_negative_or_mistyped_model_dimension_names_it(tmp_path, small_cluster_file, key, value):
    config = hf_config("llama-3-8b") | {key: value}
    path, result = run_with_model(tmp_path, small_cluster_file, config)
    assert_bad_input(result, path.name, key)


@pytest.mark.parametrize("key,value", [("resid_pdrop", "0.1"), ("attn_pdrop", 2),
                                       ("tie_word_embeddings", "false")])
def test_mistyped_gpt2_option_names_it(tmp_path, small_cluster_file, key, value):
    config = hf_config("gpt2") | {key: value}
    path, result = run_with_model(tmp_path, small_cluster_file, config)
    assert_bad_input(result, path.name, key)


def test_heads_not_dividing_hidden_is_bad_input(tmp_path, small_cluster_file):
    config = hf_config("llama-3-8b") | {"num_attention_heads": 30}
    path, result = run_with_model(tmp_path, small_cluster_file, config)
    assert_bad_input(result, path.name, "num_attention_heads")


@pytest.mark.parametrize("flag", ["--global-batch", "--seq-len", "--tp", "--pp", "--dp", "--micro-batch"])
@pytest.mark.parametrize("value", [0, -4, 10**400])
def test_zero_negative_or_huge_flag_names_the_flag(small_cluster_file, flag, value):
    args = evaluate_args(cluster=str(small_cluster_file))
    args[args.index(flag) + 1] = str(value)
    assert_bad_input(invoke(*args), flag)


def test_bad_layer_profile_entry_names_the_layer_field(tmp_path, small_cluster_file):
    profile = {"format": "planner.profile/v1", "model": "tiny", "seq_len": 512,
               "layers": [{"name": "embed", "kind": "embedding", "params": 10,
                           "fwd_flops_per_sample": 0, "act_bytes_per_sample": 1, "out_bytes_per_sample": 1},
                          {"name": "block", "kind": "decoder", "params": 10,
                           "fwd_flops_per_sample": -5, "act_bytes_per_sample": 1, "out_bytes_per_sample": 1}]}
    path, result = run_with_model(tmp_path, small_cluster_file, profile, name="profile.json")
    assert_bad_input(result, path.name, "layers[1].fwd_flops_per_sample")


# --- impossible configurations -------------------------------------------------------------


def test_tp_pp_dp_not_equal_to_gpu_count_names_the_flags(small_cluster_file):
    result = invoke(*evaluate_args(cluster=str(small_cluster_file), tp=2, pp=1, dp=1, global_batch=4))
    assert_bad_input(result, "--tp/--pp/--dp", "4 GPUs")


def test_micro_batch_not_dividing_replica_batch_names_micro_batch(small_cluster_file):
    result = invoke(*evaluate_args(cluster=str(small_cluster_file), global_batch=12, micro_batch=2))
    assert_bad_input(result, "--micro-batch", "replica's batch of 3")


def test_global_batch_not_dividing_over_dp_names_global_batch(small_cluster_file):
    result = invoke(*evaluate_args(cluster=str(small_cluster_file), global_batch=6))
    assert_bad_input(result, "--global-batch")


def test_tp_not_dividing_heads_names_tp(tmp_path):
    path = write(tmp_path, "c.yaml", json.dumps(small_cluster_spec(gpus_per_node=5)))
    result = invoke(*evaluate_args(cluster=str(path), tp=5, dp=1, global_batch=4))
    assert_bad_input(result, "--tp", "heads")


def test_more_pipeline_stages_than_layers_names_pp(tmp_path, small_cluster_file):
    # one decoder layer: with the embedding and the head as chunks of their own, 3 stages at most
    config = hf_config("gpt2") | {"n_layer": 1}
    path, result = run_with_model(tmp_path, small_cluster_file, config, pp=4, dp=1, global_batch=4)
    assert_bad_input(result, "--pp")


def test_seq_len_beyond_learned_positions_names_seq_len(small_cluster_file):
    result = invoke(*evaluate_args(cluster=str(small_cluster_file), seq_len=4096))
    assert_bad_input(result, "--seq-len", "1024")


def test_cluster_over_a_million_gpus_is_bad_input(tmp_path):
    path, result = run_with_cluster(tmp_path, cluster_yaml(nodes=131_073, gpus_per_node=8))
    assert_bad_input(result, path.name, "1048576")


# --- files that are not text, not there or too big ------------------------------------------


def test_binary_file_is_bad_input(tmp_path):
    path, result = run_with_cluster(tmp_path, bytes(range(256)) * 4, name="cluster.bin")
    assert_bad_input(result, path.name, "binary")


def test_non_utf8_file_is_bad_input(tmp_path):
    path, result = run_with_cluster(tmp_path, "name: caf\xe9\n".encode("latin-1"))
    assert_bad_input(result, path.name, "UTF-8")


@pytest.mark.parametrize("content", ["", "   \n\n\t\n"])
def test_empty_file_is_bad_input(tmp_path, content):
    path, result = run_with_cluster(tmp_path, content)
    assert_bad_input(result, path.name, "empty")


def test_yaml_holding_only_a_comment_is_bad_input(tmp_path):
    path, result = run_with_cluster(tmp_path, "# nothing here\n")
    assert_bad_input(result, path.name)


def test_empty_model_config_is_bad_input(tmp_path, small_cluster_file):
    path, result = run_with_model(tmp_path, small_cluster_file, "")
    assert_bad_input(result, path.name, "empty")


def test_directory_given_as_cluster_file_is_bad_input(tmp_path):
    folder = tmp_path / "a-folder"
    folder.mkdir()
    result = invoke(*evaluate_args(cluster=str(folder)))
    assert_bad_input(result, "a-folder", "not a regular file")


def test_directory_given_as_model_is_bad_input(tmp_path, small_cluster_file):
    folder = tmp_path / "model-dir"
    folder.mkdir()
    result = invoke(*evaluate_args(model=str(folder), cluster=str(small_cluster_file)))
    assert_bad_input(result, "model-dir", "not a regular file")


def test_file_over_the_size_limit_is_refused_before_reading(tmp_path):
    path = tmp_path / "huge.yaml"
    with path.open("wb") as f:
        f.write(SMALL_CLUSTER_YAML.encode())
        f.write(b"#" * (io.MAX_FILE_BYTES + 1))
    result = invoke(*evaluate_args(cluster=str(path)))
    assert_bad_input(result, path.name, "limit")  # the size read from the file's metadata


def test_alias_bomb_yaml_is_refused_quickly(tmp_path):
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for level in range(1, 10):
        prev = f"*a{level - 1}"
        lines.append(f"a{level}: &a{level} [{', '.join([prev] * 9)}]")
    lines.append("node_groups: *a9")
    path = write(tmp_path, "bomb.yaml", "\n".join(lines) + "\n")
    result = invoke(*evaluate_args(cluster=str(path)))
    assert_bad_input(result, path.name, "alias")  # counted before the 9^9 nodes are built


def test_recursive_yaml_alias_is_bad_input(tmp_path):
    path = write(tmp_path, "loop.yaml", "node_groups: &x [*x]\n")
    result = invoke(*evaluate_args(cluster=str(path)))
    assert_bad_input(result, path.name)


def test_wide_flat_yaml_is_refused_while_composing(tmp_path, monkeypatch):
    # a flat list of many scalars holds no aliases; the node cap still stops it early
    monkeypatch.setattr(io, "MAX_YAML_NODES", 1_000)
    text = "node_groups: [" + ", ".join(["1"] * 50_000) + "]\n"
    with pytest.raises(BadInput, match="more than 1000 nodes"):
        io.parse_structured(text, "wide.yaml")


def test_exponent_without_dot_reads_as_a_number_in_yaml():
    # YAML 1.1 reads `1e3` as a string; users mean a number
    data = io.parse_structured("bandwidth_GBps: 1e3\nlatency_us: 2.5E-1\nnodes: 8\n", "c.yaml")
    assert data == {"bandwidth_GBps": 1000.0, "latency_us": 0.25, "nodes": 8}


def test_byte_order_mark_before_json_is_accepted(tmp_path, small_cluster_file):
    path = write(tmp_path, "config.json", "\ufeff" + json.dumps(hf_config("gpt2")))
    result = invoke(*evaluate_args(model=str(path), cluster=str(small_cluster_file)))
    assert result.exit_code == 0, result.output


# --- plan files ------------------------------------------------------------------------------


@pytest.mark.parametrize("content", ['{"format": "something/else"}', "[1, 2, 3]", '"a plan"'])
def test_plan_file_that_is_not_a_plan_names_format(tmp_path, content):
    path = write(tmp_path, "plan.json", content)
    assert_bad_input(invoke("evaluate", "--plan", str(path), "--json"), path.name, "format")


def test_cluster_file_given_as_plan_names_format(small_cluster_file):
    result = invoke("evaluate", "--plan", str(small_cluster_file), "--json")
    assert_bad_input(result, small_cluster_file.name, "format")


def test_missing_plan_file_is_bad_input(tmp_path):
    result = invoke("evaluate", "--plan", str(tmp_path / "nowhere.json"))
    assert_bad_input(result, "nowhere.json", "not found")


@pytest.mark.parametrize("mutate,field", [
    (lambda p: p["stages"][0].update(tp=0), "stages[0].tp"),
    (lambda p: p["stages"][1].update(zero=7), "stages[1].zero"),
    (lambda p: p["stages"][0].update(recompute="sometimes"), "stages[0].recompute"),
    (lambda p: p["stages"][0].update(layers=[0]), "stages[0].layers"),
    (lambda p: p["stages"][0]["replicas"][0].update(ranks=["0", "1"]), "stages[0].replicas[0].ranks"),
    (lambda p: p["training"].update(micro_batch=-1), "training.micro_batch"),
    (lambda p: p["training"].update(global_batch=10**30), "training.global_batch"),
    (lambda p: p["training"].update(dtype="int4"), "training.dtype"),
    (lambda p: p["training"].update(schedule="zigzag"), "training.schedule"),
    (lambda p: p["model"].pop("config"), "model.config"),
    (lambda p: p["cluster"].pop("spec"), "cluster.spec"),
    (lambda p: p["cluster"]["spec"]["node_groups"][0].update(nodes=0), "node_groups[0].nodes"),
    (lambda p: p["model"]["config"].update(n_embd=-1), "n_embd"),
    (lambda p: p.update(stages=[]), "stages"),
])
def test_malformed_plan_names_the_field(tmp_path, plan_json, mutate, field):
    mutate(plan_json)
    path = write(tmp_path, "plan.json", json.dumps(plan_json))
    assert_bad_input(invoke("evaluate", "--plan", str(path), "--json"), path.name, field)


@pytest.mark.parametrize("mutate,field", [
    (lambda p: p["stages"][0]["replicas"][0].update(batch_share=4), "stages[0].replicas"),
    (lambda p: p["stages"][0]["replicas"][0].update(ranks=[0, 9]), "outside"),
    (lambda p: p["stages"][1]["replicas"][0].update(ranks=[0, 1]), "already used"),
    (lambda p: p["stages"][1].update(layers=[5, 14]), "stages[1].layers"),
    (lambda p: p["stages"][0].update(tp=4), "stages[0].replicas[0].ranks"),
])
def test_structurally_invalid_plan_names_the_problem(tmp_path, plan_json, mutate, field):
    mutate(plan_json)
    path = write(tmp_path, "plan.json", json.dumps(plan_json))
    line = assert_bad_input(invoke("evaluate", "--plan", str(path), "--json"), path.name, "invalid plan")
    assert field in line


def test_plan_with_dtype_a_gpu_lacks_names_training_dtype(tmp_path, gpt2):
    cluster = cluster_from_spec(small_cluster_spec(gpu="V100-SXM2-32GB"))
    plan = plan_to_json(uniform_plan(gpt2, cluster, Training(8, 512, "fp16", 1), tp=1, pp=1, dp=4))
    plan["training"]["dtype"] = "bf16"
    path = write(tmp_path, "plan.json", json.dumps(plan))
    assert_bad_input(invoke("evaluate", "--plan", str(path), "--json"), path.name, "training.dtype",
                     "V100-SXM2-32GB")


# --- a fuzzed plan is either priced or refused as bad input, never a crash -----------------------


_LEAVES = st.one_of(st.none(), st.booleans(), st.integers(-3, 40), st.sampled_from([10**30, 1.5, -0.5]),
                    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=4),
                    st.sampled_from(["bf16", "fp16", "fp32", "full", "selective", "gpipe", "interleaved"]),
                    st.lists(st.integers(-1, 8), max_size=3), st.just({}))


def _paths(obj, path=()):
    if isinstance(obj, dict):
        for key, value in obj.items():
            yield path + (key,)
            yield from _paths(value, path + (key,))
    elif isinstance(obj, list):
        for i, value in enumerate(obj):
            yield path + (i,)
            yield from _paths(value, path + (i,))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_fuzzed_plan_is_priced_or_refused_as_bad_input(plan_json, data):
    plan = json.loads(json.dumps(plan_json))
    paths = [p for p in _paths(plan) if p[0] != "devices"]
    for _ in range(data.draw(st.integers(1, 3))):
        path = data.draw(st.sampled_from(paths))
        target = plan
        try:
            for key in path[:-1]:
                target = target[key]
            target[path[-1]] = data.draw(_LEAVES)
        except (KeyError, IndexError, TypeError):
            continue
    try:  # the parser alone names the file in what it refuses
        plan_from_json(plan, "plan.json")
    except BadInput as exc:
        assert exc.where and exc.where.startswith("plan.json")
        return
    # read as every command reads a plan file (verify.plan_checks.load_plan_file: the schema, the
    # parser, the invariants and the runtime's checks): a plan it refuses is never priced, and one
    # it accepts prices to finite figures (a BadInput from evaluate here fails the test)
    parsed, problems = check_plan_data(plan, "plan.json", memory=False)
    if problems:
        return
    json.dumps(evaluate(parsed).to_json(), allow_nan=False)


def test_a_plan_whose_cluster_holds_fewer_gpus_than_its_ranks_names_the_ranks(plan_json):
    # (found by the fuzz above: the devices check read a rank the cluster no longer has)
    plan = json.loads(json.dumps(plan_json))
    plan["cluster"]["spec"]["node_groups"][0]["gpus_per_node"] = 1
    parsed, problems = check_plan_data(plan, "plan.json")
    assert parsed is not None and ("stages[0].replicas[0].ranks", "rank 1 is outside 0..0") in problems


# --- more ways in ------------------------------------------------------------------------------


def test_merge_key_bomb_yaml_is_refused_quickly(tmp_path):
    lines = ["m0: &m0 {a: 1, b: 2, c: 3, d: 4, e: 5, f: 6, g: 7, h: 8, i: 9}"]
    for level in range(1, 10):
        lines.append(f"m{level}: &m{level} {{<<: [{', '.join([f'*m{level - 1}'] * 9)}], k{level}: 0}}")
    lines.append("node_groups: [*m9]")
    path = write(tmp_path, "merge-bomb.yaml", "\n".join(lines) + "\n")
    result = invoke(*evaluate_args(cluster=str(path)))
    assert_bad_input(result, path.name, "nodes")  # counted before the merged mappings are built


def test_unwritable_output_file_is_bad_input(tmp_path, small_cluster_file):
    out = tmp_path / "out-dir"
    out.mkdir()
    result = invoke(*evaluate_args(cluster=str(small_cluster_file), extra=("-o", str(out))))
    assert_bad_input(result, "out-dir", "cannot write")


def test_real_process_reports_bad_input_in_one_line_and_exits_2(tmp_path):
    import subprocess
    import sys

    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 10)]
    path = write(tmp_path, "bomb.yaml", "\n".join(lines) + "\nnode_groups: *a9\n")
    proc = subprocess.run([sys.executable, "-m", "planner.cli", *evaluate_args(cluster=str(path))],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert len(proc.stderr.strip().splitlines()) == 1 and "bomb.yaml" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_planner_never_uses_an_unsafe_yaml_loader():
    source = "\n".join(p.read_text() for p in (Path(io.__file__).parent).glob("*.py"))
    for unsafe in ("yaml.load(", "yaml.unsafe_load", "yaml.full_load", "FullLoader", "UnsafeLoader",
                   "yaml.Loader"):
        assert unsafe not in source, unsafe
