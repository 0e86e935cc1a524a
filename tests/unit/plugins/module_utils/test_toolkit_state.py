# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.nvidia maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""toolkit_state: the plan of nvidia_container_toolkit_info from a node state (what the facts' ``toolkit`` subset
returns), when such a state answers the role's read, and the filter toolkit_plan the role decides with.

The cases are those of tests/unit/plugins/modules/test_nvidia_container_toolkit_info.py (a fresh node, a node with
everything in place, a pin apt's index does not have, another key, k3s v1.29 and older, a record whose file
changed) and of test_toolkit_node.py's cdi_plan cases, stated as node states instead of command answers: the
plan must decide the same from the state as the module decides from the node.
"""

from __future__ import absolute_import, division, print_function

import base64
import copy
import hashlib
import os

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.kubegpu.nvidia.plugins.filter.toolkit_runtimes import toolkit_plan
from ansible_collections.kubegpu.nvidia.plugins.module_utils import toolkit_node, toolkit_repo, toolkit_state
from ansible_collections.kubegpu.nvidia.plugins.module_utils.errors import InputError, KubegpuError

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "openpgp")
NVIDIA = "C95B321B61E88C1809C4F759DDCAE044F796ECB0"
URL = "http://mirror.example/stable/deb/$(ARCH)"
KEY_PATH = "/etc/apt/keyrings/nvidia-container-toolkit.asc"
SOURCE_PATH = "/etc/apt/sources.list.d/nvidia-container-toolkit.list"
ALL = {name: "1.20.0-1" for name in toolkit_state.PACKAGES}
CONFIG = "/etc/containerd/config.toml"
CONFIG_SHA = hashlib.sha256(b"version = 2\n").hexdigest()


def key_bytes():
    with open(os.path.join(FIXTURES, "nvidia-container-toolkit.asc"), "rb") as handle:
        return handle.read()


def units(**states):
    """systemctl show's answer for every unit the read asks about: not-found unless given (load, active, enabled)."""
    out = {}
    for unit in toolkit_node.unit_names() + [toolkit_node.CDI_REFRESH_PATH]:
        load, active, enabled = states.get(unit.replace("-", "_").replace(".", "_"), ("not-found", "inactive", ""))
        out[unit] = {"LoadState": load, "ActiveState": active, "UnitFileState": enabled}
    return out


def node_state(installed=None, repo=True, index=None, k3s=None, record=None, checksums=None, spec=None,
               refresh_output=False, **unit_states):
    """A Debian node's toolkit state as toolkit_state.read returns it."""
    index = {"1.20.0-1": True} if index is None else index
    source = toolkit_repo.source_text("Debian", URL, KEY_PATH) if repo else None
    k3s = k3s or {}
    return {
        "family": "Debian", "manager": "apt", "arch": "amd64",
        "packages": dict({toolkit_state.TOMLKIT_PACKAGE: "0.11.7-1"}, **(ALL if installed is None else installed)),
        "units": units(**(unit_states or {"containerd_service": ("loaded", "active", "enabled")})),
        "repo": {"source_path": SOURCE_PATH, "source": source, "source_attributes_ok": repo,
                 "key_path": KEY_PATH, "key": base64.b64encode(key_bytes()).decode() if repo else None,
                 "key_attributes_ok": repo,
                 "index": {toolkit_repo.apt_lists_prefix(URL, "amd64"): {
                     name: sorted(index) for name in toolkit_state.PACKAGES}} if repo else {}},
        "k3s": dict((runtime, {"installed": runtime in k3s, "version_text": k3s.get(runtime, ""), "generated": None,
                               "drop_in_path": "/etc/rancher/%s/config.yaml.d/90-kubegpu-nvidia-runtime.yaml" % runtime,
                               "drop_in": None}) for runtime in ("k3s", "rke2")),
        "record": {"text": record, "checksums": checksums or {}},
        "cdi": {"spec_present": spec is not None, "spec_versions": toolkit_state.dotted_numbers(spec),
                "refresh_output_present": refresh_output},
        "options": {"packages": toolkit_state.PACKAGES + [toolkit_state.TOMLKIT_PACKAGE],
                    "record_path": toolkit_node.RECORD_PATH, "cdi_spec_path": toolkit_state.CDI_SPEC_PATH},
    }


def params(**options):
    return toolkit_state.check_params(dict(dict(family="Debian", version="1.20.0-1", repo_deb_url=URL,
                                                repo_key_fingerprints=[NVIDIA]), **options))


def record_of(options, path=CONFIG, digest=CONFIG_SHA):
    key = toolkit_node.record_key(toolkit_node.configure_args("containerd", dict(
        (name, options[name]) for name in ("runtime_name", "runtime_path", "set_as_default", "cdi", "backup", "validate",
                                           "containerd_mode", "config_paths", "nvidia_runtimes", "config_source"))))
    return "%s\ncontainerd %s %s %s\n" % (toolkit_node.RECORD_HEADER, key, path, digest)


# (case, node state, options, what the plan says) -- test_nvidia_container_toolkit_info.py's cases
PLAN_CASES = [
    ("a fresh node needs everything (test_a_fresh_node_needs_everything)",
     dict(installed={}, repo=False), dict(cdi_generate=True),
     {"packages_wanted": toolkit_state.PACKAGES, "install_needed": True, "tomlkit_missing": False,
      "repo.needed": True, "repo.index_ready": False, "repo.source_in_place": False, "repo.key_in_place": False,
      "repo.cached": False, "runtimes": ["containerd"], "services": {"containerd": "containerd"},
      "configure.names": ["containerd"], "cdi.mode": "refresh", "cdi.action": "refresh"}),
    ("everything in place needs nothing (test_everything_in_place_needs_nothing)",
     dict(record="RECORD", checksums={CONFIG: CONFIG_SHA}, refresh_output=True,
          containerd_service=("loaded", "active", "enabled"), nvidia_cdi_refresh_path=("loaded", "active", "enabled")),
     dict(cdi_generate=True),
     {"packages_wanted": [], "install_needed": False, "repo.needed": False, "repo.index_ready": True,
      "repo.key_fingerprints": [NVIDIA], "configure.names": [], "in_place": ["containerd"], "cdi.action": "none"}),
    ("a file changed since the record: the module runs again (test_everything_in_place_needs_nothing)",
     dict(record="RECORD", checksums={CONFIG: hashlib.sha256(b"edited").hexdigest()}), {},
     {"configure.names": ["containerd"], "in_place": []}),
    ("a recorded file gone: the module runs again", dict(record="RECORD", checksums={}), {},
     {"configure.names": ["containerd"], "in_place": []}),
    ("a pin apt's index does not have (test_a_pinned_version_not_in_apts_index_is_not_ready_for_check_mode)",
     dict(), dict(version="1.18.1-1"),
     {"repo.needed": True, "repo.cached": False, "repo.index_ready": False,
      "packages_wanted": toolkit_state.PACKAGES, "package_specs": ["%s=1.18.1-1" % n for n in toolkit_state.PACKAGES]}),
    ("an index for another source does not count", dict(), dict(repo_deb_url="http://other.example/deb/$(ARCH)"),
     {"repo.cached": False, "repo.source_in_place": False, "repo.index_ready": False}),
    ("another trusted key (test_an_installed_key_with_another_fingerprint_is_not_in_place)",
     dict(), dict(repo_key_fingerprints=["3C495121AD7F138EC332D53B99DCE03292D11331"]),
     {"repo.key_in_place": False, "repo.needed": True, "repo.key_fingerprints": [NVIDIA]}),
    ("k3s v1.29 and newer finds the runtime itself (test_k3s_v1_29_and_newer_finds_the_runtime_itself)",
     dict(k3s={"k3s": "k3s version v1.30.4+k3s1 (abcdef)\ngo version go1.22\n"},
          k3s_service=("loaded", "active", "enabled")), dict(set_as_default=True),
     {"runtimes": ["k3s"], "configure.names": [], "k3s.k3s.detection": True, "k3s.k3s.detected": False,
      "k3s_actions": [{"name": "k3s", "path": "/etc/rancher/k3s/config.yaml.d/90-kubegpu-nvidia-runtime.yaml",
                       "content": "# Managed by kubegpu.nvidia.nvidia_container_toolkit\ndefault-runtime: nvidia\n",
                       "write": True}]}),
    ("k3s older than v1.29 gets the template (test_k3s_v1_29_and_newer_finds_the_runtime_itself)",
     dict(k3s={"k3s": "k3s version v1.28.5+k3s1 (abcdef)\n"}, k3s_service=("loaded", "active", "enabled")), {},
     {"configure.flavors": ["k3s"], "k3s_actions": []}),
    # test_toolkit_node.py's cdi_plan cases: a toolkit before 1.18 generates the spec with nvidia-ctk
    ("CDI before 1.18: a spec naming the loaded driver is current",
     dict(installed={n: "1.17.8-1" for n in toolkit_state.PACKAGES},
          spec="cdiVersion: 0.5.0\n  - path: /usr/lib/x86_64-linux-gnu/libcuda.so.570.172.08\n"),
     dict(version="1.17.8-1", cdi_generate=True, driver_version="570.172.08"),
     {"cdi.mode": "generate", "cdi.action": "none"}),
    ("CDI before 1.18: a spec of another driver is generated again",
     dict(installed={n: "1.17.8-1" for n in toolkit_state.PACKAGES},
          spec="cdiVersion: 0.5.0\n  - path: /usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15\n"),
     dict(version="1.17.8-1", cdi_generate=True, driver_version="570.172.08"),
     {"cdi.mode": "generate", "cdi.action": "generate"}),
    ("CDI before 1.18: no spec yet", dict(installed={n: "1.17.8-1" for n in toolkit_state.PACKAGES}),
     dict(version="1.17.8-1", cdi_generate=True, driver_version="570.172.08"),
     {"cdi.action": "generate", "cdi.reason": "/etc/cdi/nvidia.yaml does not exist"}),
]


def pick(plan, path):
    if path == "configure.names":
        return [entry["name"] for entry in plan["configure"]]
    if path == "configure.flavors":
        return [entry["args"]["flavor"] for entry in plan["configure"]]
    value = plan
    for part in path.split("."):
        value = value[part]
    return value


@pytest.mark.parametrize("case, state, options, expected", PLAN_CASES, ids=[case[0] for case in PLAN_CASES])
def test_the_plan_decides_from_the_node_state(case, state, options, expected):
    checked = params(**options)
    if state.get("record") == "RECORD":
        state = dict(state, record=record_of(checked))
    plan = toolkit_state.plan(node_state(**state), checked)
    for path, value in expected.items():
        assert pick(plan, path) == value, (case, path)
    # the filter the role decides with answers the same, as the module would (changed false)
    assert toolkit_plan(node_state(**state), dict(checked)) == dict(plan, changed=False)


def test_the_plan_stops_with_one_line_where_the_module_does():
    # test_no_runtime_and_an_unknown_runtime_fail_with_one_line
    with pytest.raises(KubegpuError) as caught:
        toolkit_state.plan(node_state(containerd_service=("not-found", "inactive", "")), params())
    assert str(caught.value).startswith("No container runtime (containerd, Docker, CRI-O, k3s, RKE2) runs or is enabled")
    with pytest.raises(InputError) as caught:
        toolkit_state.plan(node_state(), params(runtimes=["podman"]))
    assert str(caught.value).startswith("Unknown container runtime(s) podman")


def without(state, *keys):
    state = copy.deepcopy(state)
    for key in keys:
        state.pop(key)
    return state


@pytest.mark.parametrize("state, options, answers", [
    (node_state(), {}, True),
    (node_state(), {"install_tomlkit": False}, True),
    (node_state(), {"packages": toolkit_state.PACKAGES[:2]}, True),
    (node_state(), {"packages": toolkit_state.PACKAGES + ["nvidia-container-toolkit-operator-extensions"]}, False),
    (node_state(), {"family": "RedHat"}, False),
    (node_state(), {"record_path": "/var/lib/other.record"}, False),
    (node_state(), {"cdi_spec_path": "/var/run/cdi/nvidia.yaml"}, False),
    # options that only the plan reads never make a state unusable
    (node_state(), {"runtimes": ["docker"], "version": "", "cdi_generate": True, "driver_version": "570.1"}, True),
    ({"family": "Debian", "error": "Cannot read the services of the container runtimes: systemctl is not installed."},
     {}, False),
    (without(node_state(), "options"), {}, False),
    (None, {}, False),
])
def test_a_state_answers_a_read_that_asks_for_nothing_it_did_not_read(state, options, answers):
    assert (toolkit_state.state_for(state, params(**options)) is not None) is answers


@pytest.mark.parametrize("state, options", [
    (None, {"family": "Debian"}),
    (node_state(containerd_service=("not-found", "inactive", "")), {"family": "Debian"}),  # the module says why
    (node_state(), {"family": "Debian", "colour": "red"}),  # a bad option: the module refuses it in one line
    (node_state(), {"family": "RedHat"}),
    ({"family": None, "error": "neither dpkg nor rpm is installed"}, {"family": "Debian"}),
])
def test_the_filter_leaves_the_read_to_the_module_where_the_state_does_not_do(state, options):
    assert toolkit_plan(state, options) is None


@pytest.mark.parametrize("state, options", [("text", {"family": "Debian"}), (node_state(), ["family"])])
def test_the_filter_refuses_what_is_not_a_state_or_options(state, options):
    with pytest.raises(AnsibleFilterError):
        toolkit_plan(state, options)


@pytest.mark.parametrize("version", ["570.172.08", "570.172", "550.54.15", "1.20.0", "0.5.0", "570", "12.8", "172.08"])
def test_the_spec_summary_holds_a_version_exactly_when_the_spec_does(version):
    spec = ("cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ncontainerEdits:\n  env: [NVIDIA_VISIBLE_DEVICES=void]\n"
            "  mounts:\n  - hostPath: /usr/lib/x86_64-linux-gnu/libcuda.so.570.172.08\n"
            "  - hostPath: /usr/bin/nvidia-smi\n  hooks:\n  - args: [nvidia-cdi-hook, create-symlinks, --link,"
            " libcuda.so.1::/usr/lib/x86_64-linux-gnu/libcuda.so]\n")
    assert (version in toolkit_state.dotted_numbers(spec)) is (version in spec)
    assert len(toolkit_state.dotted_numbers(spec)) < len(spec) / 5
    assert toolkit_state.dotted_numbers(None) is None


def test_the_options_are_those_of_nvidia_container_toolkit_info():
    from ansible_collections.kubegpu.nvidia.plugins.modules import nvidia_container_toolkit_info as mod
    assert mod.toolkit_state.ARGUMENT_SPEC is toolkit_state.ARGUMENT_SPEC
    with pytest.raises(InputError) as caught:
        toolkit_state.check_params({"family": "Debian", "colour": "red"})
    assert "colour" in str(caught.value) and "\n" not in str(caught.value)
