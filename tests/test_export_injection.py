"""Names are data: refused at load unless they match planner.core.names, and written by each export
with the target format's own writer, so that no name can add a flag, a section or a line."""

from __future__ import annotations

import dataclasses
import json
import re
import shlex
import tomllib

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from planner.core.errors import BadInput
from planner.export import comment_line, export_plan, launch_scripts, titan_settings
from planner.inputs.hardware import CLUSTERS_DIR, cluster_from_spec, load_catalog, load_cluster
from planner.inputs.model import catalog_names, load_model, model_from_dict
from planner.core.names import NAME_MAX, check_name, is_name
from planner.plan import Plan, Training, plan_from_json, uniform_plan

from .conftest import assert_bad_input, evaluate_args, hf_config, invoke, small_cluster_spec

BAD_NAMES = {
    "newline-section": "lab\n[checkpoint]\nenable = true",
    "carriage-return": "lab\r--fp32",
    "hash": "lab#1",
    "double-quote": 'lab"x',
    "single-quote": "lab's",
    "section": "[checkpoint]",
    "command-substitution": "$(touch pwned)",
    "semicolon": "lab;rm",
    "space": "my lab",
    "leading-dash": "--fp32",
    "comma": "a,b",
    "non-ascii": "läb",
    "too-long": "x" * (NAME_MAX + 1),
}


# --- the rule ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["meta-llama/Meta-Llama-3-8B", "mistralai/Mixtral-8x7B-v0.1", "gpt2",
                                  "/data/models/llama-2-7b", "./ckpt", "_local", "org/model@main",
                                  "A100-SXM4-80GB", "llama-3.1-405b", "run=3:a+b", "x" * NAME_MAX])
def test_hub_ids_local_paths_and_catalog_names_are_names(name):
    assert check_name(name, "f", "name") == name


@pytest.mark.parametrize("name", list(BAD_NAMES.values()) + ["", "-x", "=x", None, 5, ["a"]],
                         ids=list(BAD_NAMES) + ["empty", "dash", "equals", "none", "int", "list"])
def test_bad_names_are_refused_in_one_line_naming_file_and_field(name):
    with pytest.raises(BadInput) as info:
        check_name(name, "cluster.yaml", "node_groups[0].name")
    message = str(info.value)
    assert message.startswith("cluster.yaml: node_groups[0].name: must be a name")
    assert len(message.splitlines()) == 1 and message.isascii()


def test_shipped_catalogs_and_examples_pass_the_name_rule():
    names = [load_model(m).name for m in catalog_names()] + list(load_catalog())
    for path in sorted(CLUSTERS_DIR.glob("*.yaml")):
        cluster = load_cluster(str(path))
        names += [cluster.name] + [g.name for g in cluster.groups] + [g.gpu.name for g in cluster.groups]
    assert len(names) > 40 and all(is_name(n) for n in names)


# --- refused at load, exit 2 ---------------------------------------------------------------


def _cluster_file(tmp_path, spec):
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps(spec))
    return path


CUSTOM_GPU = {"memory_GiB": 80, "peak_tflops": {"bf16": 312}, "hbm_GBps": 2000}


def _bad_cluster(kind: str, bad: str) -> tuple[dict, str]:
    spec = small_cluster_spec()
    group = spec["node_groups"][0]
    if kind == "name":
        spec["name"] = bad
        return spec, "name"
    if kind == "group":
        group["name"] = bad
        return spec, "node_groups[0].name"
    if kind == "gpu":
        group["gpu"] = bad
        return spec, "node_groups[0].gpu"
    spec["gpus"] = {bad: CUSTOM_GPU}
    group["gpu"] = "A100-SXM4-80GB"
    return spec, "gpus (a GPU name)"


@pytest.mark.parametrize("bad", BAD_NAMES.values(), ids=BAD_NAMES.keys())
@pytest.mark.parametrize("kind", ["name", "group", "gpu", "gpus-key"])
def test_cluster_names_are_checked_at_load(tmp_path, kind, bad):
    spec, field = _bad_cluster(kind, bad)
    path = _cluster_file(tmp_path, spec)
    assert_bad_input(invoke(*evaluate_args(cluster=str(path))), str(path), f": {field}: must be a name")


@pytest.mark.parametrize("bad", BAD_NAMES.values(), ids=BAD_NAMES.keys())
def test_model_name_or_path_is_checked_at_load(tmp_path, bad):
    path = tmp_path / "model.json"
    path.write_text(json.dumps(hf_config("gpt2") | {"_name_or_path": bad}))
    cluster = _cluster_file(tmp_path, small_cluster_spec())
    assert_bad_input(invoke(*evaluate_args(model=str(path), cluster=str(cluster))), str(path),
                     "_name_or_path: must be a name")


def test_model_named_by_its_file_takes_the_file_name_made_a_name(tmp_path):
    path = tmp_path / "my model;$(rm -rf).json"
    path.write_text(json.dumps(hf_config("gpt2")))
    cluster = _cluster_file(tmp_path, small_cluster_spec())
    result = invoke(*evaluate_args(model=str(path), cluster=str(cluster)))
    assert result.exit_code == 0, result.output
    assert load_model(str(path)).name == "my_model___rm_-rf_"


def _profile(model="tiny", layer="block"):
    entry = {"fwd_flops_per_sample": 1e6, "act_bytes_per_sample": 1, "out_bytes_per_sample": 1}
    return {"format": "planner.profile/v1", "model": model, "seq_len": 512,
            "layers": [{"name": "embed", "kind": "embedding", "params": 10, **entry},
                       {"name": layer, "kind": "decoder", "params": 10, **entry}]}


@pytest.mark.parametrize("profile,field", [(_profile(model="tiny\n[x]"), "model"),
                                           (_profile(layer="[bold]block"), "layers[1].name")])
def test_layer_profile_model_and_layer_names_are_checked(profile, field):
    with pytest.raises(BadInput, match=rf"^profile.json: {re.escape(field)}: must be a name"):
        model_from_dict(profile, "fallback", "profile.json")


@pytest.mark.parametrize("bad", BAD_NAMES.values(), ids=BAD_NAMES.keys())
@pytest.mark.parametrize("where,field", [(("model", "name"), "model.name"),
                                         (("cluster", "name"), "cluster.name"),
                                         (("cluster", "spec", "name"), "cluster.spec.name")])
def test_names_in_plan_files_are_checked(tmp_path, plan_json, where, field, bad):
    target = plan_json
    for key in where[:-1]:
        target = target[key]
    target[where[-1]] = bad
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan_json))
    assert_bad_input(invoke("export", str(path), "--to", "megatron"), f"{path}: {field}: ", "must be a name")


def test_plan_of_a_cluster_named_by_its_file_keeps_that_name(tmp_path, plan_json):
    """A cluster file without `name:` is named by its file; its plan's spec has no name, so the
    plan's cluster.name names it again (not the plan file's own path)."""
    del plan_json["cluster"]["spec"]["name"]
    plan_json["cluster"]["name"] = "lab-a"
    assert plan_from_json(plan_json, str(tmp_path / "plan.json")).cluster.name == "lab-a"


# --- each export parses back to exactly the intended keys, whatever the names --------------


def renamed(plan: Plan, name: str) -> Plan:
    """`plan` with `name` as its model, cluster, node group and GPU names (no check: the
    exports must hold even where the load-time rule is bypassed)."""
    cluster = plan.cluster
    groups = tuple(dataclasses.replace(g, name=f"{name}{i or ''}", gpu=dataclasses.replace(g.gpu, name=name))
                   for i, g in enumerate(cluster.groups))
    return dataclasses.replace(plan, model=dataclasses.replace(plan.model, name=name),
                               cluster=dataclasses.replace(cluster, name=name, groups=groups))


@pytest.fixture(scope="module")
def base_plan():
    spec = small_cluster_spec(nodes=2, gpus_per_node=2)  # a torchtitan llama3 flavour (8B) for its export
    return uniform_plan(load_model("llama-3-8b"), cluster_from_spec(spec), Training(8, 512, "bf16", 1),
                        tp=2, pp=2, dp=1, zero=1, recompute="selective", sequence_parallel=True)


def export(plan: Plan, target: str) -> str:
    return export_plan(plan, target, lambda message: None)


def megatron_words(text: str) -> tuple[int, list[str]]:
    """(number of # lines, the shell words of the other lines), as the documented
    `grep -v '^#'` use reads them."""
    lines = text.splitlines()
    flags = [line.removesuffix("\\") for line in lines if not line.startswith("#")]
    return len(lines) - len(flags), shlex.split(" ".join(flags))


def titan_cli_options(text: str) -> dict[str, list[str]]:
    """torchtitan-cli words -> {--option: [values]} (an option takes the words up to the next)."""
    out: dict[str, list[str]] = {}
    current = None
    for word in shlex.split(text):
        if word.startswith("--"):
            current, _, value = word.partition("=")
            out[current] = [value] if value else []
        else:
            out[current].append(word)
    return out


def check_exports(plan: Plan, name: str) -> None:
    """Every export of `plan` under `name` parses back, with the format's parser, to exactly what
    the same plan exports under a plain name, but for the name itself."""
    evil = renamed(plan, name)
    plain = renamed(plan, "plain")
    # megatron: the same number of comment lines and exactly the same flags
    assert megatron_words(export(evil, "megatron")) == megatron_words(export(plain, "megatron"))
    # deepspeed: names appear only as the node table's JSON strings (group, GPU) and, reduced to
    # host-name characters, in the hostfile's placeholder names (planner_launch)
    def unnamed(config: dict) -> dict:
        for node in config["planner_pipeline"].get("node_ranks", []):
            node.pop("group"), node.pop("gpu")
        launch = config["planner_launch"]
        assert all(re.fullmatch(r"[a-z0-9-]+ slots=\d+", line) for line in launch["hostfile"])
        for i, line in enumerate(launch["hostfile"]):
            host = line.split()[0]
            launch["command"] = launch["command"].replace(host, f"HOST{i}")
            launch["hostfile"][i] = line.replace(host, f"HOST{i}")
        return config
    assert unnamed(json.loads(export(evil, "deepspeed"))) == unnamed(json.loads(export(plain, "deepspeed")))
    # torchtitan TOML: exactly the intended sections and keys, the name intact
    sections, comments = titan_settings(evil, lambda message: None)
    text = export(evil, "torchtitan")
    assert tomllib.loads(text) == sections
    # TOML's lines end at LF (str.splitlines would also split a string value at U+0085 or U+2028)
    assert sum(line.startswith("#") for line in text.split("\n")) == len(comments)
    assert any(name in str(v) for s in sections.values() for v in s.values())
    # torchtitan-cli: exactly the intended options; string values intact
    options = titan_cli_options(export(evil, "torchtitan-cli"))
    assert options.keys() == titan_cli_options(export(plain, "torchtitan-cli")).keys()
    for section, values in sections.items():
        for key, value in values.items():
            if isinstance(value, str):
                assert options[f"--{section}.{key}"] == [value]
    # rankmap: JSON with the names intact, the same torchrun words
    evil_map, plain_map = json.loads(export(evil, "rankmap")), json.loads(export(plain, "rankmap"))
    assert evil_map["model"] == evil_map["cluster"] == name
    assert {e["gpu"] for e in evil_map["ranks"]} == {name}
    assert {e["group"] for e in evil_map["ranks"]} == {g.name for g in evil.cluster.groups}
    assert [shlex.split(g["torchrun"], comments=True) for g in evil_map["launch"]] == \
        [shlex.split(g["torchrun"], comments=True) for g in plain_map["launch"]]
    # launch scripts: safe file names, the same commands, names only on `#` lines
    for target in ("megatron", "torchtitan"):
        evil_scripts, plain_scripts = launch_scripts(evil, target, "cfg"), launch_scripts(plain, target, "cfg")
        assert all(re.fullmatch(r"[A-Za-z0-9_.-]+", file) for file in evil_scripts)
        assert [[line for line in text.splitlines() if not line.startswith("#")] for text in evil_scripts.values()] \
            == [[line for line in text.splitlines() if not line.startswith("#")] for text in plain_scripts.values()]


@pytest.mark.parametrize("bad", BAD_NAMES.values(), ids=BAD_NAMES.keys())
def test_exports_parse_back_to_the_intended_keys_for_hostile_names(base_plan, bad):
    check_exports(base_plan, bad)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.text(min_size=1, max_size=30))
@example(name="\x85#")  # U+0085 is a line break to str.splitlines, not to TOML
def test_exports_parse_back_for_any_name(base_plan, name):
    check_exports(base_plan, name)


@given(text=st.text())
def test_comment_line_is_one_line_whatever_the_text(text):
    line = comment_line(text)
    assert line.startswith("# ") and len(line.splitlines()) == 1 and line.isprintable()


def test_torchtitan_config_manager_reads_hostile_names_back(base_plan, tmp_path):
    """torchtitan's own parser (tyro) reads the TOML and the command line to the same names,
    with no section added; skipped without torchtitan."""
    config_manager = pytest.importorskip("torchtitan.config").ConfigManager
    name = "-lab\n[checkpoint]\nenable = true"
    evil = renamed(base_plan, name)
    job = tmp_path / "job.toml"
    job.write_text(export(evil, "torchtitan"))
    from_toml = config_manager().parse_args(["--job.config_file", str(job)])
    from_cli = config_manager().parse_args(shlex.split(export(evil, "torchtitan-cli")))
    sections, _ = titan_settings(evil, lambda message: None)
    for config in (from_toml, from_cli):
        assert not config.checkpoint.enable
        assert config.job.description == sections["job"]["description"]
        assert config.model.flavor == sections["model"]["flavor"]
