"""The decisions of the k8s_nodes inventory plugin: node records, GPU selection, addresses, connection options.

Label keys: the GPU node selection of NVIDIA/k8s-device-plugin's chart (``deployments/helm/nvidia-device-plugin/
values.yaml``, node affinity on NFD's ``feature.node.kubernetes.io/pci-10de.present=true`` or GFD's
``nvidia.com/gpu.present=true``); node addresses: ``NodeAddressType`` in kubernetes/api
``core/v1/types.go``; control-plane role labels: kubeadm ``constants.go`` (``LabelNodeRoleControlPlane``,
and ``node-role.kubernetes.io/master`` before 1.24).
"""
import pytest

from ansible_collections.kubegpu.nvidia.plugins.module_utils.errors import InputError
from ansible_collections.kubegpu.nvidia.plugins.module_utils.k8s_client import AUTH_ARG_SPEC
from ansible_collections.kubegpu.nvidia.plugins.module_utils.k8s_inventory import (
    AUTH_OPTIONS, auth_params, check_selection, connection_vars, empty_message, node_record, plan_hosts, select,
    skipped_message)


def node(name, labels=None, addresses=None, **status):
    return {"metadata": {"name": name, "labels": labels or {}},
            "spec": {}, "status": dict(status, addresses=addresses or [])}


def rec(name, labels=None, **addresses):
    return node_record(node(name, labels, [{"type": kind, "address": value} for kind, value in addresses.items()]))


NODES = [
    rec("nfd", {"feature.node.kubernetes.io/pci-10de.present": "true"}, InternalIP="10.0.0.1"),
    rec("gfd", {"nvidia.com/gpu.present": "true"}, InternalIP="10.0.0.2"),
    rec("gfd-false", {"nvidia.com/gpu.present": "false"}, InternalIP="10.0.0.3"),
    rec("cpu", {}, InternalIP="10.0.0.4"),
    rec("cp", {"node-role.kubernetes.io/control-plane": ""}, InternalIP="10.0.0.5"),
    rec("old-master", {"node-role.kubernetes.io/master": ""}, InternalIP="10.0.0.6"),
]


@pytest.mark.parametrize("selection, expected", [
    ("gpu_labels", ["nfd", "gfd"]),
    ("nfd", ["nfd"]),
    ("gpu_present", ["gfd"]),
    ("workers", ["nfd", "gfd", "gfd-false", "cpu"]),
    ("label_selector", ["nfd", "gfd", "gfd-false", "cpu", "cp", "old-master"]),  # the API selected them
])
def test_selection(selection, expected):
    assert [r["name"] for r in select(NODES, selection)] == expected


def test_node_record_keeps_the_first_address_of_each_type_and_the_node_s_data():
    record = node_record({
        "metadata": {"name": "n1", "labels": {"a": "b"}, "annotations": {"big": "x" * 100}},
        "spec": {"taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}], "unschedulable": True},
        "status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.1"},
                                 {"type": "InternalIP", "address": "fd00::1"},
                                 {"type": "Hostname", "address": "n1"}],
                   "capacity": {"nvidia.com/gpu": "8"}, "allocatable": {"nvidia.com/gpu": "7"},
                   "nodeInfo": {"kubeletVersion": "v1.31.4"}}})
    assert record == {"name": "n1", "labels": {"a": "b"}, "unschedulable": True,
                      "taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}],
                      "addresses": {"InternalIP": "10.0.0.1", "Hostname": "n1"},
                      "capacity": {"nvidia.com/gpu": "8"}, "allocatable": {"nvidia.com/gpu": "7"},
                      "node_info": {"kubeletVersion": "v1.31.4"}}
    assert node_record({"metadata": {"name": "bare"}})["addresses"] == {}


def test_hosts_by_name_with_their_address_and_the_nodes_without_one():
    records = [rec("b", InternalIP="10.0.0.2", Hostname="b"), rec("a", InternalIP="10.0.0.1"), rec("c", Hostname="c")]
    hosts, skipped = plan_hosts(records, "InternalIP")
    assert [(r["name"], address) for r, address in hosts] == [("a", "10.0.0.1"), ("b", "10.0.0.2")]
    assert skipped == ["c"]
    hosts, skipped = plan_hosts(records, "Hostname")
    assert [pair[1] for pair in hosts] == ["b", "c"] and skipped == ["a"]
    assert skipped_message(["c"], "InternalIP", records) == (
        "node c has no InternalIP address (addresses: Hostname): left out of gpu_nodes (address_type chooses "
        "another type; strict: true fails instead)")
    assert skipped_message(["a", "c"], "ExternalIP", records, strict=True) == (
        "nodes a, c have no ExternalIP address (addresses: Hostname, InternalIP) and strict is true (address_type "
        "chooses another type)")
    assert "no addresses at all" in skipped_message(["x"], "InternalIP", [rec("x")])


def test_two_nodes_with_one_address_are_refused():
    with pytest.raises(InputError, match=r"^nodes a and b both have the InternalIP 10.0.0.9: "):
        plan_hosts([rec("b", InternalIP="10.0.0.9"), rec("a", InternalIP="10.0.0.9")], "InternalIP")
    with pytest.raises(InputError, match="address_type must be one of InternalIP, ExternalIP, "):
        plan_hosts([], "internal")


@pytest.mark.parametrize("selection, label_selector, message", [
    ("label_selector", None, "gpu_selection: label_selector needs the option label_selector"),
    ("nfd", "pool=a", "label_selector 'pool=a' is used only with gpu_selection: label_selector"),
    ("gpus", None, "gpu_selection must be one of gpu_labels, nfd, gpu_present, label_selector, workers, not 'gpus'"),
])
def test_a_selection_that_cannot_work(selection, label_selector, message):
    with pytest.raises(InputError, match="^" + message.replace("(", r"\(")):
        check_selection(selection, label_selector)


def test_a_workable_selection_passes():
    check_selection("label_selector", "pool=a")
    check_selection("gpu_labels", None)


def test_the_empty_selection_message_names_the_selection():
    assert empty_message("label_selector", "pool=h100", 0) == (
        "no node matches the label selector pool=h100: gpu_nodes is empty")
    assert empty_message("nfd", None, 1) == (
        "no node matches the GPU selection (feature.node.kubernetes.io/pci-10de.present=true) among the cluster's "
        "1 node: gpu_nodes is empty")


def test_options_fall_back_to_the_k8s_auth_environment_as_the_modules_do():
    options = dict.fromkeys(AUTH_OPTIONS)
    options["context"] = "given"
    environ = {"K8S_AUTH_KUBECONFIG": "/env/kubeconfig", "K8S_AUTH_CONTEXT": "from-env",
               "K8S_AUTH_VERIFY_SSL": "no", "K8S_AUTH_REQUEST_TIMEOUT": "7.5",
               "K8S_AUTH_IMPERSONATE_GROUPS": "a, b", "K8S_AUTH_HOST": ""}
    params = auth_params(options, environ, AUTH_ARG_SPEC)
    assert params["kubeconfig"] == "/env/kubeconfig"
    assert params["context"] == "given"
    assert params["validate_certs"] is False
    assert params["request_timeout"] == 7.5
    assert params["impersonate_groups"] == ["a", "b"]
    assert params["host"] is None
    assert auth_params(dict.fromkeys(AUTH_OPTIONS), {}, AUTH_ARG_SPEC)["request_timeout"] == 30
    with pytest.raises(InputError, match="K8S_AUTH_VALIDATE_CERTS must be a boolean, not 'maybe'"):
        auth_params(dict.fromkeys(AUTH_OPTIONS), {"K8S_AUTH_VALIDATE_CERTS": "maybe"}, AUTH_ARG_SPEC)


def test_every_connection_option_of_the_modules_is_one_of_the_plugin_s():
    assert set(AUTH_OPTIONS) == set(AUTH_ARG_SPEC)


def test_connection_vars_leave_the_token_out():
    options = dict.fromkeys(AUTH_OPTIONS)
    options.update(kubeconfig="/k", api_key="secret", validate_certs=False, impersonate_groups=[], context="")
    assert connection_vars(options) == {"kubegpu_kubeconfig": "/k", "kubegpu_validate_certs": False}
