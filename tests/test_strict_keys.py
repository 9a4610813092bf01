"""Every mapping of an input file takes only its documented keys: an unknown one is bad input naming
the file, the key's path and the nearest valid key (planner.core.io.check_keys). YAML 1.1's base-60
numbers are not read as numbers. A dense family's config that carries experts is refused, and a
file's name is not held to the name rule."""

from __future__ import annotations

import copy
import json
import re

import pytest
import yaml

from planner.calibrate.fit import params_from_calibration
from planner.core.errors import BadInput
from planner.core.io import parse_structured
from planner.core.names import NAME_MAX
from planner.inputs import measured
from planner.inputs.hardware import CLUSTERS_DIR, cluster_from_spec, load_catalog, load_cluster
from planner.inputs.links import check_fragment
from planner.inputs.measured import measured_from_profile
from planner.inputs.model import load_model, model_from_dict
from planner.verify.plan_checks import load_plan_file, load_schema

from .conftest import assert_bad_input, hf_config, invoke, small_cluster_spec, synthetic_profile

CURVE = {"ranks": 2, "size_bytes": [4096, 65536], "busbw_GBps": [1.0, 2.0]}


def _spec() -> dict:
    spec = small_cluster_spec()
    spec["node_groups"][0]["host"] = {"memory_GiB": 512}
    spec["node_groups"][0]["intra_node"]["curve"] = {"all_reduce": dict(CURVE)}
    spec["gpus"] = {"MyCard": {"memory_GiB": 24, "peak_tflops": {"bf16": 100, "fp32": 20}, "hbm_GBps": 900}}
    spec["node_groups"].append({"name": "mine", "gpu": "MyCard", "nodes": 1, "gpus_per_node": 2})
    spec["links"] = [{"between": ["g", "mine"], "bandwidth_GBps": 10, "latency_us": 5}]
    return spec


def _topology_spec() -> dict:
    spec = _spec()
    del spec["links"]
    spec["topology"] = {"switches": ["spine"], "links": [
        {"between": ["g", "spine"], "bandwidth_GBps": 50}, {"between": ["mine", "spine"], "bandwidth_GBps": 50}]}
    return spec


def _rename(mapping: dict, old: str, new: str) -> None:
    mapping[new] = mapping.pop(old)


CLUSTER_TYPOS = [
    ("top level", lambda s: _rename(s, "name", "nmae"), "nmae", "did you mean name?"),
    ("node group", lambda s: s["node_groups"][0].update(colour="red"), "node_groups[0].colour",
     "known: name, gpu, nodes, gpus_per_node, intra_node, inter_node, host"),
    ("inter_node bandwidth", lambda s: _rename(s["node_groups"][0]["inter_node"], "bandwidth_GBps", "bandwidth_Gbps"),
     "node_groups[0].inter_node.bandwidth_Gbps", "did you mean bandwidth_GBps?"),
    ("inter_node latency", lambda s: _rename(s["node_groups"][0]["inter_node"], "latency_us", "latncy_us"),
     "node_groups[0].inter_node.latncy_us", "did you mean latency_us?"),
    ("intra_node kind", lambda s: s["node_groups"][0]["intra_node"].update(kidn="NVLink"),
     "node_groups[0].intra_node.kidn", "did you mean kind?"),
    ("curve", lambda s: _rename(s["node_groups"][0]["intra_node"]["curve"]["all_reduce"], "busbw_GBps", "busbw_Gbps"),
     "node_groups[0].intra_node.curve.all_reduce.busbw_Gbps", "did you mean busbw_GBps?"),
    ("curve collective", lambda s: _rename(s["node_groups"][0]["intra_node"]["curve"], "all_reduce", "allreduce"),
     "node_groups[0].intra_node.curve.allreduce", "unknown collective (did you mean all_reduce?)"),
    ("host", lambda s: s["node_groups"][0]["host"].update(pcie_gbps=25), "node_groups[0].host.pcie_gbps",
     "did you mean pcie_GBps?"),
    ("gpu entry", lambda s: _rename(s["gpus"]["MyCard"], "hbm_GBps", "hbm_GB"), "gpus.MyCard.hbm_GB",
     "did you mean hbm_GBps?"),
    ("peak dtype", lambda s: s["gpus"]["MyCard"]["peak_tflops"].update(bf61=100), "gpus.MyCard.peak_tflops.bf61",
     "unknown dtype (did you mean bf16?)"),
    ("links entry", lambda s: s["links"][0].update(latncy_us=5), "links[0].latncy_us", "did you mean latency_us?"),
]


@pytest.mark.parametrize("case", CLUSTER_TYPOS, ids=[c[0] for c in CLUSTER_TYPOS])
def test_an_unknown_cluster_key_names_its_path_and_the_nearest_key(case):
    _, edit, path, hint = case
    spec = _spec()
    cluster_from_spec(copy.deepcopy(spec), "c.yaml")  # valid before the edit
    edit(spec)
    with pytest.raises(BadInput) as caught:
        cluster_from_spec(spec, "c.yaml")
    assert str(caught.value).startswith(f"c.yaml: {path}: unknown ")
    assert hint in str(caught.value)


@pytest.mark.parametrize("edit, path, hint", [
    (lambda s: _rename(s["topology"], "switches", "swithces"), "topology.swithces", "did you mean switches?"),
    (lambda s: s["topology"]["links"][0].update(bandwith_GBps=1), "topology.links[0].bandwith_GBps",
     "did you mean bandwidth_GBps?"),
])
def test_an_unknown_topology_key_names_its_path_and_the_nearest_key(edit, path, hint):
    spec = _topology_spec()
    cluster_from_spec(copy.deepcopy(spec), "c.yaml")
    edit(spec)
    with pytest.raises(BadInput, match=rf"^c\.yaml: {re.escape(path)}: unknown key \({re.escape(hint)}"):
        cluster_from_spec(spec, "c.yaml")


def test_the_issues_typo_is_one_line_exit_2_not_the_catalogs_bandwidth(tmp_path):
    path = tmp_path / "typo.yaml"
    path.write_text("node_groups:\n  - {name: a, gpu: A100-SXM4-80GB, nodes: 2, gpus_per_node: 8,\n"
                    "     inter_node: {bandwidth_Gbps: 100, latncy_us: 5}}\n")
    result = invoke("plan", "--model", "gpt2", "--cluster", path, "--global-batch", "32", "--seq-len", "512")
    assert_bad_input(result, f"{path}: node_groups[0].inter_node.bandwidth_Gbps: unknown key",
                     "did you mean bandwidth_GBps?")


def test_the_catalog_and_every_example_cluster_use_only_documented_keys():
    assert len(load_catalog()) >= 22
    for path in sorted(CLUSTERS_DIR.glob("*.yaml")):
        assert load_cluster(str(path)).num_gpus > 0


# --- YAML 1.1 base-60 numbers ------------------------------------------------------------------


def test_a_base_60_number_stays_the_string_it_is_and_fails_the_number_check(tmp_path):
    assert parse_structured("a: 12:30\nb: 1e3\nc: 0x10\n", "x.yaml") == {"a": "12:30", "b": 1000.0, "c": 16}
    path = tmp_path / "sexagesimal.yaml"
    path.write_text("node_groups:\n  - name: a\n    gpu: A100-SXM4-80GB\n    nodes: 1\n    gpus_per_node: 8\n"
                    "    inter_node: {bandwidth_GBps: 100, latency_us: 12:30}\n")
    result = invoke("plan", "--model", "gpt2", "--cluster", path, "--global-batch", "32", "--seq-len", "512")
    assert_bad_input(result, f"{path}: node_groups[0].inter_node.latency_us: must be a number",
                     "got '12:30' (base-60 numbers are not read: write 750 if that is meant)")


# --- link fragments, profiles, calibrations, plans ---------------------------------------------


def test_an_unknown_key_in_a_links_fragment_names_the_nearest_key():
    with pytest.raises(BadInput, match=r"^l\.yaml: inter_nodes: unknown key \(did you mean inter_node\?\)$"):
        check_fragment({"format": "planner.links/v1", "inter_nodes": {"bandwidth_GBps": 1}}, "l.yaml")
    with pytest.raises(BadInput, match=r"^l\.yaml: links\[0\]\.latncy_us: unknown key \(did you mean latency_us\?\)$"):
        check_fragment({"links": [{"between": ["a", "b"], "bandwidth_GBps": 1, "latncy_us": 2}]}, "l.yaml")


@pytest.mark.parametrize("edit, path, hint", [
    (lambda p: p.update(seq_lne=1024), "seq_lne", "did you mean seq_len?"),
    (lambda p: p["layers"][0].update(parms=1), r"layers\[0\]\.parms", "did you mean params?"),
    (lambda p: p["layers"][1]["measured"].update(fwd_S=[1]), r"layers\[1\]\.measured\.fwd_S", "did you mean fwd_s?"),
])
def test_an_unknown_key_in_a_layer_profile_names_the_nearest_key(tmp_path, edit, path, hint):
    synthetic_profile(tmp_path / "p.json")
    profile = json.loads((tmp_path / "p.json").read_text())
    measured_from_profile(profile, "A100-SXM4-80GB", "p.json")
    edit(profile)
    for read in (lambda: measured_from_profile(profile, "A100-SXM4-80GB", "p.json"),
                 lambda: model_from_dict(profile, "gpt2", "p.json")):
        with pytest.raises(BadInput, match=rf"^p\.json: {path}: unknown key \({hint}"):
            read()


def test_the_profile_readers_keys_are_the_profile_schemas_properties():
    schema = load_schema("profile")
    measured_def = schema["$defs"]["measured"]["properties"]
    assert set(measured.PROFILE_KEYS) == set(schema["properties"])
    assert set(measured.LAYER_KEYS) == set(schema["$defs"]["layer"]["properties"])
    assert set(measured.MEASURED_KEYS) == set(measured_def)
    assert set(measured.TIMES_KEYS) == set(measured_def["by_tp"]["additionalProperties"]["properties"])


def test_an_unknown_key_in_a_calibration_names_the_nearest_key():
    good = {"format": "planner.calibration/v1", "gpu": "A100-SXM4-80GB",
            "params": {"gemm_efficiency": 0.7, "hbm_efficiency": 0.8, "attention_efficiency": 0.5}}
    assert params_from_calibration(good, "c.yaml")[0] == "A100-SXM4-80GB"
    with pytest.raises(BadInput, match=r"^c\.yaml: parms: unknown key \(did you mean params\?\)$"):
        params_from_calibration({**good, "parms": {}}, "c.yaml")
    typo = {**good, "params": {**good["params"], "gemm_eficiency": 0.5}}
    with pytest.raises(BadInput, match=r"^c\.yaml: params\.gemm_eficiency: unknown key "
                                       r"\(did you mean gemm_efficiency\?\)$"):
        params_from_calibration(typo, "c.yaml")


def test_a_plan_with_an_unknown_key_is_refused_naming_file_path_and_nearest_key(tmp_path):
    out = tmp_path / "plan.json"
    result = invoke("plan", "--model", "gpt2", "--cluster", "dgx-a100", "--global-batch", "32", "--seq-len", "512",
                    "-o", out)
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    data["training"]["micro_bacth"] = data["training"]["micro_batch"]
    out.write_text(json.dumps(data))
    with pytest.raises(BadInput, match=rf"^{out}: training\.micro_bacth: invalid plan: unknown key "
                                       r"\(did you mean micro_batch\?\)"):
        load_plan_file(str(out))
    del data["training"]["micro_bacth"]
    data["cluster"]["spec"]["node_groups"][0]["colour"] = "red"
    out.write_text(json.dumps(data))
    with pytest.raises(BadInput, match=r"cluster\.spec\.node_groups\[0\]\.colour: invalid plan: unknown key"):
        load_plan_file(str(out))


# --- model configs -----------------------------------------------------------------------------


def test_a_llama_config_with_experts_is_refused_pointing_at_mixtral(tmp_path):
    config = hf_config("llama-3-8b")
    config["num_local_experts"] = 8
    with pytest.raises(BadInput, match=r"^c\.json: num_local_experts: 8 experts in a llama config: llama is dense"
                                       r".*use model_type mixtral$"):
        model_from_dict(config, "x", "c.json")
    path = tmp_path / "moe-llama.json"
    path.write_text(json.dumps(config))
    result = invoke("plan", "--model", path, "--cluster", "dgx-a100", "--global-batch", "32", "--seq-len", "512")
    assert_bad_input(result, f"{path}: num_local_experts: 8 experts in a llama config")


def test_a_single_expert_or_a_moe_family_is_not_refused():
    config = hf_config("llama-3-8b")
    config["num_local_experts"] = 1
    assert model_from_dict(config, "x", "c.json").params == load_model("llama-3-8b").params
    assert load_model("mixtral-8x7b").config.num_experts == 8


def test_a_file_name_past_the_name_length_names_the_model_by_its_first_characters(tmp_path):
    stem = "my-finetuned-llama-" + "x" * 150
    path = tmp_path / f"{stem}.json"
    path.write_text(json.dumps({k: v for k, v in hf_config("llama-3-8b").items() if k != "_name_or_path"}))
    assert load_model(str(path)).name == stem[:NAME_MAX]
    spaced = tmp_path / "my model (v2).json"
    spaced.write_text(path.read_text())
    assert load_model(str(spaced)).name == "my_model__v2_"
    cluster = tmp_path / f"{'c' * 200}.yaml"
    cluster.write_text(yaml.safe_dump({"node_groups": small_cluster_spec()["node_groups"]}))
    assert load_cluster(str(cluster)).name == "c" * NAME_MAX
