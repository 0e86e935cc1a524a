"""Benchmark: the node model for 5,000 GPU nodes in-process, and print the figures.

For a cluster of N GPU nodes (by default 5,000) of five kinds in turn (8x H100, 4x A100 with MIG and MIG devices,
1x T4, 8x B200, 4x GB200 with a media-extension MIG profile), under a device plugin configuration with per-product
time-slicing, a MIG mixed config, a per-node MPS config and renameByDefault:

  resolve     the role variables resolved once (module_utils/device_plugin_config.resolve)
  labels      every node's labels as k8s_gpu_label works them out (the facts as the role k8s_gpu_node passes them,
              through the filter gpu_node_requests's label_facts; GFD labels + the config label + accelerator)
  model       every node's full model (config, labels, allocatable per resource name)
  capacity    the device plugin role's check: the filter gpu_node_capacity over N hosts and N nodes (host to node
              match as k8s_gpu_label's, expected against advertised)

Each figure is the best of --repeat runs (wall clock, one process, no Ansible start-up). Target: the model for
N nodes in under 1 s, printed as "met" or "MISSED" (exit status 1 when missed).

    python bench/node_model.py [--nodes 5000] [--repeat 5]
"""
import argparse
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for _path in (os.path.join(ROOT, ".cache", "collections"),):
    if _path not in sys.path:
        sys.path.insert(0, _path)

from ansible_collections.kubegpu.nvidia.plugins.filter.device_plugin import gpu_node_capacity  # noqa: E402
from ansible_collections.kubegpu.nvidia.plugins.filter.gpu_node_requests import label_facts  # noqa: E402
from ansible_collections.kubegpu.nvidia.plugins.module_utils import device_plugin_config as dpc  # noqa: E402
from ansible_collections.kubegpu.nvidia.plugins.module_utils.node_model import NodeModel  # noqa: E402
from ansible_collections.kubegpu.nvidia.plugins.modules.k8s_gpu_label import labels_from_facts  # noqa: E402

TARGET_S = 1.0


def mig(profile, memory, multiprocessors, gi, ci, engines):
    return {"slot": 0, "name": "MIG " + profile, "profile": profile, "uuid": "MIG-x", "memory_mib": memory,
            "multiprocessors": multiprocessors, "slices": {"gi": gi, "ci": ci},
            "engines": dict(zip(("copy", "decoder", "encoder", "jpeg", "ofa"), engines))}


def device(index, name, memory, cc, mig_mode, migs=None):
    return {"index": index, "name": name, "product": name.replace(" ", "-"), "uuid": "GPU-%d" % index,
            "memory_mib": memory, "pci_bus_id": "00000000:%02X:00.0" % (0x18 + index), "pci_class": "0x030200",
            "compute_capability": cc, "family": None,
            "mig": ({"current": None, "pending": None, "devices": None} if mig_mode is None else
                    {"current": mig_mode, "pending": mig_mode, "devices": list(migs or []) if mig_mode else []})}


A100_3G = mig("3g.20gb", 20096, 42, 3, 3, (3, 2, 0, 0, 0))
GB200_MIGS = [mig("1g.23gb+me", 23296, 20, 1, 1, (1, 1, 0, 1, 1)), mig("1g.23gb", 23296, 20, 1, 1, (1, 0, 0, 0, 0)),
              mig("2g.46gb", 46848, 40, 2, 2, (2, 1, 0, 1, 0)), mig("3g.93gb", 93952, 60, 3, 3, (3, 2, 0, 2, 0))]
KINDS = [
    [device(i, "NVIDIA H100 80GB HBM3", 81559, "9.0", 0) for i in range(8)],
    [device(0, "NVIDIA A100-SXM4-40GB", 40960, "8.0", 1, [A100_3G, A100_3G])]
    + [device(i, "NVIDIA A100-SXM4-40GB", 40960, "8.0", 1, [A100_3G] * 2) for i in range(1, 4)],
    [device(0, "Tesla T4", 15360, "7.5", None)],
    [device(i, "NVIDIA B200", 183359, "10.0", 0) for i in range(8)],
    [device(0, "NVIDIA GB200", 189471, "10.0", 1, GB200_MIGS)]
    + [device(i, "NVIDIA GB200", 189471, "10.0", 0) for i in range(1, 4)],
]


def cluster(count):
    """(hostvars, node objects, [(node name, label facts)]) of ``count`` GPU hosts, node name = host name."""
    hostvars, nodes, requests = {}, [], []
    for index in range(count):
        name = "gpu-%05d" % index
        devices = KINDS[index % len(KINDS)]
        gpu = {"present": True, "count": len(devices), "source": "nvml", "driver_version": "570.133.20",
               "cuda_driver_version": "12.8", "machine": "Bench Node", "devices": devices}
        address = "10.%d.%d.%d" % (index >> 16, (index >> 8) & 255, index & 255)
        hostvars[name] = {"ansible_facts": {"nvidia_gpu": gpu, "hostname": name, "all_ipv4_addresses": [address]}}
        nodes.append({"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
                      "status": {"allocatable": {"nvidia.com/gpu": "8"}, "addresses": []}})
        requests.append((name, label_facts(gpu)))
    return hostvars, nodes, requests


def settings(count):
    return dict(
        defaults={"device_list_strategy": "envvar"},
        configs={"t4-shared": {"sharing_strategy": "time-slicing", "replicas": 4},
                 "mixed": {"mig_strategy": "mixed", "sharing_strategy": "time-slicing", "rename_by_default": True,
                           "sharing_resources": [{"name": "nvidia.com/mig-1g.23gb.me", "replicas": 2}]},
                 "a100-mixed": {"mig_strategy": "mixed"},
                 "mps": {"sharing_strategy": "mps", "replicas": 2}},
        product_configs={"Tesla-T4": "t4-shared", "NVIDIA-GB200": "mixed", "NVIDIA-A100-SXM4-40GB": "a100-mixed"},
        node_configs=dict(("gpu-%05d" % i, "mps") for i in range(3, count, 10)))


def best(repeat, work):
    times = []
    result = None
    for _i in range(repeat):
        start = time.perf_counter()
        result = work()
        times.append(time.perf_counter() - start)
    return min(times), result


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n", maxsplit=1)[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    hostvars, nodes, requests = cluster(args.nodes)
    config = settings(args.nodes)

    t_resolve, resolved = best(args.repeat, lambda: dpc.resolve(**config))

    def labels():
        model = NodeModel(resolved)
        return [labels_from_facts(facts, model=model, node_name=name) for name, facts in requests]

    def models():
        model = NodeModel(resolved)
        return [model.node(facts, name) for name, facts in requests]

    t_labels, all_labels = best(args.repeat, labels)
    t_model, all_models = best(args.repeat, models)
    t_capacity, rows = best(args.repeat, lambda: gpu_node_capacity(nodes, list(hostvars), hostvars, resolved))

    n = args.nodes
    keys = sum(len(one) for one in all_labels)
    print("node model, %d GPU nodes (%d kinds in turn), best of %d, in-process:" % (n, len(KINDS), args.repeat))
    print("  resolve the settings once      %8.1f ms" % (t_resolve * 1000))
    print("  labels (k8s_gpu_label)         %8.1f ms  %6.1f us/node  (%d labels)" % (
        t_labels * 1000, t_labels / n * 1e6, keys))
    print("  model (config, labels, alloc.) %8.1f ms  %6.1f us/node" % (t_model * 1000, t_model / n * 1e6))
    print("  capacity check (filter)        %8.1f ms  %6.1f us/node  (%d rows, %d ok)" % (
        t_capacity * 1000, t_capacity / n * 1e6, len(rows), sum(1 for r in rows if r["ok"])))
    configs = {}
    for one in all_models:
        configs[one["config"]] = configs.get(one["config"], 0) + 1
    print("  configs: %s" % ", ".join("%s %d" % item for item in sorted(configs.items())))
    met = t_model < TARGET_S and t_labels < TARGET_S
    print("target: the model for %d nodes under %.0f s: %s" % (n, TARGET_S, "met" if met else "MISSED"))
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
