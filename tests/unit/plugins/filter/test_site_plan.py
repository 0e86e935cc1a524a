"""A site run's cross-play decisions: the inventory check, and which nodes are validated or reported from records."""
import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.kubegpu.nvidia.plugins.filter.site_plan import inventory_problem, site_uses_api, validation_plan
from ansible_collections.kubegpu.nvidia.plugins.module_utils import site_plan

HOSTS = ["gpu-a", "gpu-b", "gpu-c"]


@pytest.mark.parametrize("groups, problem", [
    ({"all": ["x"], "ungrouped": [], "workers": ["x"]},
     "the inventory has no group gpu_nodes (its groups: workers): put the GPU worker nodes in a group named "
     "gpu_nodes and the host that reaches the Kubernetes API in k8s_control"),
    ({"all": [], "ungrouped": []},
     "the inventory has no group gpu_nodes (its groups: none): put the GPU worker nodes in a group named gpu_nodes "
     "and the host that reaches the Kubernetes API in k8s_control"),
    ({"gpu_nodes": []}, "group gpu_nodes has no hosts: put the GPU worker nodes in it"),
    ({"gpu_nodes": ["a"], "k8s_control": []},
     "group k8s_control has no hosts: put the host that reaches the Kubernetes API in it, or remove the group to "
     "use localhost"),
    ({"gpu_nodes": ["a"]}, ""),
    ({"gpu_nodes": ["a"], "k8s_control": ["c"]}, ""),
])
def test_inventory_problem(groups, problem):
    assert inventory_problem(groups) == problem


def test_inventory_problem_refuses_what_is_not_groups():
    with pytest.raises(AnsibleFilterError):
        inventory_problem(["gpu_nodes"])


# (ansible_run_tags, ansible_skip_tags) -> whether the run talks to the Kubernetes API. Ansible gives run tags
# ["all"] without --tags; a --tags run lists what was named. The plays: preflight and facts (always), driver,
# mig, toolkit/runtime, labels, device_plugin, dra, dcgm_exporter, tenants, validation, summary (always).
@pytest.mark.parametrize("run_tags, skip_tags, uses", [
    (["all"], [], True),
    (None, None, True),
    (["labels"], [], True),
    (["device_plugin", "validation"], [], True),
    (["validation"], [], True),
    (["dcgm_exporter"], [], True),
    (["mig"], [], True),  # the MIG play evicts GPU work and writes nvidia.com/mig.config.state
    (["tenants"], [], True),  # the tenants play writes namespaces, quotas and RBAC
    (["dra"], [], True),  # the DRA driver role applies its objects and lists the ResourceSlices
    (["facts", "tenants"], [], True),
    (["facts", "labels"], [], True),
    (["driver", "device_plugin"], [], True),
    (["preflight"], [], True),  # asks for the checks
    (["tagged"], [], True),  # every tagged play
    # the node plays alone
    (["facts"], [], False),
    (["driver"], [], False),
    (["toolkit"], [], False),
    (["runtime"], [], False),
    (["facts", "driver", "toolkit"], [], False),
    (["summary"], [], False),
    # --skip-tags wins over --tags and over all
    (["health"], [], True),  # the health gate writes the health label and taint
    (["driver", "health"], [], True),
    (["all"], ["health", "mig", "labels", "device_plugin", "dra", "dcgm_exporter", "tenants", "validation"], False),
    (["all"], ["health", "labels", "device_plugin", "dra", "dcgm_exporter", "tenants", "validation"], True),  # mig
    (["all"], ["health", "mig", "labels", "device_plugin", "dcgm_exporter", "tenants", "validation"], True),  # dra
    (["all"], ["labels", "device_plugin", "validation"], True),  # the health gate, dcgm_exporter and tenants still run
    (["all"], ["health", "labels", "device_plugin", "dcgm_exporter", "validation"], True),  # the tenants role still runs
    (["all"], ["labels", "device_plugin"], True),
    (["labels"], ["labels"], False),
    (["preflight"], ["preflight"], False),
    (["all"], ["all"], False),
    (["all"], ["tagged"], False),
    (["driver"], ["preflight"], False),
])
def test_site_uses_api(run_tags, skip_tags, uses):
    assert site_uses_api(run_tags, skip_tags) is uses


def test_site_uses_api_refuses_what_is_not_tags():
    with pytest.raises(AnsibleFilterError, match="site_uses_api expects run_tags as a list of tags, not str"):
        site_uses_api("labels")


@pytest.mark.parametrize("run_tags, skip_tags, runs", [
    # the driver play is tagged driver, its role's tasks nvidia_driver and nvidia_driver_install (playbooks/site.yml)
    (["all"], [], True),
    (None, None, True),
    (["driver"], [], True),
    (["nvidia_driver_install"], [], True),
    (["labels", "dra"], [], False),
    (["all"], ["driver"], False),
    (["tagged"], [], True),
    (["all"], ["tagged"], False),
])
def test_driver_play_runs(run_tags, skip_tags, runs):
    assert site_plan.driver_play_runs(run_tags, skip_tags) is runs


def listed(name, changed=False):
    return {"name": name, "changed": changed, "labels": {}, "allocatable": {}, "node_info": {}, "annotations": {}}


def plan(hostvars_extra=None, changed_nodes=(), active=None, revalidate=False):
    hostvars = dict((host, dict({"kubegpu_node_name": "node-" + host}, **(hostvars_extra or {}).get(host, {})))
                    for host in HOSTS)
    nodes = [listed("node-" + host, "node-" + host in changed_nodes) for host in HOSTS]
    result = validation_plan(HOSTS, hostvars, nodes, active, revalidate)
    return result["nodes"], [node["name"] for node in result["known"]]


def test_every_gpu_host_s_node_is_validated_and_untouched_nodes_may_be_reported_from_their_records():
    assert plan(active=HOSTS) == (["node-gpu-a", "node-gpu-b", "node-gpu-c"],
                                  ["node-gpu-a", "node-gpu-b", "node-gpu-c"])
    # the labels play did not run (tags): nothing tells of a host that left the run
    assert plan()[1] == ["node-gpu-a", "node-gpu-b", "node-gpu-c"]


@pytest.mark.parametrize("kwargs, known", [
    ({"hostvars_extra": {"gpu-a": {"nvidia_driver_changed": True}}}, ["node-gpu-b", "node-gpu-c"]),
    ({"hostvars_extra": {"gpu-b": {"nvidia_container_toolkit_changed": "True"}}}, ["node-gpu-a", "node-gpu-c"]),
    ({"changed_nodes": ["node-gpu-c"]}, ["node-gpu-a", "node-gpu-b"]),
    ({"active": ["gpu-a", "gpu-c"]}, ["node-gpu-a", "node-gpu-c"]),
    ({"revalidate": True}, []),
])
def test_nodes_the_run_changed_or_whose_host_left_it_get_a_pod(kwargs, known):
    kwargs.setdefault("active", HOSTS)
    assert plan(**kwargs)[1] == known


def test_a_host_without_a_recorded_node_name_is_its_inventory_name_and_a_node_is_listed_once():
    result = validation_plan(["a", "b"], {"a": {}, "b": {"kubegpu_node_name": "a"}}, [listed("a")])
    assert result == {"nodes": ["a"], "known": [listed("a")], "resources": {}}


def test_a_dra_host_is_left_to_the_dra_driver_role_s_claim_validation():
    # docs/dra.md: a DRA node advertises no nvidia.com/gpu; the nvidia_dra_driver role validates it with a claim
    hostvars = {"a": {}, "b": {"kubegpu_gpu_allocation": "dra"}}
    assert validation_plan(["a", "b"], hostvars, [listed("a"), listed("b")]) == {"nodes": ["a"], "known": [listed("a")], "resources": {}}
    with pytest.raises(AnsibleFilterError, match="validation_plan: host b sets kubegpu_gpu_allocation to 'gpus'"):
        validation_plan(["a", "b"], {"a": {}, "b": {"kubegpu_gpu_allocation": "gpus"}})


# The device plugin v0.20's mixed strategy (internal/rm/device_map.go) advertises a MIG-enabled GPU's devices as
# nvidia.com/mig-<profile> and only GPUs without MIG as nvidia.com/gpu: a node without any nvidia.com/gpu left
# cannot run a pod that asks for one, so its pod asks for its most plentiful MIG device (the smallest profile).
@pytest.mark.parametrize("expected, resource", [
    ({"nvidia.com/mig-1g.5gb": 8, "nvidia.com/mig-2g.10gb": 4, "nvidia.com/mig-3g.20gb": 4}, "nvidia.com/mig-1g.5gb"),
    ({"nvidia.com/mig-3g.20gb": 2, "nvidia.com/mig-2g.10gb": 2}, "nvidia.com/mig-2g.10gb"),
    # a GPU without MIG next to MIG GPUs: the pod keeps nvidia.com/gpu
    ({"nvidia.com/gpu": 1, "nvidia.com/mig-1g.5gb": 7}, None),
    ({"nvidia.com/gpu.shared": 4}, None),
    ({"nvidia.com/gpu": 8}, None),
    ({}, None),
    (None, None),
])
def test_a_node_whose_gpus_are_all_mig_devices_is_validated_with_a_mig_device(expected, resource):
    capacity = [{"node": "node-gpu-a", "expected": expected}, {"node": "elsewhere", "expected": expected},
                {"node": "node-gpu-b", "expected": {"nvidia.com/gpu": 8}}]
    hostvars = dict((host, {"kubegpu_node_name": "node-" + host}) for host in HOSTS)
    result = validation_plan(HOSTS, hostvars, [], None, False, capacity)
    # only the run's nodes, only those whose pod asks for another resource
    assert result["resources"] == ({"node-gpu-a": resource} if resource else {})
