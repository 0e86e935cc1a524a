"""Filter kubegpu.nvidia.gpu_node_requests: inventory hosts to k8s_gpu_label's `nodes` items."""
import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.kubegpu.nvidia.plugins.filter import gpu_node_requests as filter_module
from ansible_collections.kubegpu.nvidia.plugins.filter.gpu_node_requests import FilterModule, gpu_node_requests

H100 = {"present": True, "count": 1, "source": "nvml", "driver_version": "535.183.01", "cuda_driver_version": "12.2",
        "machine": "DGX-H100", "devices": [{"index": 0, "uuid": "GPU-1", "pci_bus_id": "00000000:17:00.0",
                                            "name": "NVIDIA H100 80GB HBM3", "product": "NVIDIA-H100-80GB-HBM3",
                                            "memory_mib": 81559, "compute_capability": "9.0",
                                            "pci_class": "0x030200", "mig": {"current": 0, "pending": 0}}]}


def test_a_gpu_host_becomes_one_request_with_its_names_addresses_and_label_facts():
    hostvars = {"gpu1": {"ansible_host": "10.0.0.7", "ansible_facts": {
        "nvidia_gpu": H100, "hostname": "gpu1", "fqdn": "gpu1.example.com", "nodename": "gpu1",
        "default_ipv4": {"address": "10.0.0.7"}, "all_ipv4_addresses": ["10.0.0.7", "172.17.0.1", "127.0.0.1"]}}}
    assert gpu_node_requests(["gpu1"], hostvars) == [{
        "name": "gpu1",
        "host": "gpu1",
        "aliases": ["gpu1", "10.0.0.7", "gpu1.example.com", "172.17.0.1"],
        "facts": {"present": True, "source": "nvml", "driver_version": "535.183.01", "cuda_driver_version": "12.2",
                  "machine": "DGX-H100",
                  "devices": [{"name": "NVIDIA H100 80GB HBM3", "product": "NVIDIA-H100-80GB-HBM3", "memory_mib": 81559,
                               "compute_capability": "9.0", "pci_class": "0x030200",
                               "mig": {"current": 0, "pending": 0}}]}}]


def test_the_node_name_comes_from_kubegpu_node_name_and_the_host_stays_the_inventory_name():
    hostvars = {"lab-h100": {"kubegpu_node_name": "ip-10-0-0-7", "k8s_gpu_node_name": "old",
                             "ansible_facts": {"nvidia_gpu": H100}}}
    (request,) = gpu_node_requests(["lab-h100"], hostvars)
    assert (request["name"], request["host"]) == ("ip-10-0-0-7", "lab-h100")
    assert request["aliases"] == ["lab-h100"]


@pytest.mark.parametrize("variable", ["k8s_gpu_node_name", "k8s_device_plugin_node_name", "k8s_node_name"])
def test_the_node_name_variables_of_earlier_releases_still_count_with_a_deprecation(monkeypatch, variable):
    warnings = []
    monkeypatch.setattr(filter_module, "deprecated", warnings.append)
    hostvars = {"lab-h100": {variable: "ip-10-0-0-7", "ansible_facts": {"nvidia_gpu": H100}}}
    (request,) = gpu_node_requests(["lab-h100"], hostvars)
    assert request["name"] == "ip-10-0-0-7"
    assert warnings == ["the host variable %s is deprecated: set kubegpu_node_name instead (host lab-h100)" % variable]


def test_hosts_without_gpus_or_facts_are_left_out_in_order():
    hostvars = {"a": {"ansible_facts": {"nvidia_gpu": H100}}, "cpu": {"ansible_facts": {"nvidia_gpu": {"present": False}}},
                "nofacts": {}, "b": {"ansible_facts": {"nvidia_gpu": H100}}}
    assert [r["name"] for r in gpu_node_requests(["b", "cpu", "nofacts", "a"], hostvars)] == ["b", "a"]
    assert gpu_node_requests([], hostvars) == []


def test_missing_device_fields_are_none():
    hostvars = {"old": {"ansible_facts": {"nvidia_gpu": {"present": True, "devices": [{"name": "Tesla T4"}]}}}}
    (request,) = gpu_node_requests("old", hostvars)
    assert request["facts"]["devices"] == [{"name": "Tesla T4", "product": None, "memory_mib": None,
                                            "compute_capability": None, "pci_class": None, "mig": None}]
    assert request["facts"]["driver_version"] is None


def test_an_unknown_host_is_a_clear_error():
    with pytest.raises(AnsibleFilterError, match="gpu_node_requests: nope is not a host of the inventory"):
        gpu_node_requests(["nope"], {})


def test_the_filter_is_registered():
    assert FilterModule().filters()["gpu_node_requests"] is gpu_node_requests


def test_identical_neighbouring_devices_become_one_entry_with_a_count():
    t4 = {"name": "Tesla T4", "product": "Tesla-T4", "memory_mib": 15360, "compute_capability": "7.5",
          "pci_class": "0x030200", "mig": None}
    gpus = dict(H100, devices=[dict(H100["devices"][0], index=i, uuid="GPU-%d" % i) for i in range(8)]
                + [dict(t4, index=8), dict(t4, index=9)]
                + [dict(H100["devices"][0], index=10, mig={"current": 1, "pending": 1})])
    (request,) = gpu_node_requests(["gpu1"], {"gpu1": {"ansible_facts": {"nvidia_gpu": gpus}}})
    keys = ("name", "product", "memory_mib", "compute_capability", "pci_class", "mig")
    h100 = dict((k, H100["devices"][0][k]) for k in keys)
    assert request["facts"]["devices"] == [
        dict(h100, count=8), dict(t4, count=2), dict(h100, mig={"current": 1, "pending": 1})]


ENGINES = {"copy": 1, "decoder": 0, "encoder": 0, "jpeg": 0, "ofa": 0}


def a100_mig(index, *profiles):
    """An A100 with MIG on and one MIG device per profile (unique slot, name and UUID each)."""
    return {"index": index, "uuid": "GPU-%d" % index, "name": "NVIDIA A100-SXM4-40GB", "product": "NVIDIA-A100-SXM4-40GB",
            "memory_mib": 40960, "compute_capability": "8.0", "pci_class": "0x030200",
            "mig": {"current": 1, "pending": 1, "devices": [
                {"slot": slot, "name": "NVIDIA A100-SXM4-40GB MIG " + profile, "profile": profile,
                 "uuid": "MIG-%d-%d" % (index, slot), "memory_mib": int(profile.split(".")[1][:-2]) * 1024,
                 "multiprocessors": 14 * int(profile[0]), "slices": {"gi": int(profile[0]), "ci": int(profile[0])},
                 "engines": ENGINES}
                for slot, profile in enumerate(profiles)]}}


def test_mig_devices_keep_what_the_labels_read_so_alike_gpus_still_share_an_entry():
    gpus = dict(H100, count=3, devices=[a100_mig(0, "3g.20gb", "3g.20gb"), a100_mig(1, "3g.20gb", "3g.20gb"),
                                        a100_mig(2, "1g.5gb")])
    (request,) = gpu_node_requests(["gpu1"], {"gpu1": {"ansible_facts": {"nvidia_gpu": gpus}}})
    entry = {"name": "NVIDIA A100-SXM4-40GB", "product": "NVIDIA-A100-SXM4-40GB", "memory_mib": 40960,
             "compute_capability": "8.0", "pci_class": "0x030200"}
    three = {"profile": "3g.20gb", "memory_mib": 20480, "multiprocessors": 42, "slices": {"gi": 3, "ci": 3},
             "engines": ENGINES}
    one = {"profile": "1g.5gb", "memory_mib": 5120, "multiprocessors": 14, "slices": {"gi": 1, "ci": 1},
           "engines": ENGINES}
    assert request["facts"]["devices"] == [
        dict(entry, count=2, mig={"current": 1, "pending": 1, "devices": [three] * 2}),
        dict(entry, mig={"current": 1, "pending": 1, "devices": [one]})]


def test_mig_devices_without_attributes_keep_profile_and_memory():
    device = a100_mig(0, "3g.20gb")
    device["mig"]["devices"] = [{"slot": 0, "profile": "3g.20gb", "uuid": "MIG-0", "memory_mib": None,
                                 "multiprocessors": None, "slices": None, "engines": None}]
    (request,) = gpu_node_requests(["gpu1"], {"gpu1": {"ansible_facts": {"nvidia_gpu": dict(H100, devices=[device])}}})
    assert request["facts"]["devices"][0]["mig"]["devices"] == [{"profile": "3g.20gb", "memory_mib": None}]


def test_a_dra_host_asks_for_the_dra_kubelet_plugin_label_and_a_device_plugin_host_does_not():
    # the label the GPU Operator v26.7 puts on the nodes of the DRA driver's kubelet plugin
    hostvars = {"dra": {"kubegpu_gpu_allocation": "dra", "ansible_facts": {"nvidia_gpu": H100}},
                "dp": {"kubegpu_gpu_allocation": "device_plugin", "ansible_facts": {"nvidia_gpu": H100}},
                "default": {"ansible_facts": {"nvidia_gpu": H100}}}
    dra, dp, default = gpu_node_requests(["dra", "dp", "default"], hostvars)
    assert dra["labels"] == {"nvidia.com/dra-kubelet-plugin": "true"}
    assert "labels" not in dp and "labels" not in default


def test_a_host_set_to_both_mechanisms_is_refused_naming_it():
    hostvars = {"h100": {"kubegpu_gpu_allocation": ["device_plugin", "dra"], "ansible_facts": {"nvidia_gpu": H100}}}
    with pytest.raises(AnsibleFilterError, match="^gpu_node_requests: host h100 sets kubegpu_gpu_allocation to both "):
        gpu_node_requests(["h100"], hostvars)
