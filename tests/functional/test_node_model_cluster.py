"""The node model end to end: k8s_gpu_node labels, the device plugin advertises, the capacity check agrees.

A playbook against the Kubernetes API test server (real HTTP, the real kubernetes client and kubernetes.core):
the role k8s_gpu_node labels every GPU host's node through k8s_gpu_label's device_plugin option (the
configuration resolved once by k8s_device_plugin's settings entry point), then the role k8s_device_plugin
deploys the plugin with the same configuration and checks every node's allocatable per resource name.

The test server's device plugin stand-in (tests/support/kubeapi/kubelet.py) works out what the real plugin
advertises on its own, from the ConfigMap and each node's config label and MIG layout, so the allocatable it
shows is an independent check of the model's; the labels are those GPU Feature Discovery v0.20 publishes
(the rules' unit tests: tests/unit/plugins/module_utils/test_node_model.py).
"""
import json
import uuid

import pytest

import ansible_run
from ansible_collections.kubegpu.nvidia.plugins.module_utils import device_plugin_config as dpc
from ansible_collections.kubegpu.nvidia.plugins.module_utils.node_model import NodeModel

kubernetes = pytest.importorskip("kubernetes")

SIMULATED = "kubegpu.io/simulated-gpus"
MIG = "kubegpu.io/simulated-mig-devices"
CONFIG = "nvidia.com/device-plugin.config"

PLAYBOOK = """
- name: Set the GPU facts
  hosts: gpu_nodes
  gather_facts: false
  tasks:
    - name: Set nvidia_gpu facts
      ansible.builtin.set_fact:
        nvidia_gpu: "{{ test_nvidia_gpu }}"
        cacheable: true

- name: Label and taint the GPU nodes
  hosts: gpu_nodes
  gather_facts: false
  roles:
    - role: kubegpu.nvidia.k8s_gpu_node
      vars:
        k8s_gpu_node_return_nodes: true

- name: Deploy the device plugin
  hosts: localhost
  gather_facts: false
  roles:
    - role: kubegpu.nvidia.k8s_device_plugin
      vars:
        k8s_device_plugin_nodes: "{{ hostvars[groups['gpu_nodes'] | first].k8s_gpu_node_result.nodes }}"
        k8s_device_plugin_wait_timeout: 20
        k8s_device_plugin_wait_delay: 1
"""


def mig(profile, memory, multiprocessors, slices, engines):
    copy_engines, decoder, encoder, jpeg, ofa = engines
    return {"profile": profile, "memory_mib": memory, "multiprocessors": multiprocessors,
            "slices": {"gi": slices[0], "ci": slices[1]},
            "engines": {"copy": copy_engines, "decoder": decoder, "encoder": encoder, "jpeg": jpeg, "ofa": ofa}}


def gpu(name, memory, cc, mig_mode=0, migs=None):
    mig_facts = ({"current": None, "pending": None, "devices": None} if mig_mode is None else
                 {"current": mig_mode, "pending": mig_mode, "devices": list(migs or []) if mig_mode else []})
    return {"name": name, "memory_mib": memory, "compute_capability": cc, "pci_class": "0x030200", "mig": mig_facts}


def facts(devices, driver="570.133.20", cuda="12.8"):
    return {"present": True, "count": len(devices), "source": "nvml", "driver_version": driver,
            "cuda_driver_version": cuda, "machine": "KubeGPU Lab Node",
            "devices": [dict(device, index=i) for i, device in enumerate(devices)]}


H100 = "NVIDIA H100 80GB HBM3"
ONE_G = mig("1g.10gb", 9856, 16, (1, 1), (1, 0, 0, 0, 0))
GB200_MIGS = [mig("1g.23gb+me", 23296, 20, (1, 1), (1, 1, 0, 1, 1)), mig("1g.23gb", 23296, 20, (1, 1), (1, 0, 0, 0, 0)),
              mig("2g.46gb", 46848, 40, (2, 2), (2, 1, 0, 1, 0)), mig("3g.93gb", 93952, 60, (3, 3), (3, 2, 0, 2, 0))]
A100_3G = mig("3g.20gb", 20096, 42, (3, 3), (3, 2, 0, 0, 0))

# host: (facts, MIG layout of the simulated node: per GPU None or its MIG devices' profiles)
HOSTS = {
    "t4": (facts([gpu("Tesla T4", 15360, "7.5", None)], "535.183.01", "12.2"), None),
    "h100": (facts([gpu(H100, 81559, "9.0")] * 8, "535.183.01", "12.2"), None),
    "gb200": (facts([gpu("NVIDIA GB200", 189471, "10.0", 1, GB200_MIGS)] + [gpu("NVIDIA GB200", 189471, "10.0")] * 3),
              [[m["profile"] for m in GB200_MIGS], None, None, None]),
    "h100mig": (facts([gpu(H100, 81559, "9.0", 1, [ONE_G] * 7)] * 2, "550.127.08", "12.4"),
                [["1g.10gb"] * 7, ["1g.10gb"] * 7]),
    "a100": (facts([gpu("NVIDIA A100-SXM4-40GB", 40960, "8.0", 1, [A100_3G, A100_3G])]
                   + [gpu("NVIDIA A100-SXM4-40GB", 40960, "8.0", 1)] * 3, "535.161.08", "12.2"),
             [["3g.20gb", "3g.20gb"], [], [], []]),
}


@pytest.fixture
def cluster(kube, kube_server, tmp_path):
    """The GPU hosts' nodes (simulated GPUs and MIG layouts), named apart from the hosts; the h100 by InternalIP."""
    suffix = uuid.uuid4().hex[:6]
    names = dict((host, "node-%s-%s" % (host, suffix)) for host in HOSTS)
    inventory = {"gpu_nodes": {"hosts": {}}, "all": {"hosts": {"localhost": {"ansible_connection": "local"}}}}
    for host, (gpu_facts, layout) in HOSTS.items():
        annotations = {SIMULATED: str(gpu_facts["count"])}
        if layout is not None:
            annotations[MIG] = json.dumps(layout)
        addresses = [{"type": "InternalIP", "address": "10.77.0.8"}] if host == "h100" else None
        kube.node(names[host], labels={"kubernetes.io/hostname": names[host]}, annotations=annotations,
                  addresses=addresses)
        hostvars = {"ansible_connection": "local", "test_nvidia_gpu": gpu_facts}
        if host == "h100":
            hostvars["ansible_host"] = "10.77.0.8"  # found by address
        else:
            hostvars["k8s_gpu_node_name"] = names[host]
        inventory["gpu_nodes"]["hosts"][host] = hostvars
    (tmp_path / "inventory.json").write_text(json.dumps(inventory))
    (tmp_path / "site.yml").write_text(PLAYBOOK)
    settings = {
        "k8s_device_plugin_configs": {
            "t4-shared": {"sharing_strategy": "time-slicing", "replicas": 4},
            "mixed": {"mig_strategy": "mixed"},
            "single-shared": {"mig_strategy": "single", "sharing_strategy": "time-slicing", "replicas": 2,
                              "rename_by_default": True},
            "mps": {"sharing_strategy": "mps", "replicas": 2}},
        "k8s_device_plugin_product_configs": {"Tesla-T4": "t4-shared", "NVIDIA-GB200": "mixed"},
        "k8s_device_plugin_node_configs": {names["a100"]: "mixed", names["h100mig"]: "single-shared",
                                           names["h100"]: "mps"},
    }
    return {"dir": tmp_path, "names": names, "core": kube.core(), "kubeconfig": kube.kubeconfig, "settings": settings}


def play(cluster, settings):
    res = ansible_run.run_playbook(cluster["dir"] / "site.yml", cluster["dir"] / "inventory.json", settings,
                                   kubeconfig=cluster["kubeconfig"], timeout=300)
    return res


def gpu_labels(node):
    return dict((k, v) for k, v in (node.metadata.labels or {}).items() if k.startswith("nvidia.com/"))


def gpu_allocatable(node):
    return dict((k, int(v)) for k, v in (node.status.allocatable or {}).items() if k.startswith("nvidia.com/"))


def model_of(settings):
    return NodeModel(dpc.resolve(configs=settings["k8s_device_plugin_configs"],
                                 product_configs=settings["k8s_device_plugin_product_configs"],
                                 node_configs=settings["k8s_device_plugin_node_configs"]))


def test_every_node_ends_with_the_models_labels_and_the_plugin_advertises_its_allocatable(cluster):
    res = play(cluster, cluster["settings"])
    tasks = res.task_hosts()
    assert res.rc == 0, [(name, h) for name, hosts in tasks.items() for h in hosts.values() if h.get("failed")]
    core, names, model = cluster["core"], cluster["names"], model_of(cluster["settings"])
    for host, (gpu_facts, _layout) in HOSTS.items():
        node = core.read_node(names[host])
        want = model.node(gpu_facts, names[host])
        # the labels the module wrote are the model's (GFD's for that config), with the config named
        assert gpu_labels(node) == dict(want["labels"], **{CONFIG: want["config"]}), host
        # the device plugin stand-in, from the ConfigMap and the config label alone, advertises what the model says
        assert gpu_allocatable(node) == want["allocatable"], host

    t4 = gpu_labels(core.read_node(names["t4"]))
    assert (t4[CONFIG], t4["nvidia.com/gpu.product"], t4["nvidia.com/gpu.replicas"],
            t4["nvidia.com/gpu.sharing-strategy"]) == ("t4-shared", "Tesla-T4-SHARED", "4", "time-slicing")
    assert gpu_allocatable(core.read_node(names["t4"])) == {"nvidia.com/gpu": 4}
    h100 = gpu_labels(core.read_node(names["h100"]))
    assert (h100["nvidia.com/mps.capable"], h100["nvidia.com/gpu.sharing-strategy"]) == ("true", "mps")
    assert gpu_allocatable(core.read_node(names["h100mig"])) == {"nvidia.com/gpu.shared": 28}
    assert gpu_labels(core.read_node(names["h100mig"]))["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb"
    gb200 = core.read_node(names["gb200"])
    assert gpu_labels(gb200)["nvidia.com/mig-1g.23gb.me.count"] == "1"
    assert gpu_allocatable(gb200) == {"nvidia.com/gpu": 3, "nvidia.com/mig-1g.23gb.me": 1, "nvidia.com/mig-1g.23gb": 1,
                                      "nvidia.com/mig-2g.46gb": 1, "nvidia.com/mig-3g.93gb": 1}
    assert gpu_allocatable(core.read_node(names["a100"])) == {"nvidia.com/mig-3g.20gb": 2}
    # the role's capacity check read the same model: every node ok
    record = res.tasks().get("Record the GPU capacity per node and the revision of the DaemonSet")
    capacity = record["ansible_facts"]["k8s_device_plugin_capacity"]
    assert sorted((c["host"], c["ok"]) for c in capacity) == sorted((host, True) for host in HOSTS)

    again = play(cluster, cluster["settings"])
    assert again.rc == 0
    changed = [name for name, hosts in again.task_hosts().items() if any(h.get("changed") for h in hosts.values())]
    assert changed == []


def test_mps_for_a_mig_node_fails_before_any_node_is_written(cluster):
    settings = json.loads(json.dumps(cluster["settings"]))
    settings["k8s_device_plugin_node_configs"][cluster["names"]["gb200"]] = "mps"
    before = dict((host, cluster["core"].read_node(name).metadata.resource_version)
                  for host, name in cluster["names"].items())
    res = play(cluster, settings)
    assert res.rc != 0
    failed = [(name, h) for name, hosts in res.task_hosts().items() for h in hosts.values() if h.get("failed")]
    assert len(failed) == 1
    name, result = failed[0]
    # the settings check of k8s_device_plugin's entry point, before the label call
    assert name.endswith("Check the device plugin settings")
    assert result["msg"].startswith("k8s_device_plugin settings: node %s gets device plugin config mps: MPS sharing "
                                    "is not supported on MIG-enabled GPUs" % cluster["names"]["gb200"])
    after = dict((host, cluster["core"].read_node(name).metadata.resource_version)
                 for host, name in cluster["names"].items())
    assert after == before


def test_a_bad_setting_fails_in_the_settings_check_with_one_line(cluster):
    settings = dict(cluster["settings"], k8s_device_plugin_product_configs={"Tesla-T4": "t4-sliced"})
    res = play(cluster, settings)
    assert res.rc != 0
    failed = [(name, h) for name, hosts in res.task_hosts().items() for h in hosts.values() if h.get("failed")]
    name, result = failed[0]
    assert name.endswith("Check the device plugin settings")
    assert result["msg"] == ("k8s_device_plugin settings: product config Tesla-T4 names config t4-sliced, which is not "
                             "defined (configs: default, mixed, mps, single-shared, t4-shared)")
    assert all(not gpu_labels(cluster["core"].read_node(name)) for name in cluster["names"].values())


def test_the_retired_sharing_variables_are_named_with_what_to_set_instead(cluster):
    settings = dict(cluster["settings"], k8s_gpu_node_replicas=4, k8s_gpu_node_sharing_strategy="time-slicing")
    res = play(cluster, settings)
    assert res.rc != 0
    failed = [(name, h) for name, hosts in res.task_hosts().items() for h in hosts.values() if h.get("failed")]
    name, result = failed[0]
    assert name.endswith("Check the role's input")
    assert " ".join(result["msg"].split()) == (
        "k8s_gpu_node_replicas, k8s_gpu_node_sharing_strategy no longer used: set k8s_device_plugin_replicas, "
        "k8s_device_plugin_sharing_strategy (or that setting of a k8s_device_plugin_configs entry) instead; the device "
        "plugin's settings now give both the node labels and the plugin's configs")
    assert all(not gpu_labels(cluster["core"].read_node(name)) for name in cluster["names"].values())
