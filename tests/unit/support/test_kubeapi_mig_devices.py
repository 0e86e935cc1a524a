"""tests/support/kubeapi: the MIG devices the DRA kubelet-plugin stand-in publishes, from a node's MIG layout.

The layout is read as the fake NVML holds it (tests/support/fakenvml/fakenvml.c: mig_save's state lines, MIG
devices in GPU-instance id order, one per compute instance, `<c>c.` before the profile of a compute instance smaller
than its GPU instance; mig_seed's first free placement in the listed order before a state exists; add_mig's UUIDs).
Names follow kubernetes-sigs/dra-driver-nvidia-gpu v0.4.1 cmd/gpu-kubelet-plugin/mig.go ToCanonicalName
(`gpu-<parent minor>-mig-<profile without dots, RFC 1123>-<GPU-instance profile id>-<placement start>`).
"""
import json

import pytest

from kubeapi import dra, kubelet

A100 = {"productName": "NVIDIA A100-SXM4-40GB", "memory": "40960Mi", "architecture": "Ampere",
        "cudaComputeCapability": "8.0"}


def node(annotations):
    meta = {"name": "n", "resourceVersion": "1", "labels": {}, "annotations": dict(annotations)}
    return {"metadata": meta}


@pytest.mark.parametrize("profile, profile_id, start, name", [
    ("1g.5gb", 19, 0, "gpu-0-mig-1g5gb-19-0"),
    ("1g.10gb+me", 20, 3, "gpu-0-mig-1g10gb-me-20-3"),
    ("1c.3g.20gb", 9, 4, "gpu-0-mig-1c3g20gb-9-4"),
    ("7g.141gb", 0, 0, "gpu-0-mig-7g141gb-0-0"),
])
def test_mig_device_names(profile, profile_id, start, name):
    assert dra.mig_device_name(0, profile, profile_id, start) == name


def test_the_state_file_orders_devices_by_gpu_instance_id_one_per_compute_instance(tmp_path):
    # a 4x A100-40GB profile with MIG on; the state (mig_save's lines) holds, on GPU 0, GPU instance 2 (3g.20gb at
    # 4, two 1-slice compute instances) written before GPU instance 1 (2g.10gb at 0); GPU 1 MIG on, nothing created
    state = tmp_path / "state"
    config = "a100x4-mig"
    from fakenvml.profile import load_profile
    uuids = [gpu["uuid"] for gpu in load_profile(config)["gpus"]]
    state.write_text("writes = 3\nmode = 0 %s 1 1\ngi = 0 2 9 4 4\nci = 0 2 0 1\nci = 0 2 1 1\ngi = 0 1 14 0 2\n"
                     "ci = 0 1 0 2\nmode = 1 %s 1 1\nmode = 2 %s 0 0\nmode = 3 %s 0 0\n" % tuple(uuids))
    gpus = [dict(A100, uuid=uuid, minor=i, pciBusID="0000:0%d:00.0" % i, brand="Nvidia", driverVersion="570.1.2",
                 cudaDriverVersion="12.8") for i, uuid in enumerate(uuids)]
    annotated = node({"kubegpu.io/simulated-nvml": json.dumps({"config": config, "state": str(state)})})
    layout = kubelet.mig_instances(annotated, gpus)
    assert [[one["profile"] for one in gpu] if gpu is not None else None for gpu in layout] == [
        ["2g.10gb", "1c.3g.20gb", "1c.3g.20gb"], [], None, None]
    assert [(one["profile_id"], one["start"], one["size"]) for one in layout[0]] == [(14, 0, 2), (9, 4, 4), (9, 4, 4)]
    # the device plugin's layout from the same state: one entry per GPU instance (unchanged)
    assert kubelet.nvml_layout(annotated, 4) == [["3g.20gb", "2g.10gb"], [], None, None]
    devices = dra.mig_devices(gpus[0], layout[0])
    # the MIG device index is NVML's (instance id order); the UUID carries it (fakenvml.c add_mig)
    assert [(d["name"], d["attributes"]["uuid"]["string"][-4:]) for d in devices] == [
        ("gpu-0-mig-1c3g20gb-9-4", "0002"), ("gpu-0-mig-1c3g20gb-9-4", "0003"), ("gpu-0-mig-2g10gb-14-0", "0001")]


def test_without_a_state_the_profiles_are_placed_as_the_fake_seeds_them():
    annotated = node({"kubegpu.io/simulated-mig-devices": json.dumps([["1g.5gb", "3g.20gb", "2g.10gb"], None,
                                                                      ["3g.20gb", "1g.5gb", "2g.10gb"]])})
    gpus = [dict(A100, uuid="GPU-%d" % i) for i in range(3)]
    layout = kubelet.mig_instances(annotated, gpus)
    # 1g.5gb at 0; 3g.20gb at the first free of 0 and 4; 2g.10gb at the first free of 0, 2 and 4
    assert [(one["profile"], one["start"], one["size"]) for one in layout[0]] == [
        ("1g.5gb", 0, 1), ("3g.20gb", 4, 4), ("2g.10gb", 2, 2)]
    assert layout[1] is None
    # a geometry the placements cannot hold (2g.10gb after 3g.20gb at 0 and 1g.5gb at 4; mig_seed gives up on it):
    # the stand-in publishes no MIG device of that GPU
    assert layout[2] == []
