"""Test fixtures: the MIG GPU-instance profile tables of four GPU models, as an NVML reader reports them.

These are fixtures for the planner's tests (and for a fake NVML that wants the same tables); the
collection itself never holds such a table: the module reads each GPU's own from NVML
(nvmlDeviceGetGpuInstanceProfileInfo, nvmlDeviceGetGpuInstancePossiblePlacements).

Sources:
* PCI device ids: the device filters of NVIDIA/gpu-operator v26.7.0 assets/state-mig-manager/0400_configmap.yaml
  (all-balanced: A100-40GB 0x20B010DE, A100-80GB/H100-80GB 0x20B210DE/0x233010DE, H200 0x233510DE; go-nvml's
  mock says 0x233310DE for its H200, the GPU Operator keys H200 141GB by 0x233510DE);
* instance counts and memory (MiB): NVIDIA/go-nvml pkg/nvml/mock/gpus/a100.go, h100.go, h200.go;
* placements: ../shared/REFERENCE.md 8.1 (A100-SXM4-40GB as `nvidia-smi mig -lgip -p` reports it; the
  80 GB parts, H100 and H200 have the same shape; go-nvml's mock H100/H200 placements are wrong);
* profile ids: NVML's profile info ids as nvidia-smi lists them (19 1g, 20 1g+me, 15 1g double memory,
  14 2g, 9 3g, 5 4g, 0 7g), not the NVML_GPU_INSTANCE_PROFILE_* constants.
"""

# (profile suffix role, NVML profile info id, slices, max instances, placements (start, size))
_SHAPE = [
    ("1g", 19, 1, 7, [(s, 1) for s in range(7)]),
    ("1g+me", 20, 1, 1, [(s, 1) for s in range(7)]),
    ("1g2", 15, 1, 4, [(0, 2), (2, 2), (4, 2), (6, 2)]),
    ("2g", 14, 2, 3, [(0, 2), (2, 2), (4, 2)]),
    ("3g", 9, 3, 2, [(0, 4), (4, 4)]),
    ("4g", 5, 4, 1, [(0, 4)]),
    ("7g", 0, 7, 1, [(0, 8)]),
]


def _table(names, memory):
    table = {}
    for (role, pid, slices, count, placements), name, mib in zip(_SHAPE, names, memory):
        table[name] = {"id": pid, "slices": slices, "instances": count, "memory_mib": mib,
                       "placements": list(placements)}
    return table


MODELS = {
    "A100-40GB": {
        "name": "NVIDIA A100-SXM4-40GB", "pci_device_id": 0x20B010DE, "memory_mib": 40960,
        "profiles": _table(["1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"],
                           [4864, 4864, 9856, 9856, 19968, 19968, 40192]),
    },
    "A100-80GB": {
        "name": "NVIDIA A100-SXM4-80GB", "pci_device_id": 0x20B210DE, "memory_mib": 81920,
        "profiles": _table(["1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"],
                           [9856, 9856, 19968, 19968, 40192, 40192, 80384]),
    },
    "H100-80GB": {
        "name": "NVIDIA H100 80GB HBM3", "pci_device_id": 0x233010DE, "memory_mib": 81920,
        "profiles": _table(["1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"],
                           [10240, 10240, 20480, 20480, 40960, 40960, 81920]),
    },
    "H200": {
        "name": "NVIDIA H200", "pci_device_id": 0x233510DE, "memory_mib": 144384,
        "profiles": _table(["1g.18gb", "1g.18gb+me", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"],
                           [18432, 18432, 35840, 35840, 72704, 72704, 144384]),
    },
}

T4 = {"name": "Tesla T4", "pci_device_id": 0x1EB810DE}


def gpu(model, index=0, current=False, pending=None, instances=None, processes=None):
    """A GPU as the reader gives it (mig_plan's docstring): ``model`` a key of MODELS, or "T4"."""
    if model == "T4":
        return {"index": index, "name": T4["name"], "pci_device_id": T4["pci_device_id"], "mig_capable": False,
                "mode": {"current": False, "pending": False}, "profiles": None, "instances": [],
                "processes": list(processes or [])}
    spec = MODELS[model]
    return {"index": index, "name": spec["name"], "pci_device_id": spec["pci_device_id"], "mig_capable": True,
            "mode": {"current": current, "pending": current if pending is None else pending},
            "profiles": spec["profiles"], "instances": list(instances or []), "processes": list(processes or [])}


def node(model, count=8, **kwargs):
    return [gpu(model, index, **kwargs) for index in range(count)]


def instances_from(created, first_id=1):
    """The GPU instances (one full compute instance each) a plan's ``create`` list leaves on a GPU."""
    result = []
    for number, item in enumerate(created):
        slices = int(item["profile"].split("g.")[0].split(".")[-1])
        result.append({"id": first_id + number, "profile": item["profile"], "placement": tuple(item["placement"]),
                       "compute_instances": [{"id": 0, "slices": slices}]})
    return result
