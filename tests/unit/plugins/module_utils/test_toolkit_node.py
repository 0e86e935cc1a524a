# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.nvidia maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""toolkit_node: the decisions of the role nvidia_container_toolkit, one function at a time."""

from __future__ import absolute_import, division, print_function

import hashlib
import os

import pytest
import yaml

from ansible_collections.kubegpu.nvidia.plugins.module_utils import toolkit_node as node
from ansible_collections.kubegpu.nvidia.plugins.module_utils.errors import InputError, KubegpuError

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
SETTINGS = {"runtime_name": "nvidia", "runtime_path": "/usr/bin/nvidia-container-runtime", "set_as_default": False,
            "cdi": None, "backup": True, "validate": True, "containerd_mode": "in_place", "config_paths": {}}


def states(**units):
    """{unit.service: props} with every runtime unit absent except those given as name=(active, enabled)."""
    out = {}
    for unit in node.unit_names() + [node.CDI_REFRESH_PATH]:
        out[unit] = {"LoadState": "not-found", "ActiveState": "inactive", "UnitFileState": ""}
    for name, (active, enabled) in units.items():
        out["%s.service" % name.replace("_", "-")] = {"LoadState": "loaded", "ActiveState": "active" if active else "inactive",
                                                      "UnitFileState": "enabled" if enabled else "disabled"}
    return out


def test_the_collection_version_is_galaxys():
    with open(os.path.join(ROOT, "galaxy.yml")) as handle:
        assert node.COLLECTION_VERSION == yaml.safe_load(handle)["version"]


def test_systemctl_show_blocks_map_to_the_units_in_order():
    text = ("ActiveState=active\nLoadState=loaded\nUnitFileState=enabled\n\n"
            "LoadState=not-found\nActiveState=inactive\nUnitFileState=\n")
    parsed = node.parse_unit_states(text, ["containerd.service", "docker.service"])
    assert parsed["containerd.service"] == {"LoadState": "loaded", "ActiveState": "active", "UnitFileState": "enabled"}
    assert parsed["docker.service"]["LoadState"] == "not-found"
    with pytest.raises(KubegpuError, match="reported 2 units for the 3 asked"):
        node.parse_unit_states(text, ["a", "b", "c"])


@pytest.mark.parametrize("units, selected", [
    ({"containerd": (True, True)}, ["containerd"]),
    ({"docker": (False, True), "containerd": (True, False)}, ["containerd", "docker"]),  # containerd first
    ({"k3s_agent": (True, True)}, ["k3s"]),
    ({"rke2_server": (False, True), "crio": (True, True)}, ["rke2", "crio"]),
    ({"containerd": (False, False), "docker": (True, False)}, ["docker"]),  # installed but neither running nor enabled
])
def test_runtimes_are_detected_from_running_or_enabled_services(units, selected):
    assert node.select_runtimes([], states(**units)) == selected


def test_named_runtimes_win_and_are_put_in_order():
    assert node.select_runtimes(["docker", "containerd"], states()) == ["containerd", "docker"]


def test_an_unknown_runtime_name_and_no_runtime_at_all_fail_with_one_line():
    with pytest.raises(InputError, match="Unknown container runtime.s. podman in nvidia_container_toolkit_runtimes: choose "
                                         "from containerd, k3s, rke2, crio, docker"):
        node.select_runtimes(["podman"], states())
    with pytest.raises(KubegpuError, match="No container runtime .* runs or is enabled on this node"):
        node.select_runtimes([], states())


def test_the_unit_restarted_is_the_one_systemd_knows():
    present = node.present_units(states(k3s_agent=(True, True)))
    assert present == ["k3s-agent"]
    assert node.service_for("k3s", present) == "k3s-agent"
    assert node.service_for("rke2", present) == "rke2-server"


def test_configure_args_per_runtime():
    assert node.configure_args("containerd", SETTINGS) == {
        "runtime": "containerd", "flavor": "containerd", "path": "/etc/containerd/config.toml", "mode": "in_place",
        "runtime_name": "nvidia", "runtime_path": "/usr/bin/nvidia-container-runtime", "set_as_default": False,
        "backup": True, "state": "present", "validate": "containerd --config %s config dump"}
    assert node.configure_args("docker", dict(SETTINGS, cdi=True)) == {
        "runtime": "docker", "path": "/etc/docker/daemon.json", "runtime_name": "nvidia", "cdi": True,
        "runtime_path": "/usr/bin/nvidia-container-runtime", "set_as_default": False, "backup": True, "state": "present"}
    drop_in = node.configure_args("containerd", dict(SETTINGS, containerd_mode="drop_in"))
    # a drop-in is validated as part of the main file's imports, not alone
    assert drop_in["drop_in_path"] == "/etc/containerd/conf.d/99-nvidia.toml" and "validate" not in drop_in
    k3s = node.configure_args("k3s", dict(SETTINGS, config_paths={"k3s": "/srv/k3s/config.toml.tmpl"}))
    assert (k3s["flavor"], k3s["path"], k3s["mode"]) == ("k3s", "/srv/k3s/config.toml.tmpl", "in_place")


def test_the_record_key_changes_with_every_argument_and_the_collection_version(monkeypatch):
    args = node.configure_args("containerd", SETTINGS)
    base = node.record_key(args)
    assert base == node.record_key(dict(args))
    for key, value in [("runtime_name", "nv"), ("set_as_default", True), ("backup", False), ("mode", "drop_in"),
                       ("path", "/etc/c.toml"), ("cdi", True)]:
        assert node.record_key(dict(args, **{key: value})) != base, key
    monkeypatch.setattr(node, "COLLECTION_VERSION", "1.1.0")
    assert node.record_key(args) != base


def test_a_runtime_is_in_place_when_its_key_and_every_checksum_match(tmp_path):
    config, drop_in = tmp_path / "config.toml", tmp_path / "99-nvidia.toml"
    config.write_text("version = 2\n")
    drop_in.write_text("x = 1\n")
    sums = {str(config): hashlib.sha256(b"version = 2\n").hexdigest(), str(drop_in): hashlib.sha256(b"x = 1\n").hexdigest()}
    rows = node.parse_record("\n".join([
        node.RECORD_HEADER,
        "containerd k1 %s %s" % (config, sums[str(config)]),
        "containerd k1 %s %s" % (drop_in, sums[str(drop_in)]),
        "docker k2 /nonexistent/daemon.json -",
        "short line",
    ]))
    assert len(rows) == 3
    assert node.runtimes_in_place(rows, {"containerd": "k1", "docker": "k2"}) == ["containerd", "docker"]
    # another key (settings or collection version), a file changed since, no rows: the module runs
    assert node.runtimes_in_place(rows, {"containerd": "other"}) == []
    drop_in.write_text("x = 2\n")
    assert node.runtimes_in_place(rows, {"containerd": "k1", "crio": "k3"}) == []


def test_the_record_keeps_the_rows_of_runtimes_the_module_did_not_run_for():
    rows = [["docker", "k2", "/etc/docker/daemon.json", "d" * 64], ["containerd", "old", "/etc/c.toml", "-"]]
    results = [{"item": {"name": "containerd"}, "checksums": {"/etc/c.toml": "c" * 64, "/etc/conf.d/99.toml": None}},
               {"item": {"name": "docker"}, "skipped": True}]
    text = node.record_text(results, {"containerd": "k1", "docker": "k2"}, rows)
    assert text.splitlines() == [node.RECORD_HEADER, "containerd k1 /etc/c.toml " + "c" * 64,
                                 "containerd k1 /etc/conf.d/99.toml -", "docker k2 /etc/docker/daemon.json " + "d" * 64]


def test_packages_wanted_and_what_the_package_manager_is_asked_for():
    installed = node.parse_dpkg_query("nvidia-container-toolkit ii  1.20.0-1\nlibnvidia-container1 rc  1.17.8-1\n"
                                      "nvidia-container-toolkit-base ii  1.18.1-1\n")
    assert installed == {"nvidia-container-toolkit": "1.20.0-1", "nvidia-container-toolkit-base": "1.18.1-1"}
    packages = ["nvidia-container-toolkit", "nvidia-container-toolkit-base", "libnvidia-container1"]
    assert node.packages_wanted(installed, packages, "1.20.0-1") == ["nvidia-container-toolkit-base", "libnvidia-container1"]
    assert node.packages_wanted(installed, packages, "") == ["libnvidia-container1"]
    assert node.package_specs(packages[:1], "1.20.0-1", "apt") == ["nvidia-container-toolkit=1.20.0-1"]
    assert node.package_specs(packages[:1], "1.20.0-1", "dnf") == ["nvidia-container-toolkit-1.20.0-1"]
    assert node.package_specs(packages[:1], "", "dnf") == ["nvidia-container-toolkit"]
    assert node.parse_rpm_query("nvidia-container-toolkit 1.20.0-1\npackage libnvidia-container1 is not installed\n") == {
        "nvidia-container-toolkit": "1.20.0-1"}


@pytest.mark.parametrize("text, version", [
    ("k3s version v1.30.4+k3s1 (98262b5d)\ngo version go1.22.5", (1, 30, 4)),
    ("rke2 version v1.29.0+rke2r1 (4fd30c26)", (1, 29, 0)),
    ("1.18.0~rc.1-1", (1, 18, 0)),
    ("NVIDIA Container Toolkit CLI version 1.20.0", (1, 20, 0)),
    ("", None),
])
def test_versions_are_read_from_what_the_tools_print(text, version):
    assert node.version_tuple(text) == version


@pytest.mark.parametrize("mode, version, settings, detection", [
    ("auto", "k3s version v1.29.0+k3s1 (x)", {}, True),
    ("auto", "k3s version v1.28.5+k3s1 (x)", {}, False),   # the template for versions before detection with --default-runtime
    ("auto", "", {}, False),                                # version unknown: the template
    ("auto", "k3s version v1.31.1+k3s1", {"runtime_name": "gpu"}, False),       # k3s names its runtimes itself
    ("auto", "k3s version v1.31.1+k3s1", {"runtime_path": "/opt/nv/runtime"}, False),
    ("auto", "k3s version v1.31.1+k3s1", {"cdi": True}, False),
    ("auto", "k3s version v1.31.1+k3s1", {"config_paths": {"k3s": "/x.tmpl"}}, False),
    ("auto", "k3s version v1.31.1+k3s1",
     {"runtime_name": "nvidia-cdi", "runtime_path": "/usr/bin/nvidia-container-runtime.cdi"}, True),
    ("always", "k3s version v1.26.1+k3s1", {}, True),
    ("never", "k3s version v1.31.1+k3s1", {}, False),
])
def test_k3s_finds_the_nvidia_runtime_itself_from_v1_29_with_the_standard_name_and_binary(mode, version, settings, detection):
    found, reason = node.k3s_detection("k3s", mode, version, dict(SETTINGS, **settings))
    assert found is detection, reason
    assert reason and "\n" not in reason


def test_the_k3s_default_runtime_drop_in():
    path, content = node.k3s_drop_in("rke2", dict(SETTINGS, set_as_default=True))
    assert path == "/etc/rancher/rke2/config.yaml.d/90-kubegpu-nvidia-runtime.yaml"
    assert yaml.safe_load(content) == {"default-runtime": "nvidia"}
    assert node.k3s_drop_in("k3s", SETTINGS) == ("/etc/rancher/k3s/config.yaml.d/90-kubegpu-nvidia-runtime.yaml", None)


def test_a_generated_config_has_the_runtime_as_k3s_writes_it():
    generated = ('[plugins."io.containerd.grpc.v1.cri".containerd]\n  default_runtime_name = "nvidia"\n'
                 '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes."nvidia"]\n  runtime_type = "io.containerd.runc.v2"\n')
    assert node.generated_has_runtime(generated, "nvidia", as_default=True)
    assert not node.generated_has_runtime(generated.replace('default_runtime_name = "nvidia"', ""), "nvidia", True)
    assert node.generated_has_runtime("[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.'nvidia']\n", "nvidia")
    assert not node.generated_has_runtime("[plugins.x.containerd.runtimes.runc]\n", "nvidia")
    assert not node.generated_has_runtime(None, "nvidia")


def cdi(enabled=True, version="1.20.0-1", units=None, spec=None, driver="535.183.01", refresh_spec=False):
    return node.cdi_plan(enabled, version, units or states(), "/etc/cdi/nvidia.yaml", driver, spec, refresh_spec)


def test_cdi_with_toolkit_1_18_and_newer_uses_the_refresh_units():
    plan = cdi()
    assert (plan["mode"], plan["action"], plan["spec_path"]) == ("refresh", "refresh", "/var/run/cdi/nvidia.yaml")
    running = states()
    running[node.CDI_REFRESH_PATH] = {"LoadState": "loaded", "ActiveState": "active", "UnitFileState": "enabled"}
    assert cdi(units=running, refresh_spec=True)["action"] == "none"
    # the spec is gone, or the unit is not running: act
    assert cdi(units=running)["action"] == "refresh"
    # an installed unit counts whatever version is pinned
    assert cdi(version="", units=running, refresh_spec=True)["mode"] == "refresh"


def test_cdi_with_an_older_toolkit_generates_the_spec_when_the_driver_changes():
    assert cdi(version="1.17.8-1")["action"] == "generate"                                        # no spec
    assert cdi(version="1.17.8-1", spec="libcuda.so.535.183.01\n")["action"] == "none"            # current
    stale = cdi(version="1.17.8-1", spec="libcuda.so.535.161.08\n")
    assert stale["action"] == "generate" and "does not name the loaded driver 535.183.01" in stale["reason"]
    assert cdi(enabled=False)["mode"] == "off"


# ------------------------------------------------------------------ several NVIDIA runtimes together
THREE = [{"name": "nvidia", "default": True}, {"name": "nvidia-cdi", "mode": "cdi"}, {"name": "nvidia-legacy", "mode": "legacy"}]


def test_several_runtimes_are_handed_to_the_module_as_its_runtimes_list():
    # as the GPU Operator's toolkit installer configures them (cmd/nvidia-ctk-installer/container/operator/operator.go)
    settings = dict(SETTINGS, nvidia_runtimes=THREE, config_source="command")
    args = node.configure_args("containerd", settings)
    assert args["runtimes"] == [{"name": "nvidia", "default": True}, {"name": "nvidia-cdi", "mode": "cdi", "default": False},
                                {"name": "nvidia-legacy", "mode": "legacy", "default": False}]
    assert "runtime_name" not in args and "runtime_path" not in args and "set_as_default" not in args
    assert args["config_source"] == "command"
    # Docker has no command for its effective configuration (daemon.json is all of it)
    assert "config_source" not in node.configure_args("docker", settings)
    assert node.nvidia_runtimes(settings) == [
        {"name": "nvidia", "path": "/usr/bin/nvidia-container-runtime", "mode": None, "default": True},
        {"name": "nvidia-cdi", "path": "/usr/bin/nvidia-container-runtime.cdi", "mode": "cdi", "default": False},
        {"name": "nvidia-legacy", "path": "/usr/bin/nvidia-container-runtime.legacy", "mode": "legacy", "default": False}]
    # without the list: the one runtime of runtime_name, runtime_path and set_as_default
    assert node.nvidia_runtimes(SETTINGS) == [{"name": "nvidia", "path": "/usr/bin/nvidia-container-runtime", "mode": None,
                                              "default": False}]


@pytest.mark.parametrize("runtimes, message", [
    ([{"mode": "cdi"}], r"nvidia_runtimes\[0\]: every runtime needs a name"),
    ([{"name": "nvidia", "runtime": "x"}], r"unknown key\(s\) runtime"),
    ([{"name": "nvidia", "mode": "jit"}], r"mode must be auto, cdi or legacy, not 'jit'"),
    ([{"name": "nvidia"}, {"name": "nvidia", "mode": "cdi"}], "names nvidia more than once"),
    ([{"name": "a", "default": True}, {"name": "b", "default": True}], "at most one runtime can be the default .a, b are."),
])
def test_a_runtimes_list_the_module_would_refuse_is_refused_before_the_node_changes(runtimes, message):
    with pytest.raises(InputError, match=message):
        node.nvidia_runtimes(dict(SETTINGS, nvidia_runtimes=runtimes))


def test_k3s_finds_nvidia_and_nvidia_cdi_but_not_nvidia_legacy():
    found, _reason = node.k3s_detection("k3s", "auto", "k3s version v1.30.0+k3s1", dict(SETTINGS, nvidia_runtimes=THREE[:2]))
    assert found is True
    assert node.k3s_drop_in("k3s", dict(SETTINGS, nvidia_runtimes=THREE[:2]))[1].endswith("default-runtime: nvidia\n")
    found, reason = node.k3s_detection("k3s", "auto", "k3s version v1.30.0+k3s1", dict(SETTINGS, nvidia_runtimes=THREE))
    assert found is False and "nvidia-legacy" in reason
