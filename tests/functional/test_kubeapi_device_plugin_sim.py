"""The test server's device plugin stand-in resolves its config as the real device plugin v0.20 does.

Simulated GPU nodes (kubegpu.io/simulated-gpus, and kubegpu.io/simulated-mig-devices for their MIG layout) get
what the plugin advertises under the config their nvidia.com/device-plugin.config label picks (test server only).
Expectations from NVIDIA/k8s-device-plugin v0.20.0: internal/rm/device_map.go (strategies, replicas, MIG
validity), internal/rm/rm.go AddDefaultResourcesToConfig (mixed: profiles with c == g), api/config/v1/replicas.go
(replicas >= 2, "no resources specified"), api/config/v1/config.go DisableResourceNamingInConfig (renameByDefault
gives <name>.shared, a per-entry rename is ignored), cmd/nvidia-device-plugin/main.go validateFlags (MPS with
mixed).
"""
import json

import pytest
import yaml

kubernetes = pytest.importorskip("kubernetes")

SIMULATED = "kubegpu.io/simulated-gpus"
MIG = "kubegpu.io/simulated-mig-devices"
LABEL = "nvidia.com/device-plugin.config"


def config(mig="none", sharing=None, rename=False, resources=(("nvidia.com/gpu", 4),), rename_entry=None):
    doc = {"version": "v1", "flags": {"migStrategy": mig}}
    if sharing:
        entries = [{"name": name, "replicas": replicas} for name, replicas in resources]
        if rename_entry:
            entries[0]["rename"] = rename_entry
        doc["sharing"] = {sharing: {"renameByDefault": rename, "resources": entries}}
    return yaml.safe_dump(doc)


CONFIGS = {
    "default": config(),
    "ts": config(sharing="timeSlicing"),
    "ts-rename": config(sharing="timeSlicing", rename=True),
    "ts-entry-rename": config(sharing="timeSlicing", rename_entry="nvidia.com/gpu.half"),
    "mps": config(sharing="mps", resources=(("nvidia.com/gpu", 2),)),
    "single": config(mig="single"),
    "single-ts": config(mig="single", sharing="timeSlicing", resources=(("nvidia.com/gpu", 2),)),
    "mixed": config(mig="mixed"),
    "mixed-ts": config(mig="mixed", sharing="timeSlicing", rename=True,
                       resources=(("nvidia.com/mig-1g.10gb.me", 2), ("nvidia.com/gpu", 3))),
    "ts-one": config(sharing="timeSlicing", resources=(("nvidia.com/gpu", 1),)),
    "ts-empty": "version: v1\nsharing:\n  timeSlicing:\n    resources: []\n",
    "mps-mixed": config(mig="mixed", sharing="mps", resources=(("nvidia.com/gpu", 2),)),
}


@pytest.fixture
def plugin(kube, kube_server):
    """A namespace with the configs and a device plugin DaemonSet that runs on every node."""
    ns = kube.namespace()
    core = kube.core()
    core.create_namespaced_config_map(ns, {"metadata": {"name": "configs"}, "data": dict(CONFIGS)})
    spec = {"containers": [
        {"name": "plugin", "image": "nvcr.io/nvidia/k8s-device-plugin:v0.20.0"},
        {"name": "config-manager", "image": "nvcr.io/nvidia/k8s-device-plugin:v0.20.0",
         "env": [{"name": "NODE_LABEL", "value": LABEL}, {"name": "DEFAULT_CONFIG", "value": "default"}]}],
        "volumes": [{"name": "dp", "hostPath": {"path": "/var/lib/kubelet/device-plugins"}},
                    {"name": "available-configs", "configMap": {"name": "configs"}}]}
    kube.apps().create_namespaced_daemon_set(ns, {"metadata": {"name": "nvdp"}, "spec": {
        "selector": {"matchLabels": {"app": "nvdp"}},
        "template": {"metadata": {"labels": {"app": "nvdp"}}, "spec": spec}}})
    return core


def gpu_node(kube, config_name, gpus, layout=None):
    annotations = {SIMULATED: str(gpus)}
    if layout is not None:
        annotations[MIG] = json.dumps(layout)
    return kube.node(labels={LABEL: config_name}, annotations=annotations)


def advertised(core, name):
    return dict((k, v) for k, v in (core.read_node(name).status.allocatable or {}).items() if k.startswith("nvidia.com/"))


GB200 = [["1g.23gb+me", "1g.23gb", "2g.46gb", "3g.93gb"], None, None, None]
H100_ME = [["1g.10gb+me", "1g.10gb", "2g.20gb", "3g.40gb"], ["7g.80gb"]]
UNIFORM = [["1g.10gb"] * 7, ["1g.10gb"] * 7]


@pytest.mark.parametrize("config_name, gpus, layout, expected", [
    ("default", 8, None, {"nvidia.com/gpu": "8"}),
    ("ts", 2, None, {"nvidia.com/gpu": "8"}),
    ("ts-rename", 2, None, {"nvidia.com/gpu.shared": "8"}),
    ("ts-entry-rename", 1, None, {"nvidia.com/gpu": "4"}),  # the per-entry rename is ignored
    ("mps", 1, None, {"nvidia.com/gpu": "2"}),
    # strategy none: MIG-enabled GPUs are whole GPUs to the plugin
    ("default", 4, GB200, {"nvidia.com/gpu": "4"}),
    ("ts", 2, H100_ME, {"nvidia.com/gpu": "8"}),
    # single: the MIG devices, shared by the nvidia.com/gpu entry
    ("single", 2, UNIFORM, {"nvidia.com/gpu": "14"}),
    ("single-ts", 2, UNIFORM, {"nvidia.com/gpu": "28"}),
    ("single", 2, None, {"nvidia.com/gpu": "2"}),
    # mixed: the full GPUs and one resource per profile ("+" as "."), shared per entry
    ("mixed", 4, GB200, {"nvidia.com/gpu": "3", "nvidia.com/mig-1g.23gb.me": "1", "nvidia.com/mig-1g.23gb": "1",
                         "nvidia.com/mig-2g.46gb": "1", "nvidia.com/mig-3g.93gb": "1"}),
    ("mixed-ts", 2, H100_ME, {"nvidia.com/mig-1g.10gb.me.shared": "2", "nvidia.com/mig-1g.10gb": "1",
                              "nvidia.com/mig-2g.20gb": "1", "nvidia.com/mig-3g.40gb": "1",
                              "nvidia.com/mig-7g.80gb": "1"}),
])
def test_the_plugin_advertises_what_the_config_gives(kube, plugin, config_name, gpus, layout, expected):
    name = gpu_node(kube, config_name, gpus, layout)
    assert advertised(plugin, name) == expected


@pytest.mark.parametrize("config_name, gpus, layout", [
    ("ts-one", 1, None),               # replicas < 2 does not parse
    ("ts-empty", 1, None),             # a sharing block without resources
    ("mps-mixed", 1, None),            # MPS with mixed
    ("mps", 4, GB200),                 # MPS on MIG-enabled GPUs
    ("single", 4, GB200),              # MIG on next to MIG off
    ("single", 2, H100_ME),            # more than one profile
    ("single", 2, [["3g.20gb"], []]),  # a MIG-enabled GPU without MIG devices
    ("mixed", 1, [["1c.3g.20gb"]]),    # a profile with fewer compute than GPU slices has no resource
    ("missing", 1, None),              # a config name the ConfigMap does not have
])
def test_a_config_the_plugin_refuses_leaves_the_node_without_gpus(kube, plugin, config_name, gpus, layout):
    name = gpu_node(kube, config_name, gpus, layout)
    assert advertised(plugin, name) == {}
    pod = plugin.list_pod_for_all_namespaces(field_selector="spec.nodeName=" + name).items[0]
    assert [c.status for c in pod.status.conditions if c.type == "Ready"] == ["False"]


def test_a_relabelled_node_follows_its_new_config(kube, plugin):
    name = gpu_node(kube, "default", 2)
    assert advertised(plugin, name) == {"nvidia.com/gpu": "2"}
    plugin.patch_node(name, {"metadata": {"labels": {LABEL: "ts-rename"}}})
    assert advertised(plugin, name) == {"nvidia.com/gpu.shared": "8"}


# ------------------------------------------------------------------ the MIG layout from the node's fake NVML
NVML = "kubegpu.io/simulated-nvml"


@pytest.fixture(scope="module")
def fakenvml_lib():
    import pathlib  # pylint: disable=import-outside-toplevel
    import subprocess  # pylint: disable=import-outside-toplevel

    root = pathlib.Path(__file__).resolve().parents[2]
    out = subprocess.run([str(root / "scripts" / "build-fakenvml.sh")], check=True, capture_output=True, text=True)
    return pathlib.Path(out.stdout.strip().splitlines()[-1]) / "full"


def test_mig_resources_follow_the_nodes_nvml_state(kube, plugin, fakenvml_lib, tmp_path):
    """The node's MIG devices come from its fake NVML (profile + state file), as a real device plugin reads them
    from NVML: a MIG change made through NVML (here the boot-time apply, module_utils/mig_boot.py, over the real
    pynvml) shows up in allocatable once the node is reconciled again."""
    import os  # pylint: disable=import-outside-toplevel
    import subprocess  # pylint: disable=import-outside-toplevel
    import sys  # pylint: disable=import-outside-toplevel

    from fakenvml.profile import PROFILES  # pylint: disable=import-outside-toplevel

    profile, state = PROFILES / "a100x4-mig.conf", tmp_path / "node.state"
    name = kube.node(labels={LABEL: "mixed"}, annotations={
        SIMULATED: "4", NVML: json.dumps({"config": str(profile), "state": str(state)})})
    # no state written yet: the profile's own layout (GPU 0: 3g.20gb x2, the other three MIG-enabled and empty)
    assert advertised(plugin, name) == {"nvidia.com/mig-3g.20gb": "2"}
    declaration = tmp_path / "mig.yaml"
    declaration.write_text(json.dumps({"config": "all-balanced"}))
    env = dict(os.environ, LD_LIBRARY_PATH=str(fakenvml_lib), FAKENVML_CONFIG=str(profile), FAKENVML_STATE=str(state),
               PYTHONPATH=os.pathsep.join(sys.path))
    applied = subprocess.run([sys.executable, "-m", "ansible_collections.kubegpu.nvidia.plugins.module_utils.mig_boot",
                              str(declaration)], env=env, capture_output=True, text=True, timeout=120, check=False)
    assert applied.returncode == 0, applied.stderr
    plugin.patch_node(name, {"metadata": {"labels": {"example.com/touched": "1"}}})
    assert advertised(plugin, name) == {"nvidia.com/mig-1g.5gb": "8", "nvidia.com/mig-2g.10gb": "4",
                                        "nvidia.com/mig-3g.20gb": "4"}


def test_a_node_whose_nvml_files_cannot_be_read_falls_back_to_its_declared_layout(kube, plugin, tmp_path):
    name = kube.node(labels={LABEL: "mixed"}, annotations={
        SIMULATED: "2", MIG: json.dumps(UNIFORM),
        NVML: json.dumps({"config": str(tmp_path / "absent.conf"), "state": str(tmp_path / "absent.state")})})
    assert advertised(plugin, name) == {"nvidia.com/mig-1g.10gb": "14"}
