"""The role nvidia_container_toolkit: YAML says what runs where, its decisions live in Python.

The decisions themselves are tested where they are made: tests/unit/plugins/module_utils/test_toolkit_node.py
and test_toolkit_repo.py, tests/unit/plugins/modules/test_nvidia_container_toolkit_*.py and
tests/unit/plugins/filter/test_toolkit_runtimes.py. This file checks that the role holds no logic of its own
and that its variables, their documentation and the modules' defaults agree.
"""
import glob
import os
import re

import pytest
import yaml

import role_render
from ansible_collections.kubegpu.nvidia.plugins.module_utils import toolkit_repo
from toolkit_repo import build as standin_repo

ROLE = os.path.join(role_render.ROLES, "nvidia_container_toolkit")


def role_files():
    return sorted(path for part in ("tasks", "vars", "defaults", "handlers")
                  for path in glob.glob(os.path.join(ROLE, part, "*.yml")))


def load(*parts):
    with open(os.path.join(ROLE, *parts)) as handle:
        return yaml.safe_load(handle)


def test_no_jinja_statement_raw_command_or_collection_source_read_in_the_role():
    assert role_files()
    for path in role_files():
        with open(path) as handle:
            text = handle.read()
        name = os.path.relpath(path, ROLE)
        assert "{%" not in text, name
        assert not re.search(r"ansible\.builtin\.raw\b|^\s*raw:", text, re.M), name
        assert "role_path" not in text, name
    # no vars/ at all: what the role knows about runtimes and families is in module_utils
    assert not os.path.exists(os.path.join(ROLE, "vars"))


def test_every_default_is_documented_with_the_same_default():
    defaults = load("defaults", "main.yml")
    options = load("meta", "argument_specs.yml")["argument_specs"]["main"]["options"]
    assert sorted(defaults) == sorted(options)
    for name, value in defaults.items():
        if isinstance(value, str) and "{{" in value:
            assert options[name]["default"] == value, name
        elif "default" in options[name]:
            assert options[name]["default"] == value, name
        else:
            assert value is None, name


def test_the_default_signing_key_is_nvidias_everywhere():
    defaults = load("defaults", "main.yml")
    assert defaults["nvidia_container_toolkit_repo_gpg_key_fingerprints"] == list(toolkit_repo.NVIDIA_FINGERPRINTS)


def test_the_default_toolkit_is_the_current_line_and_the_standin_repository_carries_it():
    version = load("defaults", "main.yml")["nvidia_container_toolkit_version"]
    major, minor, _patch = (int(part) for part in version.split("-")[0].split("."))
    # at least 1.18.1 (fixes dropped containerd imports, toolkit issue 1382); 1.20 is the line the GPU Operator ships
    assert (major, minor) >= (1, 20)
    assert version in standin_repo.DEFAULT_VERSIONS
    # an older and a newer-than-1.18 version as well, for the pin and for the CDI path of toolkits before 1.18
    assert any(v.startswith("1.17.") for v in standin_repo.DEFAULT_VERSIONS)


def module_of(task):
    return next((key for key in task if key.startswith(("kubegpu.", "ansible.builtin."))), "block")


def test_the_node_is_read_by_a_module_of_the_collection_and_the_repository_written_by_another():
    assert module_of(load("tasks", "node.yml")[0]) == "kubegpu.nvidia.nvidia_container_toolkit_info"
    install = [module_of(task) for task in load("tasks", "install.yml")]
    assert "kubegpu.nvidia.nvidia_container_toolkit_repo" in install
    assert "ansible.builtin.get_url" not in install and "ansible.builtin.yum_repository" not in install


# ------------------------------------------------------------------ the state from this run's facts, or a read
def import_vars():
    """The variables main.yml gives node.yml (the read's options and the plan from the facts)."""
    from ansible.parsing.dataloader import DataLoader

    tasks = DataLoader().load_from_file(os.path.join(ROLE, "tasks", "main.yml"), trusted_as_template=True)
    task = next(task for task in tasks if task.get("ansible.builtin.import_tasks") == "node.yml")
    return dict(task["vars"])


def facts_state():
    """A Debian node's toolkit state as the facts' toolkit subset returns it: containerd running, the toolkit of the
    role's default version installed, no repository written yet (tests/unit/plugins/module_utils/test_toolkit_state.py
    states every case of the plan; this one only has to be one the role can decide from)."""
    from ansible_collections.kubegpu.nvidia.plugins.module_utils import toolkit_node, toolkit_state

    units = dict((unit, {"LoadState": "not-found", "ActiveState": "inactive", "UnitFileState": ""})
                 for unit in toolkit_node.unit_names() + [toolkit_node.CDI_REFRESH_PATH])
    units["containerd.service"] = {"LoadState": "loaded", "ActiveState": "active", "UnitFileState": "enabled"}
    return {
        "family": "Debian", "manager": "apt", "arch": "amd64",
        "packages": dict((name, "1.20.0-1") for name in toolkit_state.PACKAGES), "units": units,
        "repo": {"source_path": "/etc/apt/sources.list.d/nvidia-container-toolkit.list", "source": None,
                 "source_attributes_ok": False, "key_path": "/etc/apt/keyrings/nvidia-container-toolkit.asc",
                 "key": None, "key_attributes_ok": False, "index": {}},
        "k3s": dict((runtime, {"installed": False, "version_text": "", "generated": None, "drop_in": None,
                               "drop_in_path": "/etc/rancher/%s/config.yaml.d/90-kubegpu-nvidia-runtime.yaml" % runtime})
                    for runtime in ("k3s", "rke2")),
        "record": {"text": None, "checksums": {}},
        "cdi": {"spec_present": False, "spec_versions": None, "refresh_output_present": False},
        "options": {"packages": toolkit_state.PACKAGES + [toolkit_state.TOMLKIT_PACKAGE],
                    "record_path": toolkit_node.RECORD_PATH, "cdi_spec_path": toolkit_state.CDI_SPEC_PATH},
    }


def role_choice(**overrides):
    variables = dict(import_vars(), inventory_hostname="gpu-1", hostvars={"gpu-1": {}},
                     groups={"all": ["gpu-1"], "kubegpu_gpu": ["gpu-1"]},
                     ansible_facts={"os_family": "Debian", "nvidia_gpu": {"driver_version": "570.172.08"}},
                     preflight_node_facts={"ansible_facts": {"nvidia_gpu": {"toolkit_state": facts_state()}}})
    variables.update(overrides)
    return role_render.render("nvidia_container_toolkit", "{{ _nvidia_container_toolkit_facts_plan }}", variables)


def test_the_role_decides_from_this_runs_facts_as_the_module_would():
    from ansible_collections.kubegpu.nvidia.plugins.module_utils import toolkit_state

    plan = role_choice()
    options = role_render.render("nvidia_container_toolkit", "{{ _nvidia_container_toolkit_read_options }}",
                                 dict(import_vars(), inventory_hostname="gpu-1", hostvars={"gpu-1": {}},
                                      ansible_facts={"os_family": "Debian",
                                                     "nvidia_gpu": {"driver_version": "570.172.08"}}))
    assert options["driver_version"] == "570.172.08" and options["cdi"] is None
    assert plan == dict(toolkit_state.plan(facts_state(), toolkit_state.check_params(options)), changed=False)
    # what the role's tasks read of it: no package to install, the repository to write, containerd to configure
    assert plan["packages_wanted"] == [] and plan["repo"]["needed"] is True
    assert [entry["name"] for entry in plan["configure"]] == ["containerd"]
    # and the read task runs only without it (its condition, as node.yml states it)
    read = load("tasks", "node.yml")[0]
    assert module_of(read) == "kubegpu.nvidia.nvidia_container_toolkit_info"
    assert read["when"] == "_nvidia_container_toolkit_facts_plan is none"


@pytest.mark.parametrize("why, overrides", [
    ("the driver role installed or loaded a driver in this run", {"nvidia_driver_changed": True}),
    ("the host is repartitioned in this run", {"groups": {"all": ["gpu-1"], "kubegpu_mig_change": ["gpu-1"]}}),
    ("the role ran on the host before in this playbook", {"_nvidia_container_toolkit_node_read_used": True}),
    ("the user asks for a read", {"nvidia_container_toolkit_state_from_facts": False}),
    ("no facts play ran (the role alone)", {"preflight_node_facts": {"ansible_facts": {}}}),
    ("a CDI path the facts did not read", {"nvidia_container_toolkit_cdi_spec_path": "/var/run/cdi/nvidia.yaml"}),
    ("a package the facts did not read", {"nvidia_container_toolkit_packages": ["nvidia-container-toolkit", "nvidia-ctk"]}),
    ("another OS family", {"ansible_facts": {"os_family": "RedHat", "nvidia_gpu": {"driver_version": "570.172.08"}}}),
    ("a node the facts could not read", {"preflight_node_facts": {"ansible_facts": {"nvidia_gpu": {"toolkit_state": {
        "family": "Debian", "error": "Cannot read the services of the container runtimes: systemctl is not installed."}}}}}),
])
def test_the_role_reads_the_node_itself_where_the_facts_do_not_answer(why, overrides):
    assert role_choice(**overrides) is None, why


def test_site_gathers_the_toolkit_state_with_the_facts():
    assert "toolkit" in role_render.render("preflight", "{{ preflight_gather_subset }}")
